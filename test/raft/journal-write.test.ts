/**
 * The Raft journal's write path: entry and hard-state records keep their byte layout (version 2
 * and kind, little-endian u64 fields, data; version-1 records, big-endian, still decode), and FileRaftStorage lays a Ready's records out in one framed
 * batch (entries, then a commit-only hard state riding along) that replays after reopen.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  decodeJournalRecord,
  encodeEntryRecord,
  encodeHardRecord,
  entryRecordBytes,
  journalRecordVersion,
  writeEntryRecord,
} from '../../ts/codec/raft-journal.js';
import type { Entry } from '../../ts/raft/types.js';
import { FileRaftStorage } from '../../ts/raft-io/file-storage.js';
import { openLog } from '../../ts/storage/file-log.js';

const dirs: string[] = [];
afterEach(async () => {
  while (dirs.length > 0) await rm(dirs.pop() as string, { recursive: true, force: true });
});

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

describe('Raft journal records', () => {
  it('encode an entry as version and kind, type, index and term (little-endian u64) and the data', () => {
    const e: Entry = { index: 2 ** 40 + 5, term: 2 ** 33 + 7, type: 'conf-change', data: Uint8Array.of(0xaa, 0xbb) };
    const b = encodeEntryRecord(e);
    expect(entryRecordBytes(e)).toBe(b.length);
    expect(hex(b)).toBe(`21010500000000010000${'0700000002000000'}aabb`);
    expect(journalRecordVersion(b)).toBe(2);
    expect(decodeJournalRecord(b)).toEqual({ kind: 1, entry: e });
    // The version-1 bytes of the same entry (big-endian) decode to the same entry.
    const v1 = new Uint8Array(Buffer.from(`01010000010000000005${'0000000200000007'}aabb`, 'hex'));
    expect(journalRecordVersion(v1)).toBe(1);
    expect(decodeJournalRecord(v1)).toEqual({ kind: 1, entry: e });
    // Written in place at an offset: the same bytes, the rest of the buffer untouched.
    const out = new Uint8Array(b.length + 7).fill(0xee);
    writeEntryRecord(out, 3, e);
    expect(hex(out.subarray(3, 3 + b.length))).toBe(hex(b));
    expect([...out.subarray(0, 3), ...out.subarray(3 + b.length)]).toEqual([0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee]);
  });

  it('encode a hard state as version and kind, term, vote and commit (little-endian u64)', () => {
    const h = { term: 2 ** 35 + 1, vote: 3, commit: Number.MAX_SAFE_INTEGER };
    const b = encodeHardRecord(h);
    expect(hex(b)).toBe(`22${'0100000008000000'}${'0300000000000000'}${'ffffffffffff1f00'}`);
    expect(decodeJournalRecord(b)).toEqual({ kind: 2, hard: h });
    const v1 = new Uint8Array(Buffer.from(`02${'0000000800000001'}${'0000000000000003'}${'001fffffffffffff'}`, 'hex'));
    expect(decodeJournalRecord(v1)).toEqual({ kind: 2, hard: h });
  });

  it('FileRaftStorage writes a Ready as one framed batch that replays: entries, then the commit riding along', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-raft-journal-'));
    dirs.push(dir);
    const s = await FileRaftStorage.bootstrap(dir, { voters: [1], learners: [] });
    const enc = new TextEncoder();
    const entries: Entry[] = Array.from({ length: 5 }, (_, i) => ({
      index: i + 2,
      term: 1,
      type: 'normal',
      data: enc.encode(`entry ${i + 2} `.repeat(i + 1)),
    }));
    s.append(entries.slice(0, 2));
    // Only the commit index moved: the hard state waits for the next records and goes with them.
    s.setHardState({ term: 1, vote: 0, commit: 3 });
    s.append(entries.slice(2));
    s.append([]); // nothing to write
    await s.sync();
    await s.close();

    // The journal's last two batches: two entries; then three entries and the hard state.
    const log = await openLog(dir);
    const recs = await log.read(1n, { maxBytes: 1 << 20 });
    await log.close();
    const tail = recs.slice(-6);
    const kinds = tail.map((r) => decodeJournalRecord(r.payload).kind);
    expect(kinds).toEqual([1, 1, 1, 1, 1, 2]);
    expect(decodeJournalRecord((tail[5] as (typeof tail)[0]).payload)).toEqual({
      kind: 2,
      hard: { term: 1, vote: 0, commit: 3 },
    });
    const batch = (i: number) => hex((tail[i] as (typeof tail)[0]).batchId);
    expect(batch(0)).toBe(batch(1));
    expect(batch(1)).not.toBe(batch(2));
    expect(new Set([2, 3, 4, 5].map(batch)).size).toBe(1);
    const again = await FileRaftStorage.open(dir);
    expect(again.entries(2, 7)).toEqual(entries);
    expect(again.initialState().hardState).toEqual({ term: 1, vote: 0, commit: 3 });
    await again.close();
  });
});
