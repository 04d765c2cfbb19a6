/**
 * Waiting without polling: a value that only grows and the waiters for it to reach theirs
 * (`Watermark`, as etcd's pkg/wait `WaitTime`), and a condition that wakes its waiters
 * whenever the state they test may have changed (`Condition`).
 *
 * A wait resolves `true` when released and `false` when its `timeoutMs` passes; it rejects
 * with the signal's reason when aborted and with the close error once closed. A settled
 * wait leaves no timer and no listener behind, so a process with only settled waits exits.
 *
 * Timeouts run on the `ClockTimers` given to the constructor; the default is monotonic time
 * with Node.js timers that keep the process alive while a wait with a timeout is pending.
 */
import { type ClockTimers, heldMonotonicClock, type TimerHandle } from './clock.js';

export interface WaitOptions {
  /** Settles the wait with `false` after this many milliseconds (none: waits until released). */
  timeoutMs?: number;
  /** Rejects the wait with the signal's reason when aborted. */
  signal?: AbortSignal;
}

type Settle = 'release' | 'timeout' | 'abort' | 'close';

interface Waiter {
  readonly target: bigint;
  readonly seq: number;
  done: boolean;
  settle(how: Settle, err?: unknown): void;
}

/** Starts one wait: its timer and abort listener, both removed again however it settles. */
function begin(
  timers: ClockTimers,
  target: bigint,
  seq: number,
  opts: WaitOptions,
  add: (w: Waiter) => void,
  drop: (w: Waiter) => void,
): Promise<boolean> {
  return new Promise<boolean>((resolve, reject) => {
    const { signal, timeoutMs } = opts;
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    let timer: TimerHandle | undefined;
    const onAbort = () => {
      w.settle('abort', signal?.reason);
      drop(w);
    };
    const w: Waiter = {
      target,
      seq,
      done: false,
      settle(how, err) {
        if (w.done) return;
        w.done = true;
        if (timer !== undefined) timers.clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (how === 'release') resolve(true);
        else if (how === 'timeout') resolve(false);
        else reject(err);
      },
    };
    if (timeoutMs !== undefined) {
      timer = timers.setTimeout(
        () => {
          w.settle('timeout');
          drop(w);
        },
        Math.max(0, timeoutMs),
      );
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    add(w);
  });
}

function before(a: Waiter, b: Waiter): boolean {
  return a.target < b.target || (a.target === b.target && a.seq < b.seq);
}

/**
 * A monotonically increasing value and the waiters for it to reach a target, kept in a binary
 * heap by target (then arrival): O(log n) to add or release one waiter, O(1) to advance with
 * none due. Waiters released by one `advance` settle in target order, then arrival order.
 */
export class Watermark {
  private v: bigint;
  private heap: Waiter[] = [];
  private dead = 0;
  private seq = 0;
  private closed: unknown;
  private isClosed = false;

  /** `clock` runs the waits' timeouts. */
  constructor(
    initial = 0n,
    private readonly clock: ClockTimers = heldMonotonicClock,
  ) {
    this.v = initial;
  }

  /** The value now. */
  get value(): bigint {
    return this.v;
  }

  /** Waiters not yet settled. */
  get waiting(): number {
    return this.heap.length - this.dead;
  }

  /** Raises the value to `v` (a lower `v` changes nothing) and releases every waiter it reaches. */
  advance(v: bigint): void {
    if (v <= this.v) return;
    this.v = v;
    const h = this.heap;
    while (h.length > 0 && (h[0] as Waiter).target <= v) {
      const w = this.pop();
      if (w.done) this.dead--;
      else w.settle('release');
    }
  }

  /** Resolves `true` once the value is at least `target` (at once if it is), `false` on timeout. */
  wait(target: bigint, opts: WaitOptions = {}): Promise<boolean> {
    if (this.isClosed) return Promise.reject(this.closed);
    if (target <= this.v) return opts.signal?.aborted ? Promise.reject(opts.signal.reason) : Promise.resolve(true);
    return begin(
      this.clock,
      target,
      this.seq++,
      opts,
      (w) => this.push(w),
      () => this.forget(),
    );
  }

  /** Rejects every waiter, and every later wait, with `err`. */
  close(err: unknown): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.closed = err;
    const h = this.heap;
    this.heap = [];
    this.dead = 0;
    for (const w of h) if (!w.done) w.settle('close', err);
  }

  /** A waiter settled by timeout or abort stays in the heap until reached; rebuild when most are. */
  private forget(): void {
    this.dead++;
    if (this.dead > 32 && this.dead * 2 > this.heap.length) {
      const live = this.heap.filter((w) => !w.done);
      live.sort((a, b) => (before(a, b) ? -1 : 1));
      this.heap = live; // a sorted array is a valid heap
      this.dead = 0;
    }
  }

  private push(w: Waiter): void {
    const h = this.heap;
    h.push(w);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(w, h[p] as Waiter)) break;
      h[i] = h[p] as Waiter;
      i = p;
    }
    h[i] = w;
  }

  private pop(): Waiter {
    const h = this.heap;
    const top = h[0] as Waiter;
    const last = h.pop() as Waiter;
    if (h.length > 0) {
      let i = 0;
      const n = h.length;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        const c = r < n && before(h[r] as Waiter, h[l] as Waiter) ? r : l;
        if (!before(h[c] as Waiter, last)) break;
        h[i] = h[c] as Waiter;
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
}

/**
 * A condition variable: `notify()` wakes every current waiter, which then re-tests its own
 * predicate. For readiness that is not a growing number (a leader accepting writes).
 */
export class Condition {
  private waiters = new Set<Waiter>();

  /** `clock` runs the waits' timeouts and measures what is left of an `until`'s. */
  constructor(private readonly clock: ClockTimers = heldMonotonicClock) {}

  /** Waiters not yet settled. */
  get waiting(): number {
    return this.waiters.size;
  }

  /** Wakes every waiter now waiting (`true`); later waits wait for the next notify. */
  notify(): void {
    if (this.waiters.size === 0) return;
    const ws = [...this.waiters];
    this.waiters.clear();
    for (const w of ws) w.settle('release');
  }

  /** Resolves `true` at the next `notify()`, `false` on timeout. */
  wait(opts: WaitOptions = {}): Promise<boolean> {
    return begin(
      this.clock,
      0n,
      0,
      opts,
      (w) => this.waiters.add(w),
      (w) => this.waiters.delete(w),
    );
  }

  /**
   * Resolves `true` once `ready()` holds (tested now and after each notify), `false` when
   * `timeoutMs` passes first. `ready()` may throw to refuse; the wait rejects with it.
   */
  async until(ready: () => boolean, opts: WaitOptions = {}): Promise<boolean> {
    const end = opts.timeoutMs === undefined ? undefined : this.clock.now() + opts.timeoutMs;
    for (;;) {
      if (ready()) return true;
      const left = end === undefined ? undefined : end - this.clock.now();
      if (left !== undefined && left <= 0) return false;
      await this.wait({ timeoutMs: left, signal: opts.signal });
    }
  }
}
