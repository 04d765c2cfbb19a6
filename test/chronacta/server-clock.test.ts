/**
 * The server's periodic work runs on the timers it is given: with a ManualClock, the
 * compaction interval fires when the clock reaches it, whatever wall time has passed.
 */
import { readdir } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { until } from '../helpers/until.js';
import { type Running, serve, tempDir } from './helpers.js';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const generations = async (dir: string) => (await readdir(dir)).filter((n) => n.startsWith('gen-'));

describe('Chronacta server on a manual clock', () => {
  it('compacts every compactEveryMs of the clock it is given', async () => {
    const d = await tempDir('server-clock');
    cleanup.push(d.remove);
    const timers = new ManualClock(0);
    const r: Running = await serve(d.dir, { segmentBytes: 4096, compactEveryMs: 1000, timers });
    cleanup.push(() => r.stop());
    const enc = new TextEncoder();
    for (let i = 0; i < 40; i++) {
      await r.client.append(`s-${i % 4}`, [
        {
          id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
          type: 'noted',
          data: enc.encode('x'.repeat(200)),
        },
      ]);
    }
    const archive = r.server.store.prepared.paths.archive;
    expect(await generations(archive)).toEqual([]);
    timers.advance(999);
    await new Promise((res) => setImmediate(res));
    expect(await generations(archive)).toEqual([]);
    timers.advance(1);
    await until(async () => (await generations(archive)).length === 1, { what: 'the first archive generation' });
  });
});
