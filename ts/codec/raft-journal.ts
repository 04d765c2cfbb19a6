/**
 * The records FileRaftStorage writes into a plexus log (ts/storage): a journal of the storage
 * operations, replayed on open (docs/raft.md, "The Raft journal format"). The first byte holds the record version
 * in its high nibble and the kind in its low nibble. Every number is a u64 holding at most
 * 2^53 - 1, and counts are u32.
 *
 * - version 2 (written): first byte 0x21..0x24, numbers little-endian.
 * - version 1 (read only): first byte 0x01..0x04, numbers big-endian.
 *
 * | kind | layout after the first byte |
 * | 1 entry | type u8 (0 normal, 1 conf-change), index, term, data (the rest) |
 * | 2 hard state | term, vote, commit |
 * | 3 checkpoint | snapshot index, term, voter count u32, voters, learner count u32, learners, chunk count u32 |
 * | 4 snapshot chunk | data (the rest) |
 *
 * A checkpoint record, its chunk records, a hard-state record and the entries after the
 * snapshot form one batch that defines the whole state; replay starts at the last one. A
 * journal may hold version-1 records followed by version-2 ones (a data directory written
 * before the change and appended to after it).
 */
import { PlexusError } from '../core/errors.js';
import { type ByteFail, ByteReader, ByteWriter } from './bytes.js';
import type { ConfState, Entry, HardState, SnapshotMetadata } from './raft-types.js';

export const KIND_ENTRY = 1;
export const KIND_HARD = 2;
export const KIND_CHECKPOINT = 3;
export const KIND_CHUNK = 4;

/** The record version written (in the high nibble of the first byte). */
export const RAFT_JOURNAL_VERSION = 2;
const TAG = RAFT_JOURNAL_VERSION << 4;

export type JournalRecordVersion = 1 | 2;

export type JournalRecord =
  | { kind: typeof KIND_ENTRY; entry: Entry }
  | { kind: typeof KIND_HARD; hard: HardState }
  | { kind: typeof KIND_CHECKPOINT; meta: SnapshotMetadata; chunks: number }
  | { kind: typeof KIND_CHUNK; data: Uint8Array };

function corrupt(why: string): PlexusError {
  return new PlexusError('PLX_RAFT_STORAGE_CORRUPT', `a Raft journal record is damaged: ${why}`, { reason: why });
}

const fail: ByteFail = (reason, what) =>
  corrupt(
    reason === 'short' ? `cut short (${what})` : what === 'record' ? 'bytes after the record' : 'number above 2^53 - 1',
  );

const TWO_32 = 0x1_0000_0000;

/** A little-endian u64 of a safe integer, without a BigInt. */
function setU64(dv: DataView, at: number, v: number): void {
  dv.setUint32(at, v % TWO_32, true);
  dv.setUint32(at + 4, Math.floor(v / TWO_32), true);
}

const ENTRY_HEAD = 18;

/** The size of an entry record (`encodeEntryRecord`). */
export function entryRecordBytes(e: Entry): number {
  return ENTRY_HEAD + e.data.length;
}

/** Writes the bytes of `encodeEntryRecord(e)` into `out` at `off` (`entryRecordBytes(e)` of them). */
export function writeEntryRecord(out: Uint8Array, off: number, e: Entry): void {
  const dv = new DataView(out.buffer, out.byteOffset + off, ENTRY_HEAD);
  dv.setUint8(0, TAG | KIND_ENTRY);
  dv.setUint8(1, e.type === 'normal' ? 0 : 1);
  setU64(dv, 2, e.index);
  setU64(dv, 10, e.term);
  out.set(e.data, off + ENTRY_HEAD);
}

export function encodeEntryRecord(e: Entry): Uint8Array {
  const out = new Uint8Array(entryRecordBytes(e));
  writeEntryRecord(out, 0, e);
  return out;
}

export function encodeHardRecord(h: HardState): Uint8Array {
  return new ByteWriter(new Uint8Array(25))
    .u8(TAG | KIND_HARD)
    .u64(h.term)
    .u64(h.vote)
    .u64(h.commit)
    .finish();
}

export function encodeCheckpointRecord(meta: SnapshotMetadata, chunks: number): Uint8Array {
  const cs = meta.confState;
  const w = new ByteWriter(new Uint8Array(1 + 16 + 4 + cs.voters.length * 8 + 4 + cs.learners.length * 8 + 4));
  w.u8(TAG | KIND_CHECKPOINT)
    .u64(meta.index)
    .u64(meta.term);
  w.u32(cs.voters.length);
  for (const v of cs.voters) w.u64(v);
  w.u32(cs.learners.length);
  for (const v of cs.learners) w.u64(v);
  return w.u32(chunks).finish();
}

export function encodeChunkRecord(data: Uint8Array): Uint8Array {
  return new ByteWriter(new Uint8Array(1 + data.length))
    .u8(TAG | KIND_CHUNK)
    .bytes(data)
    .finish();
}

/** The numbers of one record version: little-endian (2) or big-endian (1). */
interface Numbers {
  u32(r: ByteReader, what: string): number;
  u64(r: ByteReader, what: string): number;
}
const LE: Numbers = { u32: (r, w) => r.u32(w), u64: (r, w) => r.u64(w) };
const BE: Numbers = { u32: (r, w) => r.u32be(w), u64: (r, w) => r.u64be(w) };

/** The version of the record `b` (1 or 2); a record of another version, or none, is PLX_RAFT_STORAGE_CORRUPT. */
export function journalRecordVersion(b: Uint8Array): JournalRecordVersion {
  if (b.length === 0) throw corrupt('cut short (kind)');
  const v = (b[0] as number) >> 4;
  if (v === 0) return 1;
  if (v === RAFT_JOURNAL_VERSION) return 2;
  throw corrupt(`unknown record version ${v}`);
}

export function decodeJournalRecord(b: Uint8Array): JournalRecord {
  const version = journalRecordVersion(b);
  const r = new ByteReader(b, fail);
  const first = r.u8('kind');
  const n = version === 1 ? BE : LE;
  const kind = first & 0x0f;
  switch (kind) {
    case KIND_ENTRY: {
      const t = r.u8('entry type');
      if (t > 1) throw corrupt(`entry type ${t}`);
      const index = n.u64(r, 'entry index');
      const term = n.u64(r, 'entry term');
      return { kind, entry: { index, term, type: t === 0 ? 'normal' : 'conf-change', data: r.rest().slice() } };
    }
    case KIND_HARD: {
      const hard = { term: n.u64(r, 'term'), vote: n.u64(r, 'vote'), commit: n.u64(r, 'commit') };
      r.end();
      return { kind, hard };
    }
    case KIND_CHECKPOINT: {
      const index = n.u64(r, 'snapshot index');
      const term = n.u64(r, 'snapshot term');
      const ids = (what: string): number[] => {
        const count = n.u32(r, `${what} count`);
        // Length first: a count the record cannot hold is refused before anything is allocated.
        if (count * 8 > r.left) throw corrupt('member count past the end');
        return Array.from({ length: count }, () => n.u64(r, what));
      };
      const confState: ConfState = { voters: ids('voters'), learners: ids('learners') };
      const chunks = n.u32(r, 'chunk count');
      r.end();
      return { kind, meta: { index, term, confState }, chunks };
    }
    case KIND_CHUNK:
      return { kind, data: r.rest().slice() };
    default:
      throw corrupt(`unknown kind ${kind}`);
  }
}
