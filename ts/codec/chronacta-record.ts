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

const FLAG_IDEMPOTENCY = 1;

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
  const v = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  const format = v.getUint8(0);
  if (format !== RECORD_FORMAT) throw damaged(`format ${format}, expected ${RECORD_FORMAT}`);
  const kind = v.getUint8(1);
  if (kind !== RecordKind.EVENT && kind !== RecordKind.METADATA && kind !== RecordKind.REDACTED) {
    throw damaged(`unknown kind ${kind}`);
  }
  const flags = v.getUint16(2, true);
  if ((flags & ~FLAG_IDEMPOTENCY) !== 0) throw damaged(`unknown flags ${flags}`);
  const position = Number(v.getBigUint64(12, true));
  const sLen = v.getUint16(52, true);
  const tLen = v.getUint16(54, true);
  const mLen = v.getUint32(56, true);
  const dLen = v.getUint32(60, true);
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
    const kLen = v.getUint16(off, true);
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
    batchSize: v.getUint32(4, true),
    indexInBatch: v.getUint32(8, true),
    position,
    version: Number(v.getBigUint64(20, true)),
    recordedMs: Number(v.getBigUint64(28, true)),
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
  // Read from the bytes directly: this runs once per event of every replicated append, and
  // a DataView or a BigInt per field would allocate for each.
  const b = payload;
  if (b.length < RECORD_HEADER_BYTES) return false;
  if (b[0] !== RECORD_FORMAT || b[1] !== RecordKind.EVENT || b[2] !== 0 || b[3] !== 0) return false;
  if (le32(b, 4) !== first.batchSize || le32(b, 8) !== first.indexInBatch + offset) return false;
  if (!isLe64(b, 12, first.position + offset)) return false;
  if (!isLe64(b, 20, first.version + offset)) return false;
  if (!isLe64(b, 28, first.recordedMs)) return false;
  const sLen = (b[52] as number) | ((b[53] as number) << 8);
  if (sLen !== streamBytes.length) return false;
  const body = sLen + ((b[54] as number) | ((b[55] as number) << 8)) + le32(b, 56) + le32(b, 60);
  if (b.length - RECORD_HEADER_BYTES !== body) return false;
  for (let i = 0; i < sLen; i++) if (b[RECORD_HEADER_BYTES + i] !== streamBytes[i]) return false;
  return true;
}

/** The unsigned 32-bit little-endian value at `at`. */
function le32(b: Uint8Array, at: number): number {
  return (
    ((b[at] as number) | ((b[at + 1] as number) << 8) | ((b[at + 2] as number) << 16)) +
    (b[at + 3] as number) * 0x1000000
  );
}

/** True when the unsigned 64-bit little-endian value at `at` is `n` (a safe integer >= 0). */
function isLe64(b: Uint8Array, at: number, n: number): boolean {
  const hi = Math.floor(n / 0x100000000);
  return le32(b, at) === n - hi * 0x100000000 && le32(b, at + 4) === hi;
}

/** The bytes of an encoded entry's stream name (a view into `payload`, which `decodeEntry` accepted). */
export function streamBytesOf(payload: Uint8Array): Uint8Array {
  const sLen = payload[52]! | (payload[53]! << 8);
  return payload.subarray(RECORD_HEADER_BYTES, RECORD_HEADER_BYTES + sLen);
}
