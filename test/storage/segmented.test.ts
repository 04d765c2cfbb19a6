/**
 * logSegments: a segmented log's segments read through the storage layer (the event store's
 * compaction works on closed segments without parsing file names).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { openLog } from '../../ts/storage/file-log.js';
import { MemoryLog } from '../../ts/storage/memory-log.js';
import { isSegmented, logSegments } from '../../ts/storage/segmented.js';
import type { LogStorage, SegmentedLog } from '../../ts/storage/types.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

describe('logSegments', () => {
  it('gives each segment of a FileLog with the position it starts at, the open one last, after reopen too', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-segs-'));
    dirs.push(dir);
    let log = await openLog(dir, { segmentBytes: 256, logger: { warn: () => {} } });
    for (let i = 1; i <= 40; i++) await log.append([new TextEncoder().encode(`record ${i}`.padEnd(30, '.'))]);
    const check = async () => {
      expect(isSegmented(log)).toBe(true);
      const segs = logSegments(log);
      expect(segs.length).toBeGreaterThan(3);
      expect(segs.map((s) => s.file)).toEqual(log.segmentFiles);
      expect(segs[0]?.first).toBe(1n);
      for (let i = 1; i < segs.length; i++) {
        const s = segs[i]!;
        expect(s.first).toBeGreaterThan(segs[i - 1]!.first);
        // The segment starts at a record: the one before it is in the earlier segment.
        const [rec] = await log.read(s.first, { maxCount: 1 });
        expect(rec?.position).toBe(s.first);
      }
      expect(segs[segs.length - 1]!.first).toBeLessThanOrEqual(log.last);
    };
    await check();
    const before = logSegments(log);
    await log.close();
    log = await openLog(dir, { segmentBytes: 256, logger: { warn: () => {} } });
    expect(logSegments(log)).toEqual(before);
    await check();
    await log.compactBefore(before[2]!.first);
    expect(logSegments(log)).toEqual(before.slice(2));
    await log.close();
  });

  it('tells a log without segment files apart, and refuses a name that is not a segment file', () => {
    expect(isSegmented(new MemoryLog())).toBe(false);
    const odd = { segmentFiles: ['00000000000000000001.seg', 'notes.txt'] } as unknown as SegmentedLog;
    expect(isSegmented(odd as LogStorage)).toBe(true);
    let err: unknown;
    try {
      logSegments(odd);
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err) && err.code).toBe('PLX_STORAGE_CORRUPT');
  });
});
