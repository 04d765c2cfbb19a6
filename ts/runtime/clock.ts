/** The system clock: `Date.now` and unreferenced Node.js timers (they never keep a process alive). */
import type { Clock } from './types.js';

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout(fn: () => void, ms: number): unknown {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clearTimeout(handle: unknown): void {
    clearTimeout(handle as ReturnType<typeof setTimeout>);
  },
};
