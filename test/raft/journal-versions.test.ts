/**
 * The Raft journal records changed from big-endian without a version (version 1) to
 * little-endian version 2. A data directory written by version 1 (test/fixtures/raft/journal-v1,
 * made by test/fixtures/raft/write-journal-v1.mjs) still opens with the same entries, hard state
 * and snapshot; new writes are version 2, and a journal holding both reads back.
 */
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeJournalRecord, journalRecordVersion } from '../../ts/codec/raft-journal.js';
import type { Entry } from '../../ts/raft/types.js';
import { FileRaftStorage } from '../../ts/raft-io/file-storage.js';
import { openLog } from '../../ts/storage/file-log.js';

const FIXTURE = join(import.meta.dirname, '../fixtures/raft/journal-v1');
const dirs: string[] = [];
afterEach(async () => {
  while (dirs.length > 0) await rm(dirs.pop()!, { recursive: true, force: true });
});
async function copyOfFixture(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-raft-v1-'));
  dirs.push(d);
  await cp(FIXTURE, d, { recursive: true });
  return d;
}
const dec = new TextDecoder();
const enc = new TextEncoder();
const e = (index: number, term: number, text: string): Entry => ({
  index,
  term,
  type: 'normal',
  data: enc.encode(text),
});

/** Every record payload of the journal in `dir`, in order. */
async function journal(dir: string): Promise<Uint8Array[]> {
  const log = await openLog(dir);
  try {
    const out: Uint8Array[] = [];
    for (let from = log.first; log.last > 0n && from <= log.last; ) {
      const batch = await log.read(from, { maxBytes: 1 << 20 });
      if (batch.length === 0) break;
      for (const r of batch) out.push(r.payload);
      from = batch[batch.length - 1]!.position + 1n;
    }
    return out;
  } finally {
    await log.close();
  }
}
const show = (es: Entry[]) => es.map((x) => `${x.term}/${x.index} ${x.type} ${dec.decode(x.data)}`);

describe('Raft journal written by record version 1', () => {
  it('opens with the same snapshot, hard state and entries', async () => {
    const s = await FileRaftStorage.open(await copyOfFixture());
    expect(s.firstIndex()).toBe(4);
    expect(s.lastIndex()).toBe(7);
    expect(show(s.entries(4, 8))).toEqual([
      '2/4 normal gamma',
      '2/5 normal delta',
      '5/6 normal epsilon',
      '5/7 conf-change {"voters":[1,2,3]}',
    ]);
    expect(s.snapshot().metadata).toEqual({ index: 3, term: 2, confState: { voters: [1, 2, 3], learners: [4] } });
    expect(dec.decode(s.snapshot().data)).toBe('snapshot at 3');
    expect(s.initialState().hardState).toEqual({ term: 5, vote: 1, commit: 6 });
    expect(s.initialState().confState).toEqual({ voters: [1, 2, 3], learners: [4] });
    await s.close();
  });

  it('holds only version-1 records as committed', async () => {
    const versions = (await journal(await copyOfFixture())).map(journalRecordVersion);
    expect(versions.length).toBeGreaterThan(5);
    expect(new Set(versions)).toEqual(new Set([1]));
  });

  it('appends version-2 records after them, and the mixed journal reads back', async () => {
    const dir = await copyOfFixture();
    const before = (await journal(dir)).length;
    const s = await FileRaftStorage.open(dir);
    s.append([e(8, 5, 'zeta'), e(9, 6, 'eta')]);
    s.setHardState({ term: 6, vote: 2, commit: 8 });
    await s.sync();
    await s.close();

    const records = await journal(dir);
    expect(records.slice(0, before).map(journalRecordVersion)).toEqual(Array(before).fill(1));
    const added = records.slice(before);
    expect(added.map(journalRecordVersion)).toEqual([2, 2, 2]);
    expect(added.map((r) => decodeJournalRecord(r).kind)).toEqual([1, 1, 2]);
    expect(added.every((r) => (r[0] as number) >> 4 === 2)).toBe(true);

    const r = await FileRaftStorage.open(dir);
    expect([r.firstIndex(), r.lastIndex()]).toEqual([4, 9]);
    expect(show(r.entries(4, 10))).toEqual([
      '2/4 normal gamma',
      '2/5 normal delta',
      '5/6 normal epsilon',
      '5/7 conf-change {"voters":[1,2,3]}',
      '5/8 normal zeta',
      '6/9 normal eta',
    ]);
    expect(r.initialState().hardState).toEqual({ term: 6, vote: 2, commit: 8 });
    expect(dec.decode(r.snapshot().data)).toBe('snapshot at 3');
    await r.close();
  });

  it('rewrites a checkpoint in version 2 on compaction and reopens from it', async () => {
    const dir = await copyOfFixture();
    const s = await FileRaftStorage.open(dir);
    s.compact({
      metadata: { index: 5, term: 2, confState: { voters: [1, 2, 3], learners: [4] } },
      data: enc.encode('snapshot at 5'),
    });
    await s.sync();
    await s.close();
    const records = await journal(dir);
    const last = records.map((b) => decodeJournalRecord(b).kind).lastIndexOf(3);
    expect(last).toBeGreaterThanOrEqual(0);
    expect(
      records
        .slice(last)
        .map(journalRecordVersion)
        .every((v) => v === 2),
    ).toBe(true);
    const r = await FileRaftStorage.open(dir);
    expect([r.firstIndex(), r.lastIndex()]).toEqual([6, 7]);
    expect(dec.decode(r.snapshot().data)).toBe('snapshot at 5');
    expect(r.initialState().hardState).toEqual({ term: 5, vote: 1, commit: 6 });
    await r.close();
  });
});
