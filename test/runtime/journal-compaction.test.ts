/**
 * Compaction of the actor journal (docs/runtime.md, "Compaction"): records before an actor's
 * newest snapshot are dead; a shard whose dead records pass the threshold is compacted (its
 * live records copied forward, the store compacted before them), in both layouts (one store
 * per shard, the node-wide log), and the node log's lanes reclaim what their shards dropped.
 * Disk stops growing under a sustained load with periodic snapshots, histories read the same
 * across the compacted boundary and after reopening, an old-format node log opens, and
 * fencing and compare-and-set hold throughout.
 */
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openJournal } from '../../ts/runtime/log-journal.js';
import type { MacrostepEntry, SnapshotEntry } from '../../ts/runtime/types.js';
import { MemoryLog, MemoryLogState, openLog } from '../../ts/storage/index.js';
import { IndexedThrough, MultiplexedLog as NodeLog, PositionRuns } from '../../ts/storage/multiplexed-log.js';
import { loopTurns } from '../helpers/clock.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';

const enc = new TextEncoder();
const dec = new TextDecoder();
const dirs: string[] = [];

afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-journal-compaction-'));
  dirs.push(d);
  return d;
}

async function diskBytes(dir: string): Promise<number> {
  let n = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    // a file a compaction removes meanwhile counts 0
    n += e.isDirectory()
      ? await diskBytes(p)
      : await stat(p).then(
          (st) => st.size,
          () => 0,
        );
  }
  return n;
}

function step(iri: string, seq: number): MacrostepEntry {
  return {
    seq,
    time: seq,
    dispatchedThrough: seq - 1,
    messageId: `${iri}#m${seq}`,
    event: { name: 'inc', data: { pad: 'x'.repeat(40) } },
    state: { count: seq },
    sends: [],
  };
}

function snap(iri: string, seq: number): SnapshotEntry {
  return { seq, time: seq, dispatchedThrough: seq, state: { count: seq }, dedup: [`${iri}#m${seq}`], pending: [] };
}

describe('PositionRuns', () => {
  it('maps positions as a plain map would, through appends, copies and drops (seeded)', () => {
    for (let seed = 1; seed <= 10; seed++) {
      const r = rng(seed);
      const runs = new PositionRuns();
      const ref = new Map<number, number>();
      let lane = 0;
      let last = 0;
      let start = 1;
      for (let op = 0; op < 300; op++) {
        const k = r() % 10;
        if (k < 5) {
          lane += 1 + (r() % 3);
          last++;
          runs.assign(last, lane);
          ref.set(last, lane);
        } else if (k < 8 && last >= start) {
          // copy a range forward
          const from = start + (r() % (last - start + 1));
          const to = Math.min(last, from + (r() % 8));
          for (let p = from; p <= to; p++) {
            lane++;
            runs.assign(p, lane);
            ref.set(p, lane);
          }
        } else if (last >= start) {
          const p = start + (r() % (last - start + 2));
          const dropped = runs.dropBelow(p);
          let want = 0;
          for (const q of [...ref.keys()]) {
            if (q < p) {
              ref.delete(q);
              want++;
            }
          }
          expect(dropped).toBe(want);
          start = Math.max(start, p);
        }
        expect(runs.count).toBe(ref.size);
        for (let p = 0; p <= last + 1; p++) expect(runs.lookup(p)).toBe(ref.get(p) ?? -1);
      }
    }
  });

  it('keeps one run for consecutive positions at consecutive store positions', () => {
    const runs = new PositionRuns();
    for (let p = 1; p <= 1000; p++) runs.assign(p, 100 + p);
    expect(runs.runs).toBe(1);
    for (let p = 1; p <= 500; p++) runs.assign(p, 5000 + p); // one run of copies
    expect(runs.runs).toBe(2);
    expect(runs.dropBelow(501)).toBe(500);
    expect(runs.runs).toBe(1);
    expect(runs.count).toBe(500);
  });
});

describe('IndexedThrough', () => {
  it('advances only through positions every one of which was added, in any order', () => {
    const ix = new IndexedThrough(10);
    ix.add(14, 15);
    expect(ix.through).toBe(10);
    ix.add(12, 13);
    expect(ix.through).toBe(10);
    ix.add(11, 11);
    expect(ix.through).toBe(15);
    ix.add(16, 20);
    ix.add(9, 9); // already through
    expect(ix.through).toBe(20);
  });
});

/** Drives `actors` through `rounds` of one macrostep each, a snapshot every `every` macrosteps. */
async function load(
  j: Awaited<ReturnType<typeof openJournal>>,
  actors: readonly string[],
  seqs: Map<string, number>,
  rounds: number,
  every: number,
): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    await Promise.all(
      actors.map(async (iri) => {
        const seq = (seqs.get(iri) ?? 0) + 1;
        await j.append(iri, step(iri, seq), { expectedSeq: seq - 1 });
        seqs.set(iri, seq);
        if (seq % every === 0) await j.snapshot(iri, snap(iri, seq));
      }),
    );
  }
}

async function checkHistories(
  j: Awaited<ReturnType<typeof openJournal>>,
  seqs: Map<string, number>,
  every: number,
): Promise<void> {
  for (const [iri, last] of seqs) {
    const h = await j.history(iri);
    expect(h.lastSeq).toBe(last);
    const snapAt = Math.floor(last / every) * every;
    if (snapAt > 0) expect(h.snapshot?.seq).toBe(snapAt);
    else expect(h.snapshot).toBeUndefined();
    expect(h.records.map((r) => r.seq)).toEqual(Array.from({ length: last - snapAt }, (_, k) => snapAt + k + 1));
    for (const r of h.records) expect(r.messageId).toBe(`${iri}#m${r.seq}`);
  }
}

describe.each(['shards', 'node'] as const)('journal compaction, %s layout', (store) => {
  const options = {
    shardCount: 4,
    store,
    log: { fsync: 'never' as const, segmentBytes: 16 * 1024 },
    compaction: { deadRecords: 200 },
  };

  it('stops disk growth under a sustained load with periodic snapshots; histories survive reopening', async () => {
    const dir = await tempDir();
    const actors = Array.from({ length: 24 }, (_, i) => `vt:c/${i}`);
    const idle = ['vt:idle/1', 'vt:idle/2', 'vt:idle/3'];
    const seqs = new Map<string, number>();
    const idleSeqs = new Map<string, number>();
    let j = await openJournal(dir, options);
    // actors written once and never again: their records must survive every compaction
    await load(j, idle, idleSeqs, 3, 2);
    const sizes: number[] = [];
    for (let round = 0; round < 12; round++) {
      await load(j, actors, seqs, 50, 10);
      // let compactions that started finish
      for (let s = 0; s < 4; s++) await j.compactShard(s).catch(() => {});
      sizes.push(await diskBytes(dir));
      if (round === 5) {
        await checkHistories(j, seqs, 10);
        await j.close();
        j = await openJournal(dir, options);
      }
    }
    expect(j.compactionStats.failures).toBe(0);
    // 600 macrosteps per actor were written; the disk holds a bounded part of them
    const written = sizes.length * 50 * actors.length;
    expect(written).toBe(14_400);
    // the second half of the run (another 7,200 macrosteps) ends no larger than twice the
    // largest size of the first half: the disk follows the live records, not the writes
    const firstHalf = Math.max(...sizes.slice(0, 6));
    const secondHalf = Math.max(...sizes.slice(6));
    expect(secondHalf).toBeLessThan(firstHalf * 2);
    expect(secondHalf).toBeLessThan(written * 20);
    await checkHistories(j, seqs, 10);
    await checkHistories(j, idleSeqs, 2);
    await j.close();
    const again = await openJournal(dir, options);
    await checkHistories(again, seqs, 10);
    await checkHistories(again, idleSeqs, 2);
    // compare-and-set holds after compaction and reopening
    await expect(again.append('vt:c/0', step('vt:c/0', 5), { expectedSeq: 4 })).rejects.toMatchObject({
      code: 'PLX_JOURNAL_CONFLICT',
    });
    const s0 = seqs.get('vt:c/0') as number;
    await again.append('vt:c/0', step('vt:c/0', s0 + 1), { expectedSeq: s0 });
    await again.close();
  });

  it('leaves a shard readable, each history whole, after a compaction stopped at any step', async () => {
    // A compaction's steps are appends of copies then one compactBefore; stopping after
    // any number of copies (a crash) and reopening must read the same histories.
    for (let stopAfter = 0; stopAfter <= 3; stopAfter++) {
      const dir = await tempDir();
      const seqs = new Map<string, number>();
      const actors = ['vt:a/1', 'vt:a/2', 'vt:a/3', 'vt:a/4'];
      const j = await openJournal(dir, { ...options, shardCount: 1, compaction: { deadRecords: 0 } });
      await load(j, actors, seqs, 23, 5);
      // copies as the compaction writes them: each actor's live records, appended again
      const [log] = [...(await j.openShards()).values()];
      let copies = 0;
      for (const iri of actors) {
        if (copies++ >= stopAfter) break;
        const h = await j.history(iri);
        const { encodeJournalRecord } = await import('../../ts/codec/journal-record.js');
        const { recordOfMacrostep, recordOfSnapshot } = await import('../../ts/runtime/entries.js');
        const payloads = [
          ...(h.snapshot ? [encodeJournalRecord(recordOfSnapshot(iri, h.snapshot))] : []),
          ...h.records.map((r) => encodeJournalRecord(recordOfMacrostep(iri, r))),
        ];
        await log?.append(payloads);
      }
      await j.close();
      const again = await openJournal(dir, { ...options, shardCount: 1, compaction: { deadRecords: 0 } });
      await checkHistories(again, seqs, 5);
      await again.close();
    }
  });
});

describe('NodeLog compaction', () => {
  it('opens a lane written in the first format, reads it, and compacts it into the new one', async () => {
    const dir = await tempDir();
    const lane = await openLog(join(dir, 'lane-0'), { fsync: 'never', segmentBytes: 1024 });
    // first format: shard u32, epoch u64, payload; shard 0 and 1 interleaved (one lane)
    const old = (shard: number, epoch: bigint, text: string) => {
      const b = Buffer.alloc(12 + text.length);
      b.writeUInt32LE(shard, 0);
      b.writeBigUInt64LE(epoch, 4);
      b.write(text, 12);
      return b;
    };
    for (let i = 1; i <= 40; i++) await lane.append([old(i % 2, 3n, `s${i % 2}-${Math.ceil(i / 2)}`)]);
    await lane.close();
    const nl = await NodeLog.open(dir, { fsync: 'never', segmentBytes: 1024 }, 4, { deadRecords: 5 });
    expect(nl.stores.length).toBe(1);
    const s0 = nl.shard(0);
    const s1 = nl.shard(1);
    expect([s0.first, s0.last, s1.last, s0.highestEpoch]).toEqual([1n, 20n, 20n, 3n]);
    expect((await s1.read(7n, { maxCount: 2 })).map((r) => [r.position, dec.decode(r.payload)])).toEqual([
      [7n, 's1-7'],
      [8n, 's1-8'],
    ]);
    // new records after the old ones
    const r = await s1.append([enc.encode('s1-21')], { epoch: 4n });
    expect(r.first).toBe(21n);
    // shard 0 drops its first 15, shard 1 its first 10: the lane copies what is left
    await s0.compactBefore(16n);
    await s1.compactBefore(11n);
    await nl.compactLane(0);
    expect(nl.compactions).toBeGreaterThan(0);
    expect(nl.compactionFailures).toBe(0);
    expect(s0.first).toBe(16n);
    await expect(s0.read(3n)).rejects.toMatchObject({ code: 'PLX_STORAGE_COMPACTED' });
    const want0 = Array.from({ length: 5 }, (_, k) => `s0-${16 + k}`);
    const want1 = [...Array.from({ length: 10 }, (_, k) => `s1-${11 + k}`), 's1-21'];
    expect((await s0.read(16n)).map((x) => dec.decode(x.payload))).toEqual(want0);
    expect((await s1.read(11n)).map((x) => dec.decode(x.payload))).toEqual(want1);
    expect((await s1.readBackward(99n, { maxCount: 3 })).map((x) => dec.decode(x.payload))).toEqual([
      's1-21',
      's1-20',
      's1-19',
    ]);
    await nl.close();
    // the store dropped whole segments below the copies
    const store = await openLog(join(dir, 'lane-0'), { segmentBytes: 1024 });
    expect(store.first).toBeGreaterThan(1n);
    await store.close();
    const again = await NodeLog.open(dir, { fsync: 'never', segmentBytes: 1024 });
    const a0 = again.shard(0);
    const a1 = again.shard(1);
    expect([a0.last, a1.last, a1.highestEpoch]).toEqual([20n, 21n, 4n]);
    expect((await a0.read(a0.first)).map((x) => dec.decode(x.payload)).slice(-5)).toEqual(want0);
    expect((await a1.read(11n)).map((x) => [x.position, dec.decode(x.payload)])).toEqual(
      want1.map((t, k) => [BigInt(11 + k), t]),
    );
    // fencing by the shard's highest epoch and compare-and-set on its own last position
    await expect(a1.append([enc.encode('x')], { epoch: 3n })).rejects.toMatchObject({ code: 'PLX_STORAGE_FENCED' });
    await expect(a1.append([enc.encode('x')], { expectedLast: 20n })).rejects.toMatchObject({
      code: 'PLX_STORAGE_CONFLICT',
    });
    expect((await a1.append([enc.encode('s1-22')], { epoch: 4n, expectedLast: 21n })).first).toBe(22n);
    await again.close();
  });

  it('keeps a shard whose records were all compacted: its last position and epoch survive the lane compaction', async () => {
    const dir = await tempDir();
    const opts = { fsync: 'never' as const, segmentBytes: 512 };
    const nl = await NodeLog.open(dir, opts, 1, { deadRecords: 0 });
    const a = nl.shard(0);
    const b = nl.shard(1);
    for (let i = 0; i < 30; i++) {
      await a.append([enc.encode(`a${i}`)], { epoch: 9n });
      await b.append([enc.encode(`b${i}`)], { epoch: 2n });
    }
    await a.compactBefore(31n);
    expect([a.first, a.last]).toEqual([0n, 30n]);
    await nl.compactLane(0);
    await nl.close();
    const again = await NodeLog.open(dir, opts);
    const a2 = again.shard(0);
    expect([a2.first, a2.last, a2.highestEpoch]).toEqual([0n, 30n, 9n]);
    expect(await a2.read(31n)).toEqual([]);
    await expect(a2.append([enc.encode('late')], { epoch: 8n })).rejects.toMatchObject({ code: 'PLX_STORAGE_FENCED' });
    expect((await a2.append([enc.encode('a30')], { epoch: 9n })).first).toBe(31n);
    expect((await again.shard(1).read(1n)).map((x) => dec.decode(x.payload))).toEqual(
      Array.from({ length: 30 }, (_, i) => `b${i}`),
    );
    await again.close();
  });

  it('keeps nothing in its index for compacted records, and one run per copied range', async () => {
    const nl = await NodeLog.over([new MemoryLog(new MemoryLogState())], { deadRecords: 0 });
    const a = nl.shard(0);
    const b = nl.shard(1);
    for (let i = 0; i < 1000; i++)
      await Promise.all([a.append([enc.encode(`a${i}`)]), b.append([enc.encode(`b${i}`)])]);
    // interleaved: one run per record
    expect(nl.indexSize()).toEqual({ runs: 2000, positions: 2000 });
    await a.compactBefore(901n);
    await b.compactBefore(951n);
    expect(nl.indexSize()).toEqual({ runs: 150, positions: 150 });
    await nl.compactLane(0);
    // the copies: one run per shard
    expect(nl.indexSize()).toEqual({ runs: 2, positions: 150 });
    expect(nl.laneStats()[0]).toMatchObject({ live: 150 });
    expect((await a.read(901n, { maxCount: 2 })).map((r) => dec.decode(r.payload))).toEqual(['a900', 'a901']);
    await nl.close();
  });

  it('a shard compaction resolves once its lane reclaimed the records; records that die meanwhile get a compaction of their own', async () => {
    const nl = await NodeLog.over([new MemoryLog(new MemoryLogState())], { deadRecords: 30 });
    const a = nl.shard(0);
    const b = nl.shard(1);
    for (let i = 0; i < 100; i++) await Promise.all([a.append([enc.encode(`a${i}`)]), b.append([enc.encode(`b${i}`)])]);
    // 60 of a's records die: fewer dead than live (60 against 140), no compaction yet
    await a.compactBefore(61n);
    expect(nl.compactions).toBe(0);
    // 90 of b's: 150 dead against 50 live, a compaction starts, and the call returns after it
    const dropB = b.compactBefore(91n);
    // while it runs, the rest of a's die: they ask for a compaction that is already running
    const dropA = a.compactBefore(101n);
    await Promise.all([dropB, dropA]);
    expect(nl.compactions).toBe(1);
    // the next one starts by itself for those 40 (no further drop calls for it) ...
    await until(() => nl.compactions >= 2, { timeoutMs: 1_000, what: 'the second compaction' });
    expect(nl.compactions).toBe(2);
    // ... and none after it: its own marks (one per shard) are below the threshold. A next one
    // would start on the microtask that ends the second; none is running once it ended.
    await loopTurns();
    expect(nl.compactionsRunning).toBe(0);
    expect(nl.compactions).toBe(2);
    expect(nl.laneStats()[0]).toMatchObject({ live: 10, dead: 2, stored: 12 });
    expect([a.last, (await a.read(1n)).length]).toEqual([100n, 0]);
    expect((await b.read(91n)).map((r) => dec.decode(r.payload))).toEqual(
      Array.from({ length: 10 }, (_, i) => `b${90 + i}`),
    );
    await nl.close();
  });

  it('reads racing a lane compaction find the records where they moved', async () => {
    const states = [new MemoryLogState()];
    const nl = await NodeLog.over(
      states.map((s) => new MemoryLog(s)),
      { deadRecords: 0 },
    );
    const s = nl.shard(0);
    for (let i = 1; i <= 200; i++) await s.append([enc.encode(`r${i}`)]);
    await s.compactBefore(101n);
    const reads = Array.from({ length: 20 }, (_, k) => s.read(BigInt(101 + k * 5), { maxCount: 3 }));
    await Promise.all([nl.compactLane(0), ...reads]);
    for (let k = 0; k < reads.length; k++) {
      expect((await reads[k])?.map((x) => dec.decode(x.payload))).toEqual([0, 1, 2].map((d) => `r${101 + k * 5 + d}`));
    }
    expect(nl.laneStats()[0]?.stored).toBeLessThan(200);
    await nl.close();
  });
});
