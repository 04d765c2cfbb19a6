/**
 * The store's wall time comes from the clock it is given: a `Clock` (ts/core/clock.ts) or,
 * the earlier form of the option, a function; recorded times never go backwards.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { EventStore } from '../../ts/chronacta/store.js';
import { ManualClock } from '../../ts/core/clock.js';
import { quiet, tempDir } from './helpers.js';

const dirs: { remove: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.remove();
});

const event = (i: number) => ({
  id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  type: 'noted',
  data: new TextEncoder().encode(`{"i":${i}}`),
});

describe('EventStore clock', () => {
  it('stamps events with the time of a ManualClock, and never goes backwards', async () => {
    const d = await tempDir('store-clock');
    dirs.push(d);
    const clock = new ManualClock(1_764_000_000_000);
    const store = await EventStore.open({ dataDir: d.dir, logger: quiet, clock });
    try {
      await store.append('s-1', [event(1)]);
      clock.advance(5_000);
      await store.append('s-1', [event(2)]);
      const r = await store.readStream('s-1');
      expect(r.events.map((e) => e.recordedMs)).toEqual([1_764_000_000_000, 1_764_000_005_000]);
    } finally {
      await store.close();
    }
    // Reopened with a clock behind the recorded times: the next time is not earlier.
    const late = await EventStore.open({ dataDir: d.dir, logger: quiet, clock: new ManualClock(1_000) });
    try {
      await late.append('s-1', [event(3)]);
      const r = await late.readStream('s-1');
      expect(r.events[2]?.recordedMs).toBe(1_764_000_005_000);
    } finally {
      await late.close();
    }
  });

  it('still takes a function returning the time', async () => {
    const d = await tempDir('store-clock-fn');
    dirs.push(d);
    let ms = 1_700_000_000_000;
    const store = await EventStore.open({ dataDir: d.dir, logger: quiet, clock: () => ms });
    try {
      await store.append('s-1', [event(1)]);
      ms += 250;
      await store.append('s-1', [event(2)]);
      const r = await store.readStream('s-1');
      expect(r.events.map((e) => e.recordedMs)).toEqual([1_700_000_000_000, 1_700_000_000_250]);
    } finally {
      await store.close();
    }
  });
});
