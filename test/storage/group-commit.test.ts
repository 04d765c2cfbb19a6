/**
 * Group commit: appends waiting together share one fsync, and none is acknowledged before
 * an fsync that covers it. fsyncs are counted through the `onSync` hook, never timed.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type FileLog, type FileLogOptions, openLog } from '../../ts/storage/file-log.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'plexus-group-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const record = (i: number) => new Uint8Array(100).fill(i & 0xff);

async function counted(opts: FileLogOptions): Promise<{ log: FileLog; syncs: () => number }> {
  let n = 0;
  const log = await openLog(dir, { ...opts, onSync: () => n++ });
  return { log, syncs: () => n };
}

/** `appenders` loops, each appending `each` records one at a time, waiting for each acknowledgement. */
async function appendLoops(log: FileLog, appenders: number, each: number): Promise<void> {
  await Promise.all(
    Array.from({ length: appenders }, async (_, a) => {
      for (let i = 0; i < each; i++) await log.append([record(a * each + i)]);
    }),
  );
}

describe('group commit', () => {
  it("shares one fsync among appends called together (fsync 'batch')", async () => {
    const { log, syncs } = await counted({ fsync: 'batch' });
    const results = await Promise.all(Array.from({ length: 64 }, (_, i) => log.append([record(i)])));
    expect(results.at(-1)?.last).toBe(64n);
    expect(syncs()).toBe(1);
    expect(log.stats).toMatchObject({ appends: 64, records: 64, writes: 1, syncs: 1 });
    await log.close();
  });

  it('shares fsyncs among appenders that each wait for their acknowledgement', async () => {
    const { log, syncs } = await counted({ fsync: 'batch' });
    await appendLoops(log, 16, 40);
    expect(log.last).toBe(640n);
    // Each round of 16 waiting appends rides one fsync; allow for rounds that split.
    expect(syncs()).toBeLessThanOrEqual(640 / 4);
    expect(syncs()).toBeGreaterThanOrEqual(40);
    await log.close();
  });

  it("runs one fsync per append with fsync 'always'", async () => {
    const { log, syncs } = await counted({ fsync: 'always' });
    await Promise.all(Array.from({ length: 64 }, (_, i) => log.append([record(i)])));
    expect(syncs()).toBe(64);
    expect(log.stats.writes).toBe(64);
    await log.close();
  });

  it("runs no fsync with fsync 'never'", async () => {
    const { log, syncs } = await counted({ fsync: 'never' });
    await appendLoops(log, 4, 25);
    expect(syncs()).toBe(0);
    expect(log.last).toBe(100n);
    await log.close();
  });

  it('acknowledges an append only after an fsync that covers it', async () => {
    const order: string[] = [];
    const log = await openLog(dir, { onSync: () => order.push('sync') });
    const acks = Array.from({ length: 10 }, (_, i) => log.append([record(i)]).then(() => order.push(`ack${i}`)));
    await Promise.all(acks);
    expect(order[0]).toBe('sync');
    // Another round: appends called after the first fsync started wait for the next one.
    order.length = 0;
    const first = log.append([record(1)]).then(() => order.push('ackA'));
    await Promise.resolve();
    await new Promise((r) => setImmediate(r));
    const second = log.append([record(2)]).then(() => order.push('ackB'));
    await Promise.all([first, second]);
    expect(order.indexOf('sync')).toBeLessThan(order.indexOf('ackA'));
    expect(order.lastIndexOf('sync')).toBeLessThan(order.indexOf('ackB'));
    await log.close();
  });

  it('fsyncs a new segment before writing into it, and groups never span segments', async () => {
    const files: string[] = [];
    const log = await openLog(dir, { segmentBytes: 1000, onSync: (f) => files.push(f) });
    await Promise.all(Array.from({ length: 30 }, (_, i) => log.append([record(i)])));
    expect(log.last).toBe(30n);
    // 148 bytes a record: 6 records fill a segment of 1000 bytes, so 30 need 5 segments.
    expect(log.segmentFiles).toHaveLength(5);
    expect(new Set(files).size).toBe(5);
    expect((await log.read(1n)).map((r) => r.payload[0])).toEqual(Array.from({ length: 30 }, (_, i) => i));
    await log.close();
  });
});
