/**
 * The payload of one Chronacta log record (docs/chronacta.md#the-record-in-the-log;
 * docs/formats.md). Every log record is one entry: an event, a stream-metadata change
 * (delete, tombstone, truncation) written as an event of the stream `$$<name>`, or, in the
 * compacted archive only, a redacted event that keeps an idempotency key alive after its
 * event was deleted.
 *
 *   0 u8 format (1) | 1 u8 kind | 2 u16 flags (bit 0: idempotency key) | 4 u32 batch size
 *   8 u32 index in batch | 12 u64 position | 20 u64 version | 28 u64 recorded (ms)
 *   36 16 bytes event id | 52 u16 stream length | 54 u16 type length | 56 u32 metadata length
 *   60 u32 data length | 64 stream | type | metadata | data
 *   [u16 key length | key | 32 bytes fingerprint]   (when flag bit 0 is set)
 *
 * The payload names its own global position, version and batch, so the same bytes can be
 * copied into the archive or replicated unchanged. Integers are little endian. The decoder
 * checks the lengths against the payload's size before it reads any variable part; a payload
 * that is not an entry is refused with what the caller's `EntryRefusal` builds.
 */

import { getU16, getU32, getU64 } from './bytes.js';

export const RECORD_FORMAT = 1;
export const RECORD_HEADER_BYTES = 64;
export const FINGERPRINT_BYTES = 32;

export const RecordKind = {
  /** An event of a stream. */
  EVENT: 1,
  /** A metadata change of stream `X`, stored as an event of `$$X` (data: JSON, see StreamMeta). */
  METADATA: 2,
  /** An event whose body was dropped by compaction; kept for its idempotency key only. */
  REDACTED: 3,
} as const;
export type RecordKindCode = (typeof RecordKind)[keyof typeof RecordKind];

/** The flag of an entry that carries an idempotency key after its data. */
export const FLAG_IDEMPOTENCY = 1;

export interface Idempotency {
  readonly key: string;
  /** SHA-256 of the request (fingerprint.ts). */
  readonly fingerprint: Uint8Array;
}

/** One decoded entry. Numbers are below 2^53 (positions are bounded by the log). */
export interface Entry {
  readonly kind: RecordKindCode;
  /** Events in the append that wrote this entry. */
  readonly batchSize: number;
  readonly indexInBatch: number;
  readonly position: number;
  readonly version: number;
  readonly recordedMs: number;
  /** 16 bytes. */
  readonly id: Uint8Array;
  readonly stream: string;
  readonly type: string;
  readonly metadata: Uint8Array;
  readonly data: Uint8Array;
  /** On the first entry of an append that carried a key. */
  readonly idempotency?: Idempotency;
}

/** Builds the refusal of a payload that is not an entry (`position` once it is known). */
export type EntryRefusal = (what: string, position?: number) => Error;

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

/** Encodes an entry as a log record payload. */
/** The last strings encoded: the events of one append share a stream and often a type. */
let lastStream = '';
let lastStreamBytes = new Uint8Array(0);
let lastType = '';
let lastTypeBytes = new Uint8Array(0);

export function encodeEntry(e: Entry): Uint8Array {
  if (e.stream !== lastStream) {
    lastStream = e.stream;
    lastStreamBytes = utf8.encode(e.stream);
  }
  if (e.type !== lastType) {
    lastType = e.type;
    lastTypeBytes = utf8.encode(e.type);
  }
  const stream = lastStreamBytes;
  const type = lastTypeBytes;
  const key = e.idempotency ? utf8.encode(e.idempotency.key) : undefined;
  const size =
    RECORD_HEADER_BYTES +
    stream.length +
    type.length +
    e.metadata.length +
    e.data.length +
    (key ? 2 + key.length + FINGERPRINT_BYTES : 0);
  const out = new Uint8Array(size);
  const v = new DataView(out.buffer);
  v.setUint8(0, RECORD_FORMAT);
  v.setUint8(1, e.kind);
  v.setUint16(2, key ? FLAG_IDEMPOTENCY : 0, true);
  v.setUint32(4, e.batchSize, true);
  v.setUint32(8, e.indexInBatch, true);
  v.setBigUint64(12, BigInt(e.position), true);
  v.setBigUint64(20, BigInt(e.version), true);
  v.setBigUint64(28, BigInt(e.recordedMs), true);
  out.set(e.id, 36);
  v.setUint16(52, stream.length, true);
  v.setUint16(54, type.length, true);
  v.setUint32(56, e.metadata.length, true);
  v.setUint32(60, e.data.length, true);
  let off = RECORD_HEADER_BYTES;
  out.set(stream, off);
  off += stream.length;
  out.set(type, off);
  off += type.length;
  out.set(e.metadata, off);
  off += e.metadata.length;
  out.set(e.data, off);
  off += e.data.length;
  if (key && e.idempotency) {
    v.setUint16(off, key.length, true);
    out.set(key, off + 2);
    out.set(e.idempotency.fingerprint, off + 2 + key.length);
  }
  return out;
}

/**
 * Decodes a log record payload. `metadata` and `data` are views into `payload`. A payload
 * that is not a well-formed entry fails with what `damaged` builds (Chronacta passes
 * PLX_CHRONACTA_BAD_INPUT, which the store reports as damage).
 */
export function decodeEntry(payload: Uint8Array, damaged: EntryRefusal): Entry {
  if (payload.length < RECORD_HEADER_BYTES) throw damaged(`${payload.length} bytes, shorter than the header`);
  const format = payload[0] as number;
  if (format !== RECORD_FORMAT) throw damaged(`format ${format}, expected ${RECORD_FORMAT}`);
  const kind = payload[1] as number;
  if (kind !== RecordKind.EVENT && kind !== RecordKind.METADATA && kind !== RecordKind.REDACTED) {
    throw damaged(`unknown kind ${kind}`);
  }
  const flags = getU16(payload, 2);
  if ((flags & ~FLAG_IDEMPOTENCY) !== 0) throw damaged(`unknown flags ${flags}`);
  const position = getU64(payload, 12);
  const sLen = getU16(payload, 52);
  const tLen = getU16(payload, 54);
  const mLen = getU32(payload, 56);
  const dLen = getU32(payload, 60);
  const body = sLen + tLen + mLen + dLen;
  let rest = payload.length - RECORD_HEADER_BYTES - body;
  if (rest < 0) throw damaged('lengths run past the end', position);
  let off = RECORD_HEADER_BYTES;
  const text = (n: number) => {
    const s = utf8Decoder.decode(payload.subarray(off, off + n));
    off += n;
    return s;
  };
  let stream: string;
  let type: string;
  try {
    stream = text(sLen);
    type = text(tLen);
  } catch {
    throw damaged('a name is not UTF-8', position);
  }
  const metadata = payload.subarray(off, off + mLen);
  off += mLen;
  const data = payload.subarray(off, off + dLen);
  off += dLen;
  let idempotency: Idempotency | undefined;
  if (flags & FLAG_IDEMPOTENCY) {
    if (rest < 2) throw damaged('idempotency key cut', position);
    const kLen = getU16(payload, off);
    rest -= 2 + kLen + FINGERPRINT_BYTES;
    if (rest !== 0) throw damaged('idempotency key length does not match the payload', position);
    off += 2;
    let key: string;
    try {
      key = text(kLen);
    } catch {
      throw damaged('the idempotency key is not UTF-8', position);
    }
    idempotency = { key, fingerprint: payload.subarray(off, off + FINGERPRINT_BYTES) };
  } else if (rest !== 0) throw damaged(`${rest} bytes after the data`, position);
  const entry: Entry = {
    kind: kind as RecordKindCode,
    batchSize: getU32(payload, 4),
    indexInBatch: getU32(payload, 8),
    position,
    version: getU64(payload, 20),
    recordedMs: getU64(payload, 28),
    id: payload.subarray(36, 52),
    stream,
    type,
    metadata,
    data,
  };
  return idempotency ? { ...entry, idempotency } : entry;
}

/**
 * Whether `payload` is the EVENT entry that follows `first` in the same append: the next
 * index in the batch, the next position and version, the same batch size, recorded time and
 * stream (compared as bytes: `first` was decoded, so they are UTF-8), no idempotency key (it
 * rides on an append's first entry only), and lengths that add up as `decodeEntry` checks
 * them. Reads the header and the stream's bytes, decodes no string: a member applying a
 * replicated append indexes its later events this way. False for anything else, which the
 * caller then decodes in full (and so reports damage as `decodeEntry` does).
 */
export function followsInAppend(payload: Uint8Array, first: Entry, streamBytes: Uint8Array, offset: number): boolean {
  // Read with the fixed-offset field functions: this runs once per event of every replicated
  // append, and a DataView or a BigInt per field would allocate for each.
  const b = payload;
  if (b.length < RECORD_HEADER_BYTES) return false;
  if (b[0] !== RECORD_FORMAT || b[1] !== RecordKind.EVENT || b[2] !== 0 || b[3] !== 0) return false;
  if (getU32(b, 4) !== first.batchSize || getU32(b, 8) !== first.indexInBatch + offset) return false;
  if (!isLe64(b, 12, first.position + offset)) return false;
  if (!isLe64(b, 20, first.version + offset)) return false;
  if (!isLe64(b, 28, first.recordedMs)) return false;
  const sLen = getU16(b, 52);
  if (sLen !== streamBytes.length) return false;
  const body = sLen + getU16(b, 54) + getU32(b, 56) + getU32(b, 60);
  if (b.length - RECORD_HEADER_BYTES !== body) return false;
  for (let i = 0; i < sLen; i++) if (b[RECORD_HEADER_BYTES + i] !== streamBytes[i]) return false;
  return true;
}

/** True when the unsigned 64-bit little-endian value at `at` is `n` (a safe integer >= 0). */
function isLe64(b: Uint8Array, at: number, n: number): boolean {
  const hi = Math.floor(n / 0x100000000);
  return getU32(b, at) === n - hi * 0x100000000 && getU32(b, at + 4) === hi;
}

/** The bytes of an encoded entry's stream name (a view into `payload`, which `decodeEntry` accepted). */
export function streamBytesOf(payload: Uint8Array): Uint8Array {
  const sLen = getU16(payload, 52);
  return payload.subarray(RECORD_HEADER_BYTES, RECORD_HEADER_BYTES + sLen);
}
