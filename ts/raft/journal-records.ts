/**
 * The records FileRaftStorage writes into a plexus log (ts/storage): a journal of the storage
 * operations, replayed on open. Every number is a big-endian u64 holding at most 2^53 - 1.
 *
 * | kind | layout after the kind byte |
 * | 1 entry | type u8 (0 normal, 1 conf-change), index, term, data (the rest) |
 * | 2 hard state | term, vote, commit |
 * | 3 checkpoint | snapshot index, term, voter count u32, voters, learner count u32, learners, chunk count u32 |
 * | 4 snapshot chunk | data (the rest) |
 *
 * A checkpoint record, its chunk records, a hard-state record and the entries after the
 * snapshot form one batch that defines the whole state; replay starts at the last one.
 */
import { RaftErrorCode, raftError } from './errors.js';
import type { ConfState, Entry, HardState, SnapshotMetadata } from './types.js';

export const KIND_ENTRY = 1;
export const KIND_HARD = 2;
export const KIND_CHECKPOINT = 3;
export const KIND_CHUNK = 4;

export type JournalRecord =
  | { kind: typeof KIND_ENTRY; entry: Entry }
  | { kind: typeof KIND_HARD; hard: HardState }
  | { kind: typeof KIND_CHECKPOINT; meta: SnapshotMetadata; chunks: number }
  | { kind: typeof KIND_CHUNK; data: Uint8Array };

function corrupt(why: string): Error {
  return raftError(RaftErrorCode.STORAGE_CORRUPT, `a Raft journal record is damaged: ${why}`, { reason: why });
}

class Writer {
  private parts: Uint8Array[] = [];
  private size = 0;
  u8(v: number): this {
    this.parts.push(Uint8Array.of(v));
    this.size += 1;
    return this;
  }
  u32(v: number): this {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, v);
    this.parts.push(b);
    this.size += 4;
    return this;
  }
  u64(v: number): this {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(v));
    this.parts.push(b);
    this.size += 8;
    return this;
  }
  bytes(b: Uint8Array): this {
    this.parts.push(b);
    this.size += b.length;
    return this;
  }
  done(): Uint8Array {
    const out = new Uint8Array(this.size);
    let at = 0;
    for (const p of this.parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }
}

class Reader {
  private at = 0;
  private readonly view: DataView;
  constructor(private readonly b: Uint8Array) {
    this.view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }
  need(n: number): void {
    if (this.at + n > this.b.length) throw corrupt('cut short');
  }
  u8(): number {
    this.need(1);
    return this.b[this.at++]!;
  }
  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.at);
    this.at += 4;
    return v;
  }
  u64(): number {
    this.need(8);
    const v = this.view.getBigUint64(this.at);
    this.at += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw corrupt('number above 2^53 - 1');
    return Number(v);
  }
  ids(): number[] {
    const n = this.u32();
    if (n * 8 > this.b.length - this.at) throw corrupt('member count past the end');
    return Array.from({ length: n }, () => this.u64());
  }
  rest(): Uint8Array {
    const out = this.b.slice(this.at);
    this.at = this.b.length;
    return out;
  }
  end(): void {
    if (this.at !== this.b.length) throw corrupt('bytes after the record');
  }
}

/** A u64 (big-endian, as `Writer.u64`) of a safe integer, without a BigInt. */
function setU64(dv: DataView, at: number, v: number): void {
  dv.setUint32(at, Math.floor(v / 0x1_0000_0000));
  dv.setUint32(at + 4, v >>> 0);
}

const ENTRY_HEAD = 18;

/** The size of an entry record (`encodeEntryRecord`). */
export function entryRecordBytes(e: Entry): number {
  return ENTRY_HEAD + e.data.length;
}

/** Writes the bytes of `encodeEntryRecord(e)` into `out` at `off` (`entryRecordBytes(e)` of them). */
export function writeEntryRecord(out: Uint8Array, off: number, e: Entry): void {
  const dv = new DataView(out.buffer, out.byteOffset + off, ENTRY_HEAD);
  dv.setUint8(0, KIND_ENTRY);
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
  const out = new Uint8Array(25);
  const dv = new DataView(out.buffer);
  dv.setUint8(0, KIND_HARD);
  setU64(dv, 1, h.term);
  setU64(dv, 9, h.vote);
  setU64(dv, 17, h.commit);
  return out;
}

export function encodeCheckpointRecord(meta: SnapshotMetadata, chunks: number): Uint8Array {
  const w = new Writer().u8(KIND_CHECKPOINT).u64(meta.index).u64(meta.term);
  w.u32(meta.confState.voters.length);
  for (const v of meta.confState.voters) w.u64(v);
  w.u32(meta.confState.learners.length);
  for (const v of meta.confState.learners) w.u64(v);
  return w.u32(chunks).done();
}

export function encodeChunkRecord(data: Uint8Array): Uint8Array {
  return new Writer().u8(KIND_CHUNK).bytes(data).done();
}

export function decodeJournalRecord(b: Uint8Array): JournalRecord {
  const r = new Reader(b);
  const kind = r.u8();
  switch (kind) {
    case KIND_ENTRY: {
      const t = r.u8();
      if (t > 1) throw corrupt(`entry type ${t}`);
      const index = r.u64();
      const term = r.u64();
      return { kind, entry: { index, term, type: t === 0 ? 'normal' : 'conf-change', data: r.rest() } };
    }
    case KIND_HARD: {
      const hard = { term: r.u64(), vote: r.u64(), commit: r.u64() };
      r.end();
      return { kind, hard };
    }
    case KIND_CHECKPOINT: {
      const index = r.u64();
      const term = r.u64();
      const confState: ConfState = { voters: r.ids(), learners: r.ids() };
      const chunks = r.u32();
      r.end();
      return { kind, meta: { index, term, confState }, chunks };
    }
    case KIND_CHUNK:
      return { kind, data: r.rest() };
    default:
      throw corrupt(`unknown kind ${kind}`);
  }
}
