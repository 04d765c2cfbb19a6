/**
 * Heap tuning for long-running servers (`plexus chronacta serve`).
 *
 * V8 starts a full (mark-compact) collection when the old generation reaches a limit it sets
 * after each one, from the heap still live times a growing factor that it picks between about
 * 1.1 and 4 from how busy the program is. Under steady load a server is busy, the factor stays
 * near 1.4, and objects that outlive two young-generation collections (request state that
 * waits tens of milliseconds for a quorum, say) fill that margin within a fraction of a
 * second: a member of a Chronacta cluster under batches of 100 events ran a mark-compact every
 * 150 to 250 ms, and concurrent marking took 13 to 22% of its CPU (docs/chronacta-ha.md,
 * "Garbage collection"). A fixed factor of 4 (`--heap-growing-percent=300`) lets the old
 * generation grow to four times what is live before the next one, for a few tens of megabytes
 * more memory.
 */
import { setFlagsFromString } from 'node:v8';

export const DEFAULT_HEAP_GROWING_PERCENT = 300;
export const MAX_HEAP_GROWING_PERCENT = 1000;

const FLAG = /^--heap[-_]growing[-_]percent(=|$)/;

/**
 * Sets V8's heap growing factor to 1 + percent/100 (0 keeps V8's own choice). A value given
 * to node itself on its command line is left as it is (NODE_OPTIONS cannot carry V8 flags).
 * Returns what is in effect: the percent set here, 'node' when node was given one, or 'v8'
 * for V8's own choice.
 */
export function applyHeapGrowingPercent(percent: number): number | 'node' | 'v8' {
  if (!Number.isSafeInteger(percent) || percent < 0 || percent > MAX_HEAP_GROWING_PERCENT) {
    throw new RangeError(`heap growing percent must be 0 to ${MAX_HEAP_GROWING_PERCENT}, got ${percent}`);
  }
  if (process.execArgv.some((a) => FLAG.test(a))) return 'node';
  if (percent === 0) return 'v8';
  // V8 reads this flag each time it sets the old generation's limit, so it takes effect from
  // the next collection on.
  setFlagsFromString(`--heap-growing-percent=${percent}`);
  return percent;
}
