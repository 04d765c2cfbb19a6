/**
 * The one shape of time in plexus: a `Clock` that reads milliseconds and `Timers` that schedule
 * callbacks. Libraries take them as parameters and never read `Date.now` or the global timers
 * deep inside; the edges (the CLI, a node's main) pass `systemClock`, tests and the simulator pass
 * a `ManualClock`, whose time moves only when told and whose timers fire in due order.
 */
import { PlexusError } from './errors.js';

/** Milliseconds since some fixed origin; never decreases for a given clock. */
export interface Clock {
  now(): number;
}

/** An opaque handle of a scheduled callback. */
export type TimerHandle = unknown;

/** Callbacks after a delay, cancellable by their handle. */
export interface Timers {
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** A clock with its timers: what most components take. */
export interface ClockTimers extends Clock, Timers {}

/** Wall time and Node.js timers left unreferenced (a pending timer never keeps a process alive). */
export const systemClock: ClockTimers = {
  now: () => Date.now(),
  setTimeout(fn: () => void, ms: number): TimerHandle {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clearTimeout(handle: TimerHandle): void {
    clearTimeout(handle as ReturnType<typeof setTimeout>);
  },
};

/**
 * Monotonic milliseconds (`performance.now`, never stepped by a wall-clock change) and the same
 * unreferenced timers: for leases and durations, never for dates.
 */
export const monotonicClock: ClockTimers = {
  now: () => performance.now(),
  setTimeout: systemClock.setTimeout,
  clearTimeout: systemClock.clearTimeout,
};

/**
 * Monotonic milliseconds with timers that keep the process alive while pending (plain Node.js
 * timers): for waits the process must not end during (a setup's pause between connection
 * tries, a wait with a timeout).
 */
export const heldMonotonicClock: ClockTimers = {
  now: () => performance.now(),
  setTimeout: (fn: () => void, ms: number): TimerHandle => setTimeout(fn, ms),
  clearTimeout(handle: TimerHandle): void {
    clearTimeout(handle as ReturnType<typeof setTimeout>);
  },
};

interface ManualTimer {
  readonly due: number;
  readonly seq: number;
  readonly fn: () => void;
}

/**
 * Time that moves only when `advance`/`advanceTo` says so. Timers due by the new time fire in
 * order of their due time, then of their scheduling; a timer scheduled by a firing callback for
 * a time not after the target fires within the same advance.
 */
export class ManualClock implements ClockTimers {
  private t: number;
  private seq = 0;
  private readonly timers = new Map<number, ManualTimer>();

  constructor(start = 0) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const seq = ++this.seq;
    const delay = Number.isFinite(ms) && ms > 0 ? ms : 0;
    this.timers.set(seq, { due: this.t + delay, seq, fn });
    return seq;
  }

  clearTimeout(handle: TimerHandle): void {
    if (typeof handle === 'number') this.timers.delete(handle);
  }

  /** Timers scheduled and neither fired nor cleared. */
  pending(): number {
    return this.timers.size;
  }

  /** The due time of the earliest pending timer, or undefined when none is pending. */
  nextDue(): number | undefined {
    let best: number | undefined;
    for (const tm of this.timers.values()) if (best === undefined || tm.due < best) best = tm.due;
    return best;
  }

  /** Moves time forward by `ms` (not negative), firing the timers that fall due. */
  advance(ms: number): void {
    this.advanceTo(this.t + ms);
  }

  /** Moves time forward to `t` (never backwards), firing the timers that fall due. */
  advanceTo(t: number): void {
    if (!Number.isFinite(t) || t < this.t) {
      throw new PlexusError('PLX_CORE_CLOCK_BACKWARDS', `a manual clock cannot go from ${this.t} to ${t}`, {
        now: this.t,
        to: t,
      });
    }
    for (;;) {
      let next: ManualTimer | undefined;
      for (const tm of this.timers.values()) {
        if (tm.due > t) continue;
        if (next === undefined || tm.due < next.due || (tm.due === next.due && tm.seq < next.seq)) next = tm;
      }
      if (next === undefined) break;
      this.timers.delete(next.seq);
      this.t = next.due;
      next.fn();
    }
    this.t = t;
  }
}

/** A repeating timer from `every`: `stop()` ends it (no call after it returns). */
export interface Repeating {
  stop(): void;
}

/**
 * Calls `fn` every `ms` on `timers` (each call scheduled when the previous one returns, so
 * calls never overlap and a slow call delays the next instead of piling up), until `stop()`.
 * The injected form of `setInterval`: on a `ManualClock` the calls come as time is advanced.
 */
export function every(timers: Timers, ms: number, fn: () => void): Repeating {
  let stopped = false;
  let handle: TimerHandle;
  const run = (): void => {
    if (stopped) return;
    try {
      fn();
    } finally {
      if (!stopped) handle = timers.setTimeout(run, ms);
    }
  };
  handle = timers.setTimeout(run, ms);
  return {
    stop(): void {
      stopped = true;
      timers.clearTimeout(handle);
    },
  };
}

/** The timers of `clock` when it has them (a `ClockTimers`), else `fallback`. */
export function timersOf(clock: Clock | undefined, fallback: Timers): Timers {
  const c = clock as Partial<Timers> | undefined;
  return c !== undefined && typeof c.setTimeout === 'function' && typeof c.clearTimeout === 'function'
    ? (c as Timers)
    : fallback;
}
