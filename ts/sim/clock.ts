/**
 * Virtual time for the simulator: the core `ManualClock` (time that moves only when the
 * simulation says so, timers fired in due order), refusing to go back with the simulator's code.
 */
import { ManualClock } from '../core/clock.js';
import { SimErrorCode, simError } from './errors.js';

export class VirtualClock extends ManualClock {
  /** Moves time forward to `t` (never backwards), firing the timers that fall due. */
  override advanceTo(t: number): void {
    if (!(t >= this.now())) throw simError(SimErrorCode.BAD_CONFIG, `time cannot go back from ${this.now()} to ${t}`);
    super.advanceTo(t);
  }
}
