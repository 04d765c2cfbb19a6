/**
 * The clock of the tests is the clock of plexus (ts/core/clock.ts): components take a `Clock`
 * and `Timers`; a test passes a `ManualClock` and moves time with `advance`, so that "nothing
 * happens before the deadline" is shown without sleeping.
 */
export { type Clock, type ClockTimers, ManualClock, systemClock, type Timers } from '../../ts/core/clock.js';
