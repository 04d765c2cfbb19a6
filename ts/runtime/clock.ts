/** The system clock, kept at this path for the runtime's importers: it is the core one. */
export { systemClock } from '../core/clock.js';
