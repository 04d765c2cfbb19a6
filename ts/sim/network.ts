/**
 * A simulated network between numbered nodes. Every message gets a random delay (so messages
 * are reordered), may be dropped or duplicated, and is lost when a partition separates its
 * ends at send or at delivery time. Delivery order is fully determined by the seed.
 */
import { SimErrorCode, simError } from './errors.js';
import type { SimRandom } from './rng.js';

export interface NetworkOptions {
  /** Delay range in virtual milliseconds (inclusive). */
  readonly minDelay: number;
  readonly maxDelay: number;
  /** Probability that a message is lost. */
  readonly dropRate: number;
  /** Probability that a message is delivered twice (each copy with its own delay). */
  readonly duplicateRate: number;
}

export interface InFlight<M> {
  readonly from: number;
  readonly to: number;
  readonly msg: M;
  readonly at: number;
  readonly seq: number;
}

export interface NetworkStats {
  sent: number;
  delivered: number;
  dropped: number;
  duplicated: number;
  partitioned: number;
}

function checkRate(name: string, p: number): void {
  if (!(p >= 0 && p <= 1)) throw simError(SimErrorCode.BAD_CONFIG, `${name} ${p} must be in [0, 1]`);
}

function before<M>(x: InFlight<M>, y: InFlight<M>): boolean {
  return x.at < y.at || (x.at === y.at && x.seq < y.seq);
}

/** A binary min-heap of messages ordered by (delivery time, send order). */
class DeliveryQueue<M> {
  items: InFlight<M>[] = [];
  push(m: InFlight<M>): void {
    const a = this.items;
    a.push(m);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(a[i]!, a[p]!)) break;
      [a[i], a[p]] = [a[p]!, a[i]!];
      i = p;
    }
  }
  peek(): InFlight<M> | undefined {
    return this.items[0];
  }
  pop(): InFlight<M> | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last !== undefined) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && before(a[l]!, a[m]!)) m = l;
        if (r < a.length && before(a[r]!, a[m]!)) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m]!, a[i]!];
        i = m;
      }
    }
    return top;
  }
  rebuild(items: InFlight<M>[]): void {
    this.items = [];
    for (const m of items) this.push(m);
  }
}

export class SimNetwork<M> {
  private queue = new DeliveryQueue<M>();
  private seq = 0;
  /** Group of each node; nodes in different groups cannot talk. Absent: group 0. */
  private group = new Map<number, number>();
  opts: NetworkOptions;
  readonly stats: NetworkStats = { sent: 0, delivered: 0, dropped: 0, duplicated: 0, partitioned: 0 };

  constructor(
    private readonly rng: SimRandom,
    opts: NetworkOptions,
  ) {
    this.opts = opts;
    this.setOptions(opts);
  }

  setOptions(opts: NetworkOptions): void {
    checkRate('dropRate', opts.dropRate);
    checkRate('duplicateRate', opts.duplicateRate);
    if (!(opts.minDelay >= 0 && opts.maxDelay >= opts.minDelay)) {
      throw simError(SimErrorCode.BAD_CONFIG, `delays [${opts.minDelay}, ${opts.maxDelay}] are not a range`);
    }
    this.opts = opts;
  }

  connected(a: number, b: number): boolean {
    return (this.group.get(a) ?? 0) === (this.group.get(b) ?? 0);
  }

  /** Splits the nodes into groups; nodes not listed join the first group. */
  partition(groups: readonly (readonly number[])[]): void {
    this.group = new Map();
    groups.forEach((g, i) => {
      for (const id of g) this.group.set(id, i);
    });
  }

  isolate(id: number): void {
    this.group = new Map([[id, 1]]);
  }

  heal(): void {
    this.group = new Map();
  }

  send(from: number, to: number, msg: M, now: number): void {
    this.stats.sent++;
    if (!this.connected(from, to)) {
      this.stats.partitioned++;
      return;
    }
    if (this.rng.chance(this.opts.dropRate)) {
      this.stats.dropped++;
      return;
    }
    const copies = this.rng.chance(this.opts.duplicateRate) ? 2 : 1;
    if (copies === 2) this.stats.duplicated++;
    for (let i = 0; i < copies; i++) {
      const at = now + this.rng.between(this.opts.minDelay, this.opts.maxDelay);
      this.queue.push({ from, to, msg, at, seq: this.seq++ });
    }
  }

  /** The earliest delivery time in flight, or undefined. */
  nextAt(): number | undefined {
    return this.queue.peek()?.at;
  }

  /** Removes and returns the messages due at or before `now`, in delivery order; partitioned ones are lost. */
  takeDue(now: number): InFlight<M>[] {
    const out: InFlight<M>[] = [];
    while ((this.queue.peek()?.at ?? Number.POSITIVE_INFINITY) <= now) {
      const m = this.queue.pop()!;
      if (this.connected(m.from, m.to)) {
        out.push(m);
        this.stats.delivered++;
      } else {
        this.stats.partitioned++;
      }
    }
    return out;
  }

  /** Drops every message to or from `id` (a crash loses what was in its buffers). */
  dropNode(id: number): void {
    this.queue.rebuild(this.queue.items.filter((m) => m.to !== id));
  }

  get inFlight(): number {
    return this.queue.items.length;
  }
}
