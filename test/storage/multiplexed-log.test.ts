/**
 * NodeLog: every shard of a journal in one log-engine store. Each shard's view behaves as a
 * store of its own (positions, fencing, compare-and-set, reads), concurrent appends of
 * different shards share one write and one fsync, and the index is rebuilt on reopen.
 */
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { journalStoreMode, NODE_LOG_DIR, openJournalShards } from '../../ts/runtime/journal-dir.js';
import { LogJournalStorage, openJournal } from '../../ts/runtime/log-journal.js';
import { type FileLog, openLog } from '../../ts/storage/index.js';
import { MultiplexedLog as NodeLog } from '../../ts/storage/multiplexed-log.js';

const enc = new TextEncoder();
const dec = new TextDecoder();
const dirs: string[] = [];

afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-node-log-'));
  dirs.push(d);
  return d;
}

describe('NodeLog', () => {
  it('gives each shard its own positions and reads them back, also after reopening', async () => {
    const dir = await tempDir();
    const nl = await NodeLog.open(dir, { fsync: 'batch' });
    const a = nl.shard(3);
    const b = nl.shard(5);
    const ra = await a.append([enc.encode('a1'), enc.encode('a2')], { epoch: 7n });
    const rb = await b.append([enc.encode('b1')]);
    const ra2 = await a.append([enc.encode('a3')], { epoch: 7n });
    expect([ra.first, ra.last, rb.first, ra2.first]).toEqual([1n, 2n, 1n, 3n]);
    expect(a.last).toBe(3n);
    expect(b.last).toBe(1n);
    expect(nl.shard(4).last).toBe(0n);
    expect(nl.holds(3) && nl.holds(5) && !nl.holds(4)).toBe(true);
    await nl.close();

    const again = await NodeLog.open(dir, { fsync: 'batch' });
    const a2 = again.shard(3);
    expect(a2.last).toBe(3n);
    expect(a2.highestEpoch).toBe(7n);
    const recs = await a2.read(2n);
    expect(recs.map((r) => [r.position, dec.decode(r.payload), r.epoch])).toEqual([
      [2n, 'a2', 7n],
      [3n, 'a3', 7n],
    ]);
    const back = await a2.readBackward(99n, { maxCount: 2 });
    expect(back.map((r) => dec.decode(r.payload))).toEqual(['a3', 'a2']);
    expect((await again.shard(5).read(1n)).map((r) => dec.decode(r.payload))).toEqual(['b1']);
    expect(again.heldShards().sort()).toEqual([3, 5]);
    await again.close();
  });

  it('fences each shard by its own highest epoch and compares expectedLast per shard', async () => {
    const dir = await tempDir();
    const nl = await NodeLog.open(dir, { fsync: 'never' });
    await nl.shard(1).append([enc.encode('x')], { epoch: 10n });
    // another shard at a lower epoch is not fenced by shard 1's
    await nl.shard(2).append([enc.encode('y')], { epoch: 2n });
    await expect(nl.shard(1).append([enc.encode('z')], { epoch: 9n })).rejects.toMatchObject({
      code: 'PLX_STORAGE_FENCED',
    });
    await expect(nl.shard(2).append([enc.encode('z')], { expectedLast: 0n })).rejects.toMatchObject({
      code: 'PLX_STORAGE_CONFLICT',
    });
    await nl.shard(2).append([enc.encode('z')], { expectedLast: 1n });
    expect(nl.shard(1).last).toBe(1n);
    expect(nl.shard(2).last).toBe(2n);
    await nl.close();
  });

  it('writes concurrent appends of different shards in one group commit', async () => {
    const dir = await tempDir();
    const store = await openLog(dir, { fsync: 'batch' });
    const nl = await NodeLog.over(store);
    // one append first, so that the rest queue behind its write and go out together
    const first = nl.shard(0).append([enc.encode('first')]);
    const rest = Array.from({ length: 32 }, (_, i) => nl.shard(1 + (i % 16)).append([enc.encode(`m${i}`)]));
    await Promise.all([first, ...rest]);
    const stats = (store as FileLog).stats;
    expect(stats.appends).toBe(33);
    expect(stats.writes).toBeLessThanOrEqual(3);
    expect(stats.syncs).toBe(stats.writes);
    for (let s = 1; s <= 16; s++) expect(nl.shard(s).last).toBe(2n);
    await nl.close();
  });

  it('carries an actor journal: histories survive reopening', async () => {
    const dir = await tempDir();
    const open = async () => {
      const nl = await NodeLog.open(dir, { fsync: 'batch' });
      return { nl, j: new LogJournalStorage(8, async (s) => nl.shard(s)) };
    };
    const { nl, j } = await open();
    const actors = ['vt:a/1', 'vt:a/2', 'vt:b/3', 'vt:c/4'];
    await Promise.all(
      actors.map(async (iri) => {
        for (let seq = 1; seq <= 5; seq++) {
          await j.append(
            iri,
            { seq, time: 0, dispatchedThrough: 0, messageId: `${iri}#${seq}`, event: { name: 'inc' }, sends: [] },
            { expectedSeq: seq - 1 },
          );
        }
      }),
    );
    await j.close();
    await nl.close();
    const again = await open();
    for (const iri of actors) {
      const h = await again.j.history(iri);
      expect(h.lastSeq).toBe(5);
      expect(h.records.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5]);
    }
    await again.j.close();
    await again.nl.close();
  });

  it('keeps per-shard stores of an existing journal directory, and reads either mode', async () => {
    const dir = await tempDir();
    expect(await journalStoreMode(dir)).toBe('node');
    await mkdir(join(dir, 'shards', '0000002'), { recursive: true });
    const legacy = await openLog(join(dir, 'shards', '0000002'));
    await legacy.append([enc.encode('old')]);
    await legacy.close();
    expect(await journalStoreMode(dir)).toBe('shards');
    const stores = await openJournalShards(dir);
    expect(await stores.shard(1)).toBeUndefined();
    const s2 = await stores.shard(2);
    expect((await s2?.read(1n))?.map((r) => dec.decode(r.payload))).toEqual(['old']);
    await stores.close();

    const fresh = await tempDir();
    await mkdir(join(fresh, NODE_LOG_DIR));
    const nl = await NodeLog.open(join(fresh, NODE_LOG_DIR));
    await nl.shard(6).append([enc.encode('new')]);
    await nl.close();
    await writeFile(join(fresh, 'journal.meta'), '{}');
    expect(await journalStoreMode(fresh)).toBe('node');
    const st = await openJournalShards(fresh);
    expect(await st.shard(5)).toBeUndefined();
    expect((await (await st.shard(6))?.read(1n))?.map((r) => dec.decode(r.payload))).toEqual(['new']);
    await st.close();
  });

  it('openJournal: a new directory with store node keeps every shard in node/, and reopens so', async () => {
    const dir = await tempDir();
    const step = (seq: number) => ({
      seq,
      time: 0,
      dispatchedThrough: 0,
      messageId: `m${seq}`,
      event: { name: 'inc' },
      sends: [],
    });
    const j = await openJournal(dir, { shardCount: 16, store: 'node', log: { fsync: 'batch' } });
    const actors = Array.from({ length: 12 }, (_, i) => `vt:x/${i}`);
    await Promise.all(actors.map((iri) => j.append(iri, step(1), { expectedSeq: 0 })));
    await j.close();
    expect(await readdir(dir)).not.toContain('shards');
    expect((await readdir(join(dir, NODE_LOG_DIR))).length).toBeGreaterThan(0);
    const again = await openJournal(dir);
    for (const iri of actors) expect((await again.history(iri)).lastSeq).toBe(1);
    await again.append('vt:x/0', step(2), { expectedSeq: 1 });
    await again.close();
  });

  it('puts shard n in lane n % lanes and keeps the lane count of an existing directory', async () => {
    const dir = await tempDir();
    const nl = await NodeLog.open(dir, { fsync: 'batch' }, 2);
    await Promise.all([0, 1, 2, 3, 5].map((s) => nl.shard(s).append([enc.encode(`s${s}`)])));
    await nl.close();
    expect((await readdir(dir)).sort()).toEqual(['lane-0', 'lane-1']);
    const lane1 = await openLog(join(dir, 'lane-1'));
    expect(lane1.last).toBe(3n); // shards 1, 3, 5
    await lane1.close();
    const again = await NodeLog.open(dir, { fsync: 'batch' }, 8);
    for (const s of [0, 1, 2, 3, 5]) {
      expect((await again.shard(s).read(1n)).map((r) => dec.decode(r.payload))).toEqual([`s${s}`]);
    }
    expect(again.stores.length).toBe(2);
    await again.close();
  });
});
