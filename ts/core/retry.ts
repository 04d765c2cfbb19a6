/**
 * The one retry policy of plexus: exponential backoff with jitter, a cap on each delay, and a
 * limit in attempts or in time; every reconnect and redelivery loop takes its delays from it
 * (docs/net.md, "Retries"). Time comes from a `Clock`/`Timers` (ts/core/clock.ts) and
 * randomness from a `random` source, both passed in, so tests drive it with a ManualClock and
 * a seeded source.
 *
 * Delay of attempt n (from 0), with `exp = min(capMs, baseMs * factor^n)`:
 * - `none`: exp;
 * - `full`: uniform in [0, exp] ("full jitter", AWS Architecture Blog, "Exponential Backoff
 *   and Jitter", 2015);
 * - `equal`: exp/2 + uniform in [0, exp/2];
 * - `decorrelated`: min(capMs, uniform in [baseMs, 3 * previous delay]), the first one baseMs.
 * A deadline trims the last delay to the time left and ends the sequence once it passed.
 */
import type { Clock, ClockTimers, TimerHandle, Timers } from './clock.js';
import { systemClock } from './clock.js';
import { PlexusError } from './errors.js';

export type Jitter = 'none' | 'full' | 'equal' | 'decorrelated';

export interface RetryPolicyOptions {
  /** The first delay (ms). */
  readonly baseMs: number;
  /** No delay is longer (ms). */
  readonly capMs: number;
  /** Growth per attempt (default 2). */
  readonly factor?: number;
  /** Default `full`. */
  readonly jitter?: Jitter;
  /** Delays handed out before the sequence ends (default: no limit). */
  readonly maxAttempts?: number;
  /** Time (ms, by the sequence's clock) from its start after which it ends (default: none). */
  readonly deadlineMs?: number;
  /** Uniform in [0, 1) (default Math.random). */
  readonly random?: () => number;
}

function checkOptions(o: RetryPolicyOptions): void {
  const bad = (field: string, why: string) => {
    throw new PlexusError('PLX_CORE_BAD_RETRY', `retry policy ${field} ${why}`, { field });
  };
  if (!Number.isFinite(o.baseMs) || o.baseMs < 0) bad('baseMs', `must be a number of ms from 0, got ${o.baseMs}`);
  if (!Number.isFinite(o.capMs) || o.capMs < o.baseMs) bad('capMs', `must be at least baseMs, got ${o.capMs}`);
  if (o.factor !== undefined && !(Number.isFinite(o.factor) && o.factor >= 1)) bad('factor', 'must be 1 or more');
  if (o.maxAttempts !== undefined && !(o.maxAttempts >= 0)) bad('maxAttempts', 'must be 0 or more');
  if (o.deadlineMs !== undefined && !(o.deadlineMs >= 0)) bad('deadlineMs', 'must be 0 or more');
  if (o.jitter !== undefined && !['none', 'full', 'equal', 'decorrelated'].includes(o.jitter)) {
    bad('jitter', `must be none, full, equal or decorrelated, got ${String(o.jitter)}`);
  }
}

/** A retry policy: its options, checked once; `start` gives one sequence of delays. */
export class RetryPolicy {
  readonly baseMs: number;
  readonly capMs: number;
  readonly factor: number;
  readonly jitter: Jitter;
  readonly maxAttempts: number;
  readonly deadlineMs: number;
  readonly random: () => number;

  constructor(opts: RetryPolicyOptions) {
    checkOptions(opts);
    this.baseMs = opts.baseMs;
    this.capMs = opts.capMs;
    this.factor = opts.factor ?? 2;
    this.jitter = opts.jitter ?? 'full';
    this.maxAttempts = opts.maxAttempts ?? Number.POSITIVE_INFINITY;
    this.deadlineMs = opts.deadlineMs ?? Number.POSITIVE_INFINITY;
    this.random = opts.random ?? Math.random;
  }

  /** A sequence of delays starting now by `clock`. */
  start(clock: Clock = systemClock): Backoff {
    return new Backoff(this, clock);
  }
}

/** One sequence of retry delays: `next()` until it gives undefined; `reset()` after a success. */
export class Backoff {
  private n = 0;
  private prev = 0;
  private startedAt: number;

  constructor(
    readonly policy: RetryPolicy,
    private readonly clock: Clock = systemClock,
  ) {
    this.startedAt = clock.now();
  }

  /** Delays handed out since the start or the last reset. */
  get attempts(): number {
    return this.n;
  }

  /** The delay before the next attempt (ms), or undefined when attempts or the deadline are spent. */
  next(): number | undefined {
    const p = this.policy;
    if (this.n >= p.maxAttempts) return undefined;
    const left = this.startedAt + p.deadlineMs - this.clock.now();
    if (left <= 0) return undefined;
    const exp = Math.min(p.capMs, p.baseMs * p.factor ** this.n);
    let d: number;
    switch (p.jitter) {
      case 'none':
        d = exp;
        break;
      case 'full':
        d = p.random() * exp;
        break;
      case 'equal':
        d = exp / 2 + (p.random() * exp) / 2;
        break;
      case 'decorrelated': {
        const hi = this.n === 0 ? p.baseMs : Math.max(p.baseMs, this.prev * 3);
        d = Math.min(p.capMs, p.baseMs + p.random() * (hi - p.baseMs));
        break;
      }
    }
    this.n++;
    this.prev = d;
    return Math.min(d, left);
  }

  /** Starts over: the next delay is the first again, and the deadline counts from now. */
  reset(): void {
    this.n = 0;
    this.prev = 0;
    this.startedAt = this.clock.now();
  }
}

/**
 * The system clock with timers that keep the process alive while a retry waits (as a plain
 * `setTimeout` does; `systemClock`'s timers are unref'd): the default of `delay` and `retry`.
 */
export const heldClock: ClockTimers = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** Waits `ms` on `timers`; rejects with PLX_CORE_ABORTED when `signal` aborts first. */
export function delay(ms: number, timers: Timers = heldClock, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(aborted(signal));
      return;
    }
    let handle: TimerHandle;
    const onAbort = () => {
      timers.clearTimeout(handle);
      reject(aborted(signal as AbortSignal));
    };
    handle = timers.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function aborted(signal: AbortSignal): PlexusError {
  return new PlexusError('PLX_CORE_ABORTED', 'the retries were stopped', {}, { cause: signal.reason });
}

export interface RetryOptions {
  /** Time and timers of the waits (default `heldClock`). */
  readonly clock?: ClockTimers;
  /** Stops the retries: the wait in progress rejects with PLX_CORE_ABORTED. */
  readonly signal?: AbortSignal;
  /** Whether an error is worth another attempt (default: every error). */
  readonly retryable?: (e: unknown, attempt: number) => boolean;
}

/**
 * Runs `fn` until it resolves, waiting the policy's delays between attempts; rejects with the
 * last error once the policy's attempts or deadline are spent or an error is not retryable.
 */
export async function retry<T>(
  fn: (attempt: number) => Promise<T>,
  policy: RetryPolicy,
  opts: RetryOptions = {},
): Promise<T> {
  const clock = opts.clock ?? heldClock;
  const seq = policy.start(clock);
  for (let attempt = 0; ; attempt++) {
    if (opts.signal?.aborted) throw aborted(opts.signal);
    try {
      return await fn(attempt);
    } catch (e) {
      if (opts.retryable && !opts.retryable(e, attempt)) throw e;
      const ms = seq.next();
      if (ms === undefined) throw e;
      await delay(ms, clock, opts.signal);
    }
  }
}
