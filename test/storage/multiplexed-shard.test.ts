/**
 * A shard of a MultiplexedLog is a LogStorage: it runs the seam's compliance suite, with its
 * lanes on files and in memory. Each open writes a record to a neighbour shard of the same
 * lane, so the shard under test shares its lane with another's records across reopens.
 * A shard cannot be truncated (its records are interleaved with the neighbour's), so it
 * runs `logStorageSuite` only.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MemoryLog, MemoryLogState } from '../../ts/storage/memory-log.js';
import { MultiplexedLog } from '../../ts/storage/multiplexed-log.js';
import type { LogStorage } from '../../ts/storage/types.js';
import type { SuiteFactory } from '../compliance/_kit.js';
import { type LogStorageHarness, logStorageSuite } from '../compliance/log-storage.suite.js';

const quiet = { warn: () => {} };
/** The shard under test and a neighbour in the same lane (5 % 2 === 1 % 2). */
const SHARD = 5;
const NEIGHBOUR = 1;
const enc = new TextEncoder();

interface Shards extends LogStorageHarness {
  dir?: string;
  log?: MultiplexedLog;
}

/** The harness: `open` closes the multiplexed log opened before (a shard's close leaves it open), then opens it again. */
function shardsOf(openLanes: (segmentBytes: number | undefined, dir: string | undefined) => Promise<MultiplexedLog>) {
  return async (dir?: string): Promise<Shards> => {
    const h: Shards = {
      ...(dir === undefined ? {} : { dir }),
      open: async (opts) => {
        await h.log?.close();
        h.log = undefined;
        const ml = await openLanes(opts?.segmentBytes, dir);
        h.log = ml;
        await ml.shard(NEIGHBOUR).append([enc.encode('neighbour')]);
        return ml.shard(SHARD) as LogStorage;
      },
    };
    return h;
  };
}

const onFiles: SuiteFactory<Shards> = {
  setup: async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-mux-'));
    return shardsOf((segmentBytes, d) =>
      MultiplexedLog.open(
        d as string,
        { logger: quiet, fsync: 'batch', ...(segmentBytes === undefined ? {} : { segmentBytes }) },
        2,
        { deadRecords: 1 },
      ),
    )(dir);
  },
  teardown: async (h) => {
    await h.log?.close();
    if (h.dir !== undefined) await rm(h.dir, { recursive: true, force: true });
  },
};

const inMemory: SuiteFactory<Shards> = {
  setup: async () => {
    const lanes = [new MemoryLogState(), new MemoryLogState()];
    return shardsOf(() =>
      MultiplexedLog.over(
        lanes.map((s) => new MemoryLog(s)),
        { deadRecords: 1 },
      ),
    )();
  },
  teardown: async (h) => {
    await h.log?.close();
  },
};

logStorageSuite('MultiplexedLog shard, lanes on FileLog', onFiles);
logStorageSuite('MultiplexedLog shard, lanes on MemoryLog', inMemory);

describe('MultiplexedLog shard reads', () => {
  it('budgets maxBytes by the shard payloads, up to the largest safe integer', async () => {
    const ml = await MultiplexedLog.over([new MemoryLog(new MemoryLogState())]);
    const s = ml.shard(SHARD);
    for (let i = 0; i < 5; i++) {
      await s.append([enc.encode('0123456789')]);
      await ml.shard(NEIGHBOUR).append([enc.encode('other')]);
    }
    expect((await s.read(1n, { maxBytes: 20 })).map((r) => r.position)).toEqual([1n, 2n]);
    expect((await s.read(1n, { maxBytes: Number.MAX_SAFE_INTEGER })).length).toBe(5);
    expect((await s.readBackward(5n, { maxBytes: Number.MAX_SAFE_INTEGER })).length).toBe(5);
    await ml.close();
  });
});
