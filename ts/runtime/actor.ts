/**
 * One activation of a virtual actor: its mailbox, the macrostep loop with its input and
 * output gates, its outbox, replay and snapshots (docs/runtime.md, "The model").
 *
 * Input gate: the loop takes the next message only after the previous macrostep's
 * append has resolved (durable). Output gate: a macrostep's sends are handed to the
 * outbox only after that append has resolved. Replay rebuilds state, dedup window and
 * outbox from the journal without running any send; sends that the journal does not show
 * as completed are sent again (at least once; receivers deduplicate by message id).
 */
import { isPlexusError } from '../core/errors.js';
import { DedupWindow } from './dedup.js';
import { sendOf } from './entries.js';
import { JournalStoreCode, RuntimeCode, runtimeError } from './errors.js';
import { Mailbox } from './mailbox.js';
import type {
  ActorEvent,
  Chart,
  Clock,
  DeliverResult,
  Envelope,
  JournalStorage,
  JsonValue,
  MacrostepEntry,
  RuntimeConfig,
  Send,
  SnapshotEntry,
} from './types.js';

/** A message waiting in a mailbox, with the promise of its sender. */
export interface Inbound {
  readonly envelope: Envelope;
  resolve(r: DeliverResult): void;
  reject(e: unknown): void;
  /** Told once the message holds its place in a mailbox (DeliverOptions.taken). */
  taken?: (() => void) | undefined;
}

/** One send of the outbox: journaled at (seq, index), not yet completed. */
export interface OutboxItem {
  readonly seq: number;
  readonly index: number;
  readonly time: number;
  readonly send: Send;
  /** The message id the target deduplicates by: `<iri>#<seq>.<index>`. */
  readonly messageId: string;
  timer?: unknown;
}

/** What an activation needs from its node. */
export interface ActorHost {
  readonly storage: JournalStorage;
  readonly clock: Clock;
  readonly config: RuntimeConfig;
  epochOf(iri: string): bigint | undefined;
  /** Whether placement still puts the actor here. */
  isLocal(iri: string): boolean;
  /** Starts one send; the node completes it through `actor.complete`. */
  dispatch(actor: Activation, item: OutboxItem): void;
  /** The activation stopped (idle, lost placement, or failed); `requeue` holds its unprocessed messages. */
  released(actor: Activation, requeue: Inbound[]): void;
  /** The activation may have become settled (loaded with nothing queued, or its loop went idle). */
  settled?(): void;
  /** Observes every macrostep (metrics, tests). */
  onMacrostep?(iri: string, entry: MacrostepEntry): void;
}

/** A message entered a mailbox: tell its transport, once. */
function enteredMailbox(m: Inbound): void {
  const t = m.taken;
  if (t !== undefined) {
    m.taken = undefined;
    t();
  }
}

export function messageIdOf(iri: string, seq: number, index: number): string {
  return `${iri}#${seq}.${index}`;
}

type Phase = 'loading' | 'running' | 'closing' | 'closed';

export class Activation {
  readonly mailbox: Mailbox<Inbound>;
  private state: unknown;
  private seq = 0;
  private dedup: DedupWindow;
  private readonly outbox = new Map<string, OutboxItem>();
  private sinceSnapshot = 0;
  private phase: Phase = 'loading';
  private busy = false;
  private idleTimer: unknown;
  /** Resolves when the activation has closed. */
  readonly closed: Promise<void>;
  private markClosed!: () => void;
  /** Transitions run by this activation (replay in `events` mode included). */
  transitions = 0;

  constructor(
    readonly iri: string,
    private readonly chart: Chart<unknown, ActorEvent>,
    private readonly host: ActorHost,
  ) {
    this.mailbox = new Mailbox(host.config.mailboxBound, enteredMailbox);
    this.dedup = new DedupWindow(host.config.dedupWindow);
    this.closed = new Promise((r) => {
      this.markClosed = r;
    });
  }

  get isClosing(): boolean {
    return this.phase === 'closing' || this.phase === 'closed';
  }

  /** Quiet: nothing queued, no macrostep running, no send in the outbox. */
  get quiet(): boolean {
    return this.mailbox.length === 0 && this.mailbox.waiting === 0 && !this.busy && this.outbox.size === 0;
  }

  /** Nothing queued and no macrostep running (sends may still be out). */
  get settled(): boolean {
    return this.mailbox.length === 0 && this.mailbox.waiting === 0 && !this.busy && this.phase !== 'loading';
  }

  /** Sends in the outbox that are not waiting for a delay. */
  get sendsInFlight(): number {
    let n = 0;
    for (const item of this.outbox.values()) if (item.timer === undefined) n++;
    return n;
  }

  get position(): number {
    return this.seq;
  }

  get currentState(): unknown {
    return this.state;
  }

  private revive(json: JsonValue): unknown {
    return this.chart.revive ? this.chart.revive(json) : json;
  }

  /** Replays the journal, then starts the loop and sends what the outbox still holds. */
  async load(): Promise<void> {
    try {
      const h = await this.host.storage.history(this.iri);
      this.state = h.snapshot ? this.revive(h.snapshot.state) : this.chart.initial(this.iri);
      this.seq = h.snapshot?.seq ?? 0;
      this.dedup = new DedupWindow(this.host.config.dedupWindow, h.snapshot?.dedup ?? []);
      let done = h.snapshot?.dispatchedThrough ?? 0;
      for (const p of h.snapshot?.pending ?? []) this.addItem(p.seq, p.index, h.snapshot?.time ?? 0, p.send);
      for (const r of h.records) {
        if (r.state !== undefined) this.state = this.revive(r.state);
        else {
          this.transitions++;
          this.state = this.chart.transition(this.state, r.event, {
            self: this.iri,
            messageId: r.messageId,
            seq: r.seq,
          }).state;
        }
        this.seq = r.seq;
        this.dedup.add(r.messageId);
        for (let i = 0; i < r.sends.length; i++) this.addItem(r.seq, i, r.time, r.sends[i] as Send);
        done = Math.max(done, r.dispatchedThrough);
      }
      for (const [k, item] of this.outbox) if (item.seq <= done) this.outbox.delete(k);
      this.sinceSnapshot = h.records.length;
    } catch (e) {
      this.fail(e);
      return;
    }
    this.phase = 'running';
    for (const item of [...this.outbox.values()]) this.start(item);
    this.pump();
    this.host.settled?.();
  }

  private addItem(seq: number, index: number, time: number, send: Send): OutboxItem {
    const item: OutboxItem = { seq, index, time, send, messageId: messageIdOf(this.iri, seq, index) };
    this.outbox.set(`${seq}.${index}`, item);
    return item;
  }

  /** The highest seq all of whose sends have completed. */
  private dispatchedThrough(): number {
    let low = this.seq;
    for (const item of this.outbox.values()) if (item.seq - 1 < low) low = item.seq - 1;
    return low;
  }

  /**
   * Queues a message; when the mailbox is full, parks it behind the bound if `wait`, else
   * returns false.
   */
  offer(m: Inbound, wait: boolean): boolean {
    if (this.mailbox.offer(m)) enteredMailbox(m);
    else {
      if (!wait) return false;
      this.mailbox.park(m);
    }
    this.cancelIdle();
    this.pump();
    return true;
  }

  private pump(): void {
    if (this.phase !== 'running' || this.busy) return;
    if (this.mailbox.length === 0) {
      this.armIdle();
      return;
    }
    this.busy = true;
    void this.loop();
  }

  private async loop(): Promise<void> {
    try {
      for (;;) {
        if (this.phase !== 'running') return;
        if (this.mailbox.length > 0 && !this.host.isLocal(this.iri)) {
          // Placement moved the actor away: stop here and let the node route the rest.
          this.busy = false;
          await this.close('placement');
          return;
        }
        const m = this.mailbox.shift();
        if (m === undefined) return;
        await this.macrostep(m);
      }
    } finally {
      if (this.busy) {
        this.busy = false;
        if (this.phase === 'running') this.armIdle();
      }
      this.host.settled?.();
    }
  }

  private async macrostep(m: Inbound): Promise<void> {
    const env = m.envelope;
    if (this.dedup.has(env.id)) {
      m.resolve('duplicate');
      return;
    }
    const seq = this.seq + 1;
    let state = this.state;
    let sends: Send[] = [];
    let chartError: unknown;
    try {
      this.transitions++;
      const step = this.chart.transition(this.state, env.event, { self: this.iri, messageId: env.id, seq });
      if (typeof step !== 'object' || step === null || !('state' in step)) {
        throw new TypeError('transition must return { state, sends? }');
      }
      for (const s of step.sends ?? []) {
        const ok = sendOf(s);
        if (ok === undefined) throw new TypeError(`malformed send ${JSON.stringify(s)}`);
        sends.push(ok);
      }
      state = step.state;
    } catch (e) {
      chartError = runtimeError(
        RuntimeCode.chartFailed,
        `the chart of ${this.iri} failed on ${env.event.name} (message ${env.id}): ${(e as Error)?.message ?? String(e)}; the event was consumed without a state change`,
        { iri: this.iri, messageId: env.id, event: env.event.name },
        e,
      );
      sends = [];
      state = this.state;
    }
    const entry: MacrostepEntry = {
      seq,
      time: this.host.clock.now(),
      dispatchedThrough: this.dispatchedThrough(),
      messageId: env.id,
      event: env.event,
      sends,
      ...(this.chart.journal === 'events' ? {} : { state: state as JsonValue }),
    };
    const epoch = this.host.epochOf(this.iri);
    try {
      // Input gate: the loop awaits this append before it takes the next message.
      await this.host.storage.append(
        this.iri,
        entry,
        epoch === undefined ? { expectedSeq: seq - 1 } : { expectedSeq: seq - 1, epoch },
      );
    } catch (e) {
      const err = runtimeError(
        RuntimeCode.journalFailed,
        `the journal append of ${this.iri} at seq ${seq} failed (${(e as Error)?.message ?? String(e)}); the actor was deactivated and the message not processed`,
        { iri: this.iri, seq, code: isPlexusError(e) ? e.code : undefined },
        e,
      );
      m.reject(err);
      if (!this.host.isLocal(this.iri)) {
        // The actor moved away (its shard's lease is gone, or a newer owner fenced the store):
        // the messages behind this one were never tried; they go, in order, to wherever
        // placement routes them now.
        this.moved();
        return;
      }
      this.fail(err);
      return;
    }
    this.seq = seq;
    this.state = state;
    this.dedup.add(env.id);
    this.sinceSnapshot++;
    this.host.onMacrostep?.(this.iri, entry);
    // Output gate: sends leave only now that the record is durable.
    const items = sends.map((s, i) => this.addItem(seq, i, entry.time, s));
    for (const item of items) this.start(item);
    if (chartError === undefined) m.resolve('processed');
    else m.reject(chartError);
    const every = this.host.config.snapshotEvery;
    if (every > 0 && this.sinceSnapshot >= every) await this.writeSnapshot();
  }

  private start(item: OutboxItem): void {
    const delay = item.send.delay ?? 0;
    const due = item.time + delay;
    const wait = due - this.host.clock.now();
    if (delay > 0 && wait > 0) {
      item.timer = this.host.clock.setTimeout(() => {
        item.timer = undefined;
        if (this.phase === 'running' && this.outbox.has(`${item.seq}.${item.index}`)) this.host.dispatch(this, item);
      }, wait);
      return;
    }
    this.host.dispatch(this, item);
  }

  /** The node calls this when a send has completed (delivered, or failed and reported). */
  complete(item: OutboxItem): void {
    this.outbox.delete(`${item.seq}.${item.index}`);
    if (this.quiet) this.armIdle();
  }

  private async writeSnapshot(): Promise<void> {
    const pending = [...this.outbox.values()].map((i) => ({ seq: i.seq, index: i.index, send: i.send }));
    const entry: SnapshotEntry = {
      seq: this.seq,
      time: this.host.clock.now(),
      dispatchedThrough: this.dispatchedThrough(),
      state: this.state as JsonValue,
      dedup: this.dedup.list(),
      pending,
    };
    const epoch = this.host.epochOf(this.iri);
    try {
      await this.host.storage.snapshot(this.iri, entry, epoch === undefined ? {} : { epoch });
      this.sinceSnapshot = 0;
    } catch (e) {
      // A snapshot only shortens replay; the journal is complete without it. A fenced
      // shard, though, means this node must stop running the actor.
      if (isPlexusError(e, JournalStoreCode.fenced)) this.fail(e);
    }
  }

  private armIdle(): void {
    const after = this.host.config.idleAfter;
    if (after <= 0 || this.phase !== 'running' || !this.quiet || this.idleTimer !== undefined) return;
    this.idleTimer = this.host.clock.setTimeout(() => {
      this.idleTimer = undefined;
      if (this.phase === 'running' && this.quiet) void this.close('idle');
    }, after);
  }

  private cancelIdle(): void {
    if (this.idleTimer !== undefined) {
      this.host.clock.clearTimeout(this.idleTimer);
      this.idleTimer = undefined;
    }
  }

  /**
   * Deactivates: waits for a running macrostep, snapshots when macrosteps happened since
   * the last snapshot (so the outbox's completion is on disk too), cancels timers and
   * hands unprocessed messages back to the node.
   */
  async close(why: 'idle' | 'placement' | 'stop'): Promise<void> {
    if (this.isClosing) return this.closed;
    this.phase = 'closing';
    this.cancelIdle();
    while (this.busy) await new Promise((r) => setImmediate(r));
    if (why !== 'placement' && this.sinceSnapshot > 0 && this.seq > 0) await this.writeSnapshot();
    for (const item of this.outbox.values()) {
      if (item.timer !== undefined) this.host.clock.clearTimeout(item.timer);
      item.timer = undefined;
    }
    this.phase = 'closed';
    this.host.released(this, this.mailbox.drain());
    this.markClosed();
  }

  /** Stops after a refused append once placement moved the actor: the mailbox is routed again. */
  private moved(): void {
    this.phase = 'closed';
    this.cancelIdle();
    for (const item of this.outbox.values()) {
      if (item.timer !== undefined) this.host.clock.clearTimeout(item.timer);
    }
    this.host.released(this, this.mailbox.drain());
    this.markClosed();
  }

  private fail(e: unknown): void {
    this.phase = 'closed';
    this.cancelIdle();
    for (const item of this.outbox.values()) {
      if (item.timer !== undefined) this.host.clock.clearTimeout(item.timer);
    }
    for (const m of this.mailbox.drain()) m.reject(e);
    this.host.released(this, []);
    this.markClosed();
  }
}
