/**
 * FileRaftStorage (the Raft log on the plexus log engine, real files with fsync) passes the
 * RaftStorage compliance suite, survives reopen, replays checkpoints and refuses a damaged journal.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeJournalRecord, encodeEntryRecord } from '../../ts/codec/raft-journal.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { RaftNode } from '../../ts/raft/node.js';
import type { Entry } from '../../ts/raft/types.js';
import { FileRaftStorage } from '../../ts/raft-io/file-storage.js';
import { SimRandom } from '../../ts/sim/rng.js';
import { openLog } from '../../ts/storage/file-log.js';
import { raftStorageSuite } from '../compliance/raft-storage.suite.js';

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-raft-'));
  dirs.push(d);
  return d;
}
afterEach(async () => {
  while (dirs.length > 0) await rm(dirs.pop()!, { recursive: true, force: true });
});

raftStorageSuite('FileRaftStorage', async () => {
  const dir = await tempDir();
  let storage = await FileRaftStorage.open(dir);
  return {
    storage,
    reopen: async () => {
      await storage.sync();
      await storage.close();
      storage = await FileRaftStorage.open(dir);
      return storage;
    },
    teardown: async () => {
      await storage.close();
    },
  };
});

const enc = new TextEncoder();
const e = (index: number, term: number, text = `e${index}`): Entry => ({
  index,
  term,
  type: 'normal',
  data: enc.encode(text),
});

describe('FileRaftStorage', () => {
  it('replays a checkpoint: snapshot, hard state and later entries come back after reopen', async () => {
    const dir = await tempDir();
    const s = await FileRaftStorage.bootstrap(dir, { voters: [1, 2, 3], learners: [] });
    s.append([e(2, 1), e(3, 2), e(4, 2, 'conflict')]);
    s.append([e(4, 3, 'winner'), e(5, 3)]);
    s.setHardState({ term: 3, vote: 2, commit: 4 });
    s.compact({
      metadata: { index: 3, term: 2, confState: { voters: [1, 2, 3], learners: [] } },
      data: enc.encode('S'),
    });
    s.append([e(6, 3)]);
    await s.sync();
    await s.close();
    const r = await FileRaftStorage.open(dir);
    expect(r.firstIndex()).toBe(4);
    expect(r.lastIndex()).toBe(6);
    expect(r.entries(4, 7).map((x) => `${x.term}/${x.index} ${new TextDecoder().decode(x.data)}`)).toEqual([
      '3/4 winner',
      '3/5 e5',
      '3/6 e6',
    ]);
    expect(r.snapshot().data).toEqual(enc.encode('S'));
    expect(r.initialState().hardState).toEqual({ term: 3, vote: 2, commit: 4 });
    await r.close();
  });

  it('drops journal segments behind a checkpoint, so the journal stays bounded', async () => {
    const dir = await tempDir();
    const s = await FileRaftStorage.open(dir, { segmentBytes: 4096 });
    const cs = { voters: [1], learners: [] };
    let last = 0;
    for (let round = 0; round < 30; round++) {
      const batch = Array.from({ length: 20 }, () => e(++last, 1, 'x'.repeat(50)));
      s.append(batch);
      s.compact({ metadata: { index: last - 2, term: 1, confState: cs }, data: enc.encode(`state@${last - 2}`) });
    }
    await s.sync();
    await s.close();
    const log = await openLog(dir);
    expect(log.first).toBeGreaterThan(100n); // most of the 600+ records are gone
    await log.close();
    const r = await FileRaftStorage.open(dir);
    expect([r.firstIndex(), r.lastIndex()]).toEqual([last - 1, last]);
    expect(new TextDecoder().decode(r.snapshot().data)).toBe(`state@${last - 2}`);
    await r.close();
  });

  it('a node restarted on its reopened storage keeps term, vote and log', async () => {
    const dir = await tempDir();
    const s = await FileRaftStorage.bootstrap(dir, { voters: [1], learners: [] });
    const rng = new SimRandom(3);
    const n = new RaftNode({ id: 1, storage: s, random: (k) => rng.int(k) });
    n.campaign();
    n.propose(enc.encode('durable'));
    while (n.hasReady()) {
      const rd = n.ready();
      s.append(rd.entries);
      if (rd.hardState) s.setHardState(rd.hardState);
      n.advance();
    }
    await s.sync();
    await s.close();
    const r = await FileRaftStorage.open(dir);
    const again = new RaftNode({ id: 1, storage: r, random: (k) => rng.int(k) });
    expect(again.status()).toMatchObject({ term: 2, vote: 1, commit: 3, lastIndex: 3 });
    expect(new TextDecoder().decode(r.entries(3, 4)[0]!.data)).toBe('durable');
    await r.close();
  });

  it('refuses a damaged journal record with PLX_RAFT_STORAGE_CORRUPT', () => {
    const good = encodeEntryRecord(e(1, 1));
    expect(decodeJournalRecord(good)).toMatchObject({ kind: 1 });
    for (const bad of [new Uint8Array(0), Uint8Array.of(9), good.subarray(0, 10), Uint8Array.of(2, 0, 0)]) {
      try {
        decodeJournalRecord(bad);
        expect.unreachable();
      } catch (err) {
        expect(isPlexusError(err, 'PLX_RAFT_STORAGE_CORRUPT')).toBe(true);
      }
    }
  });

  it('decodes any bytes to a record or PLX_RAFT_STORAGE_CORRUPT, never anything else', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        try {
          decodeJournalRecord(bytes);
        } catch (err) {
          expect(isPlexusError(err, 'PLX_RAFT_STORAGE_CORRUPT')).toBe(true);
        }
      }),
      { numRuns: 2000 },
    );
  });
});
