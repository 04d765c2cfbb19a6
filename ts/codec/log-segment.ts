/**
 * The bytes of a log directory of the log engine (docs/storage.md, "On-disk format";
 * docs/formats.md): segment files of records, persisted indexes of closed segments and the
 * meta file. All integers are little endian. Positions are held as numbers inside the engine
 * (exact up to 2^53 - 1); a stored position above that is treated as damage. The file names of
 * a log directory, and the files themselves, are the engine's (ts/storage/format.ts). Fields
 * are read and written with codec/bytes: the writer for the headers, meta and index files, the
 * fixed-offset field functions for the record headers of a batch (a tight loop, lengths checked
 * first by the caller).
 */
import { allocShared, backend, crc32c, type SharedBytes } from '../core/index.js';
import { wasmRuntime } from '../core/wasm/runtime.js';
import { ByteWriter, getU16, getU32, getU64n, putU64 } from './bytes.js';

/** Segment header: magic, base position, reserved, CRC-32C of bytes 0..27. */
export const SEGMENT_HEADER_BYTES = 32;
export const SEGMENT_MAGIC = Buffer.from('PLXSEG01', 'latin1');

/** Record header: length, CRC-32C, position, epoch, batch id, index in batch, flags, reserved. */
export const RECORD_HEADER_BYTES = 48;
/** Flag bit 0: the record is the last of its batch. */
export const FLAG_BATCH_END = 1;
export const KNOWN_FLAGS = FLAG_BATCH_END;

/** Meta file, current layout: magic, highest epoch, seal count, the seals, CRC-32C of all before it. */
export const META_MAGIC = Buffer.from('PLXMETA2', 'latin1');
export const META_HEADER_BYTES = 20;
export const META_SEAL_BYTES = 12;
/** Meta file, first layout (read, never written): magic, epoch, one seal, CRC-32C; 32 bytes. */
export const META_V1_MAGIC = Buffer.from('PLXMETA1', 'latin1');
export const META_V1_BYTES = 32;

export const INDEX_MAGIC = Buffer.from('PLXIDX01', 'latin1');
export const INDEX_HEADER_BYTES = 48;

/** The largest payload of one record: 64 MiB. */
export const MAX_RECORD_BYTES = 64 * 1024 * 1024;
/** The largest batch, headers included: 256 MiB. */
export const MAX_BATCH_BYTES = 256 * 1024 * 1024;
/** The most records in one batch. */
export const MAX_BATCH_RECORDS = 1 << 20;
/** Positions and counts stay below 2^53 so they are exact as numbers. */
export const MAX_POSITION = Number.MAX_SAFE_INTEGER;

export const BATCH_ID_BYTES = 16;

/** A u64 as a number, or -1 when it is above 2^53 - 1. */
export function readU64(buf: Uint8Array, off: number): number {
  if (off < 0 || off + 8 > buf.length) throw new RangeError(`a u64 at offset ${off} runs past ${buf.length} bytes`);
  const hi = getU32(buf, off + 4);
  if (hi > 0x1fffff) return -1;
  return hi * 0x1_0000_0000 + getU32(buf, off);
}

export function writeU64(buf: Uint8Array, off: number, v: number): void {
  if (off < 0 || off + 8 > buf.length) throw new RangeError(`a u64 at offset ${off} runs past ${buf.length} bytes`);
  putU64(buf, off, v);
}

// ---------------------------------------------------------------- segment header

export function encodeSegmentHeader(base: number): Buffer {
  const b = Buffer.alloc(SEGMENT_HEADER_BYTES);
  const w = new ByteWriter(b).bytes(SEGMENT_MAGIC).u64(base).u64(0).u32(0);
  w.u32(crc32c(b.subarray(0, 28)));
  return b;
}

/** The base position of a segment header, or a reason it is not one. */
export function decodeSegmentHeader(b: Buffer): { base: number } | { reason: string } {
  if (b.length < SEGMENT_HEADER_BYTES) return { reason: 'short-segment-header' };
  if (!b.subarray(0, 8).equals(SEGMENT_MAGIC)) return { reason: 'bad-segment-magic' };
  if (getU32(b, 28) !== crc32c(b.subarray(0, 28))) return { reason: 'bad-segment-header-crc' };
  const base = readU64(b, 8);
  if (base < 1) return { reason: 'bad-segment-base' };
  return { base };
}

// ---------------------------------------------------------------- records

/**
 * CRC-32C table for one byte (reflected polynomial 0x82F63B78): used only to run the CRC
 * over a record's 4 length bytes, so that the rest of the record (header bytes 8..47 and
 * the payload, which are contiguous) takes a single call of the crc32c kernel.
 */
const CRC_BYTE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** The CRC-32C of the 4 little-endian bytes of `v` (a fresh checksum): equals crc32c of those bytes. */
function crcOfU32(v: number): number {
  let c = 0xffffffff;
  c = (CRC_BYTE[(c ^ v) & 0xff] as number) ^ (c >>> 8);
  c = (CRC_BYTE[(c ^ (v >>> 8)) & 0xff] as number) ^ (c >>> 8);
  c = (CRC_BYTE[(c ^ (v >>> 16)) & 0xff] as number) ^ (c >>> 8);
  c = (CRC_BYTE[(c ^ (v >>> 24)) & 0xff] as number) ^ (c >>> 8);
  return ~c >>> 0;
}

/**
 * The CRC-32C of a record: bytes 0..3 of its header, then bytes 8..47, then the payload.
 * `length` is the record's payload length (header bytes 0..3 hold it).
 */
export function recordCrc(buf: Uint8Array, off: number, length: number): number {
  const stored = getU32(buf, off);
  return crc32c(buf.subarray(off + 8, off + RECORD_HEADER_BYTES + length), crcOfU32(stored));
}

/**
 * A block of the crc32c kernel's own memory (with the wasm backend), reused by every batch:
 * a batch is copied into it once and each record's CRC is computed in place by the
 * kernel's own export, given the record's address in that memory: no view, no copy and no
 * argument checks per record (the public `crc32c` checks its input and copies it in on
 * every call, which for a batch of 100 small records cost more than the CRCs themselves).
 * Batches above its largest size, and the js backend, take the per-record path.
 */
let crcBlock: SharedBytes | undefined;
const CRC_BLOCK_MAX = 1 << 20;

/** The block, at least `bytes` long, or undefined when the batch takes the per-record path. */
function crcScratch(bytes: number): SharedBytes | undefined {
  if (bytes > CRC_BLOCK_MAX || backend().name !== 'wasm') return undefined;
  if (crcBlock === undefined || crcBlock.byteLength < bytes) {
    crcBlock?.free();
    crcBlock = allocShared(Math.max(64 * 1024, 2 ** Math.ceil(Math.log2(bytes))));
  }
  return crcBlock;
}

/**
 * Fills in the 48-byte header of every record of a batch laid out in `buf` from `start`
 * (header, payload, header, payload, ... with each payload already in place, `lengths[i]`
 * bytes long), CRCs included. Returns the offset just past the last record.
 */
export function frameBatch(
  buf: Uint8Array,
  start: number,
  lengths: ArrayLike<number>,
  firstPosition: number,
  epoch: bigint,
  batchId: Uint8Array,
): number {
  // A plain view: a Buffer's own subarray is slower to make.
  const u8 = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  // The fields every record of the batch shares, as 32-bit words.
  const epochLo = epoch === 0n ? 0 : Number(epoch & 0xffffffffn);
  const epochHi = epoch === 0n ? 0 : Number(epoch >> 32n);
  if (batchId.length < BATCH_ID_BYTES) throw new RangeError(`a batch id is ${BATCH_ID_BYTES} bytes`);
  const id0 = getU32(batchId, 0);
  const id1 = getU32(batchId, 4);
  const id2 = getU32(batchId, 8);
  const id3 = getU32(batchId, 12);
  const last = lengths.length - 1;
  // One writer over the batch, its header fields written at explicit offsets (a DataView
  // underneath: a batch that runs past the buffer is a RangeError).
  const w = new ByteWriter(u8, start);
  let off = start;
  for (let i = 0; i <= last; i++) {
    const len = lengths[i] as number;
    const position = firstPosition + i;
    const hi = Math.floor(position / 0x1_0000_0000);
    w.u32At(off, len);
    w.u32At(off + 8, position - hi * 0x1_0000_0000);
    w.u32At(off + 12, hi);
    w.u32At(off + 16, epochLo);
    w.u32At(off + 20, epochHi);
    w.u32At(off + 24, id0);
    w.u32At(off + 28, id1);
    w.u32At(off + 32, id2);
    w.u32At(off + 36, id3);
    w.u32At(off + 40, i);
    // flags (bit 0: last record of the batch) and the reserved zero half-word
    w.u32At(off + 44, i === last ? FLAG_BATCH_END : 0);
    off += RECORD_HEADER_BYTES + len;
  }
  const end = off;
  // Each record's CRC: its length bytes, then header bytes 8..47 and the payload in one call.
  const block = crcScratch(end - start);
  off = start;
  if (block) {
    // A fresh view each time: the kernel's memory may have grown since the last batch.
    block.u8.set(u8.subarray(start, end));
    const kernel = wasmRuntime().x;
    const at = block.ptr - start;
    for (let i = 0; i <= last; i++) {
      const len = lengths[i] as number;
      w.u32At(off + 4, kernel.crc32c(at + off + 8, RECORD_HEADER_BYTES - 8 + len, crcOfU32(len)) >>> 0);
      off += RECORD_HEADER_BYTES + len;
    }
    return end;
  }
  for (let i = 0; i <= last; i++) {
    const len = lengths[i] as number;
    const c = crc32c(u8.subarray(off + 8, off + RECORD_HEADER_BYTES + len), crcOfU32(len));
    w.u32At(off + 4, c);
    off += RECORD_HEADER_BYTES + len;
  }
  return end;
}

/** The bytes of one batch: every record's header and payload, end to end, CRCs filled in. */
export function encodeBatch(
  payloads: readonly Uint8Array[],
  firstPosition: number,
  epoch: bigint,
  batchId: Uint8Array,
): Buffer {
  const n = payloads.length;
  const lengths = new Array<number>(n);
  let total = 0;
  for (let i = 0; i < n; i++) {
    const len = (payloads[i] as Uint8Array).length;
    lengths[i] = len;
    total += RECORD_HEADER_BYTES + len;
  }
  const buf = Buffer.allocUnsafe(total);
  let off = 0;
  for (let i = 0; i < n; i++) {
    const p = payloads[i] as Uint8Array;
    buf.set(p, off + RECORD_HEADER_BYTES);
    off += RECORD_HEADER_BYTES + p.length;
  }
  frameBatch(buf, 0, lengths, firstPosition, epoch, batchId);
  return buf;
}

/** The fields of a record header at `off` (its CRC not checked here). */
export interface RecordHeader {
  readonly length: number;
  readonly crc: number;
  /** -1 when the stored value is above 2^53 - 1. */
  readonly position: number;
  readonly epoch: bigint;
  readonly index: number;
  readonly flags: number;
  readonly reserved: number;
}

export function decodeRecordHeader(buf: Uint8Array, off: number): RecordHeader {
  if (off < 0 || off + RECORD_HEADER_BYTES > buf.length) {
    throw new RangeError(`a record header at offset ${off} runs past ${buf.length} bytes`);
  }
  return {
    length: getU32(buf, off),
    crc: getU32(buf, off + 4),
    position: readU64(buf, off + 8),
    epoch: getU64n(buf, off + 16),
    index: getU32(buf, off + 40),
    flags: getU16(buf, off + 44),
    reserved: getU16(buf, off + 46),
  };
}

/** A copy of bytes `start..end` of `buf` as a plain Uint8Array. */
export function copyOut(buf: Buffer, start: number, end: number): Uint8Array {
  const out = new Uint8Array(end - start);
  out.set(buf.subarray(start, end));
  return out;
}

// ---------------------------------------------------------------- meta file

/**
 * A record that ends a batch cut by `truncateAfter`: it has no batch-end flag, yet recovery
 * takes it as the end of its batch. The CRC is the record's stored CRC-32C, so a later
 * record at the same position is not taken for it.
 */
export interface Seal {
  readonly position: number;
  readonly crc: number;
}

/** The meta file: the highest epoch and the seals of the batches cut by truncateAfter. */
export interface Meta {
  readonly epoch: bigint;
  /** In ascending position order, each position once. */
  readonly seals: readonly Seal[];
}

export const EMPTY_META: Meta = { epoch: 0n, seals: [] };

export function encodeMeta(m: Meta): Buffer {
  const n = m.seals.length;
  const b = Buffer.alloc(META_HEADER_BYTES + META_SEAL_BYTES * n + 4);
  const w = new ByteWriter(b).bytes(META_MAGIC).u64n(m.epoch).u32(n);
  for (let k = 0; k < n; k++) {
    const s = m.seals[k] as Seal;
    w.u64(s.position).u32(s.crc);
  }
  w.u32(crc32c(b.subarray(0, w.at)));
  return b;
}

/** A meta file of either layout, or the reason it is not one. */
export function decodeMeta(b: Buffer): Meta | { reason: string } {
  if (b.length >= 8 && b.subarray(0, 8).equals(META_V1_MAGIC)) {
    if (b.length !== META_V1_BYTES) return { reason: 'bad-meta-size' };
    if (getU32(b, 28) !== crc32c(b.subarray(0, 28))) return { reason: 'bad-meta-crc' };
    const position = readU64(b, 16);
    if (position < 0) return { reason: 'bad-meta-seal' };
    const seals = position === 0 ? [] : [{ position, crc: getU32(b, 24) }];
    return { epoch: getU64n(b, 8), seals };
  }
  if (b.length < META_HEADER_BYTES + 4) return { reason: 'bad-meta-size' };
  if (!b.subarray(0, 8).equals(META_MAGIC)) return { reason: 'bad-meta-magic' };
  const n = getU32(b, 16);
  if (b.length !== META_HEADER_BYTES + META_SEAL_BYTES * n + 4) return { reason: 'bad-meta-size' };
  if (getU32(b, b.length - 4) !== crc32c(b.subarray(0, b.length - 4))) return { reason: 'bad-meta-crc' };
  const seals: Seal[] = [];
  for (let k = 0; k < n; k++) {
    const at = META_HEADER_BYTES + META_SEAL_BYTES * k;
    const position = readU64(b, at);
    if (position < 1 || position <= (seals[k - 1]?.position ?? 0)) return { reason: 'bad-meta-seal' };
    seals.push({ position, crc: getU32(b, at + 8) });
  }
  return { epoch: getU64n(b, 8), seals };
}

// ---------------------------------------------------------------- index file

/** What a closed segment's index file holds. */
export interface SegmentSummary {
  readonly base: number;
  readonly count: number;
  /** Where the last record ends: the segment file's size. */
  readonly end: number;
  readonly maxEpoch: bigint;
  readonly indexEvery: number;
  /** Offset of the record at `base + k * indexEvery`, for each k. */
  readonly offsets: Uint32Array;
}

export function encodeIndex(s: SegmentSummary): Buffer {
  const n = s.offsets.length;
  const b = Buffer.alloc(INDEX_HEADER_BYTES + 4 * n + 4);
  const w = new ByteWriter(b).bytes(INDEX_MAGIC).u64(s.base).u64(s.count).u64(s.end);
  w.u64n(s.maxEpoch).u32(s.indexEvery).u32(n);
  for (let k = 0; k < n; k++) w.u32(s.offsets[k] as number);
  w.u32(crc32c(b.subarray(0, w.at)));
  return b;
}

/** An index file's content, or undefined if it is damaged or not one. */
export function decodeIndex(b: Buffer): SegmentSummary | undefined {
  if (b.length < INDEX_HEADER_BYTES + 4 || !b.subarray(0, 8).equals(INDEX_MAGIC)) return undefined;
  const n = getU32(b, 44);
  if (b.length !== INDEX_HEADER_BYTES + 4 * n + 4) return undefined;
  if (getU32(b, b.length - 4) !== crc32c(b.subarray(0, b.length - 4))) return undefined;
  const base = readU64(b, 8);
  const count = readU64(b, 16);
  const end = readU64(b, 24);
  const indexEvery = getU32(b, 40);
  if (base < 1 || count < 0 || end < SEGMENT_HEADER_BYTES || indexEvery < 1) return undefined;
  if (n !== Math.ceil(count / indexEvery)) return undefined;
  const offsets = new Uint32Array(n);
  for (let k = 0; k < n; k++) offsets[k] = getU32(b, INDEX_HEADER_BYTES + 4 * k);
  return { base, count, end, maxEpoch: getU64n(b, 32), indexEvery, offsets };
}
