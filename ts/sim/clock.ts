/** Virtual time for the simulator: milliseconds that only move when the simulation says so. */
import { SimErrorCode, simError } from './errors.js';

export class VirtualClock {
  private t = 0;

  now(): number {
    return this.t;
  }

  /** Moves time forward to `t` (never backwards). */
  advanceTo(t: number): void {
    if (t < this.t) throw simError(SimErrorCode.BAD_CONFIG, `time cannot go back from ${this.t} to ${t}`);
    this.t = t;
  }

  advance(ms: number): void {
    this.advanceTo(this.t + ms);
  }
}
