/**
 * The clock of the tests is the clock of plexus (ts/core/clock.ts): components take a `Clock`
 * and `Timers`; a test passes a `ManualClock` and moves time with `advance`, so that "nothing
 * happens before the deadline" is shown without sleeping.
 */
export { type Clock, type ClockTimers, ManualClock, systemClock, type Timers } from '../../ts/core/clock.js';

/**
 * Lets `n` turns of the event loop run (each a `setImmediate`: the microtasks queued before it,
 * and the I/O callbacks already due, run first). After a `ManualClock` was moved, a callback
 * that its timers started and that would end something wrongly has run by then; nothing
 * waits on wall time.
 */
export async function loopTurns(n = 5): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
}
