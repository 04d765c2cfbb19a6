/**
 * EVFR version 1: the replication frame of Chronacta in cluster mode (docs/evfr.md). One
 * frame wraps one committed batch of the leader's log: its batch id, the global position
 * of its first record, the leader's epoch (its Raft term), and the records' payload bytes
 * exactly as the log engine stores them. A follower checks the frame and appends the
 * records through its ordinary append path with the same batch id and positions.
 *
 *   0 [4] magic "EVFR" | 4 u8 version (1) | 5 u8 flags (0) | 6 u16 reserved (0)
 *   8 u32 length (body bytes) | 12 u32 count | 16 u64 first position | 24 u64 epoch
 *   32 [16] batch id | 48 u32 CRC-32C of the body | 52 u32 CRC-32C of bytes 0..51
 *   body: count records, each u32 payload length then the payload bytes
 *
 * The header is judged first, on the generic length-first header kernel of plexus/core
 * (WebAssembly, or its TypeScript twin): the length before anything else, then magic,
 * version, flags, reserved, count and first position; then the header checksum, the
 * position range, the body checksum and the record walk. No body byte is read and nothing
 * is allocated by a declared size before the header is accepted, and decoded payloads are
 * views into the frame's bytes, not copies.
 */
import { PlexusError } from '../core/errors.js';
import { checkHeader, crc32c, defineHeader, encodeHeader, VERDICT_INCOMPLETE } from '../core/index.js';
import { ByteReader, ByteWriter, getU32, getU64, getU64n, putU32 } from './bytes.js';

export const EVFR_HEADER_BYTES = 56;
export const EVFR_VERSION = 1;
export const EVFR_MAGIC = Uint8Array.of(0x45, 0x56, 0x46, 0x52); // "EVFR"
/** The largest body: 256 MiB, the log engine's largest batch. */
export const EVFR_MAX_BODY = 256 * 1024 * 1024;
/** The most records in one frame: 2^20, the log engine's largest batch. */
export const EVFR_MAX_RECORDS = 1 << 20;
/** The largest payload of one record: 64 MiB, as in the log engine. */
export const EVFR_MAX_RECORD = 64 * 1024 * 1024;
/** Positions stay below 2^53, as in the log engine. */
export const EVFR_MAX_POSITION = Number.MAX_SAFE_INTEGER;

/** Why a frame was refused (`details.reason` of PLX_EVFR_BAD_FRAME). */
export type EvfrRefusal =
  | 'length'
  | 'magic'
  | 'version'
  | 'flags'
  | 'reserved'
  | 'count'
  | 'first'
  | 'header-crc'
  | 'range'
  | 'body-crc'
  | 'record-length'
  | 'body-size';

const V = { length: 1, magic: 2, version: 3, flags: 4, reserved: 5, count: 6, first: 7 } as const;
const REASON: readonly EvfrRefusal[] = ['length', 'length', 'magic', 'version', 'flags', 'reserved', 'count', 'first'];

const SCHEMA = defineHeader({
  size: EVFR_HEADER_BYTES,
  fields: [
    { name: 'magic', offset: 0, width: 4, kind: 'bytes' },
    { name: 'version', offset: 4, width: 1 },
    { name: 'flags', offset: 5, width: 1 },
    { name: 'reserved', offset: 6, width: 2 },
    { name: 'length', offset: 8, width: 4 },
    { name: 'count', offset: 12, width: 4 },
    { name: 'first', offset: 16, width: 8 },
    { name: 'epoch', offset: 24, width: 8 },
    { name: 'batchId', offset: 32, width: 16, kind: 'bytes' },
    { name: 'bodyCrc', offset: 48, width: 4 },
    { name: 'headerCrc', offset: 52, width: 4 },
  ],
  length: { field: 'length', max: EVFR_MAX_BODY, verdictTooLong: V.length },
  checks: [
    { field: 'magic', op: 'bytes-eq', value: EVFR_MAGIC, verdict: V.magic },
    { field: 'version', op: 'eq', value: EVFR_VERSION, verdict: V.version },
    { field: 'flags', op: 'mask-zero', mask: 0xff, verdict: V.flags },
    { field: 'reserved', op: 'eq', value: 0, verdict: V.reserved },
    { field: 'count', op: 'range', min: 1, max: EVFR_MAX_RECORDS, verdict: V.count },
    { field: 'first', op: 'range', min: 1, max: EVFR_MAX_POSITION, verdict: V.first },
  ],
});

/** A decoded frame. `records` are views into the decoded bytes. */
export interface EvfrFrame {
  readonly batchId: Uint8Array;
  /** Global position of the first record. */
  readonly first: number;
  /** Global position of the last record: first + count - 1. */
  readonly last: number;
  /** The leader's epoch (its Raft term) when it wrote the batch. */
  readonly epoch: bigint;
  readonly records: readonly Uint8Array[];
}

export interface EvfrInit {
  readonly batchId: Uint8Array;
  readonly first: number;
  readonly epoch: bigint | number;
  readonly records: readonly Uint8Array[];
}

function refuse(reason: EvfrRefusal, message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_EVFR_BAD_FRAME', `EVFR frame refused (${reason}): ${message}`, { ...details, reason });
}

function misuse(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_EVFR_BAD_INPUT', message, details);
}

/** The size of the frame that would carry these records. */
export function evfrSize(records: readonly Uint8Array[]): number {
  let n = EVFR_HEADER_BYTES;
  for (const r of records) n += 4 + r.length;
  return n;
}

/** Encodes one frame into a new buffer, or into `out` (which must hold `evfrSize(records)` bytes). */
export function encodeEvfr(init: EvfrInit, out?: Uint8Array): Uint8Array {
  const { batchId, first, records } = init;
  if (!(batchId instanceof Uint8Array) || batchId.length !== 16) throw misuse('batchId must be 16 bytes');
  if (!Array.isArray(records) || records.length < 1 || records.length > EVFR_MAX_RECORDS) {
    throw misuse(
      `a frame holds 1 to ${EVFR_MAX_RECORDS} records, got ${Array.isArray(records) ? records.length : 'none'}`,
    );
  }
  if (!Number.isSafeInteger(first) || first < 1 || records.length - 1 > EVFR_MAX_POSITION - first) {
    throw misuse(`first position ${first} must be 1 .. 2^53 - 1 with room for ${records.length} records`);
  }
  const epoch = BigInt(init.epoch);
  if (epoch < 0n || epoch >= 1n << 64n) throw misuse(`epoch ${init.epoch} must be 0 .. 2^64 - 1`);
  let body = 0;
  for (const r of records) {
    if (!(r instanceof Uint8Array)) throw misuse('every record must be a Uint8Array');
    if (r.length > EVFR_MAX_RECORD) throw misuse(`a record holds at most ${EVFR_MAX_RECORD} bytes, got ${r.length}`);
    body += 4 + r.length;
  }
  if (body > EVFR_MAX_BODY) throw misuse(`the records take ${body} bytes; a frame body holds at most ${EVFR_MAX_BODY}`);
  const size = EVFR_HEADER_BYTES + body;
  const buf = out ?? new Uint8Array(size);
  if (buf.length < size) throw misuse(`the output needs ${size} bytes, has ${buf.length}`);
  const w = new ByteWriter(buf, EVFR_HEADER_BYTES);
  for (const r of records) w.lenBytes(r);
  const bodyCrc = crc32c(buf.subarray(EVFR_HEADER_BYTES, size));
  encodeHeader(
    SCHEMA,
    {
      magic: EVFR_MAGIC,
      version: EVFR_VERSION,
      length: body,
      count: records.length,
      first,
      epoch,
      batchId,
      bodyCrc,
      headerCrc: 0,
    },
    buf,
  );
  putU32(buf, 52, crc32c(buf.subarray(0, 52)));
  return buf.length === size ? buf : buf.subarray(0, size);
}

export interface EvfrDecodeOptions {
  /**
   * Skip the body's CRC-32C (the header's is still checked, and every length): only for bytes
   * this process encoded itself and kept in memory, which no transport or disk has touched.
   */
  readonly ownBytes?: boolean;
  /**
   * Skip the body's CRC-32C as well: for bytes an enclosing checksum has covered already since
   * they last crossed a transport or a disk (a Raft message's, a journal record's). Headers and
   * lengths are still checked.
   */
  readonly bodyChecked?: boolean;
}

/** The outcome of `decodeEvfr`: a frame and the bytes it took, or more bytes needed. */
export type EvfrDecoded =
  | { readonly kind: 'frame'; readonly frame: EvfrFrame; readonly consumed: number }
  | { readonly kind: 'incomplete'; readonly need: number };

/**
 * Decodes the frame at the start of `bytes`. Returns `incomplete` with the total size
 * needed when the bytes end inside the frame (after the header has been accepted, so the
 * size can be trusted up to the 256 MiB maximum); throws PLX_EVFR_BAD_FRAME with
 * `details.reason` for a refused frame.
 */
export function decodeEvfr(bytes: Uint8Array, opts?: EvfrDecodeOptions): EvfrDecoded {
  if (!(bytes instanceof Uint8Array)) throw misuse('decodeEvfr takes a Uint8Array');
  if (bytes.length < EVFR_HEADER_BYTES) return { kind: 'incomplete', need: EVFR_HEADER_BYTES };
  const verdict = checkHeader(SCHEMA, bytes.subarray(0, EVFR_HEADER_BYTES));
  if (verdict === VERDICT_INCOMPLETE) return { kind: 'incomplete', need: EVFR_HEADER_BYTES };
  const length = getU32(bytes, 8);
  const count = getU32(bytes, 12);
  if (verdict !== 0) {
    const reason = REASON[verdict] ?? 'length';
    throw refuse(reason, headerMessage(reason, bytes), { length, count });
  }
  if (crc32c(bytes.subarray(0, 52)) !== getU32(bytes, 52)) {
    throw refuse('header-crc', 'the header checksum does not match: the header was damaged');
  }
  // The kernel has checked the first position: 1 .. 2^53 - 1.
  const first = getU64(bytes, 16);
  if (count - 1 > EVFR_MAX_POSITION - first) {
    throw refuse('range', `${count} records from position ${first} run past 2^53 - 1`, { first, count });
  }
  if (length < count * 4) {
    throw refuse('body-size', `a body of ${length} bytes cannot hold ${count} record lengths`, { length, count });
  }
  const size = EVFR_HEADER_BYTES + length;
  if (bytes.length < size) return { kind: 'incomplete', need: size };
  const body = bytes.subarray(EVFR_HEADER_BYTES, size);
  if (opts?.ownBytes !== true && opts?.bodyChecked !== true && crc32c(body) !== getU32(bytes, 48)) {
    throw refuse('body-crc', 'the body checksum does not match: the records were damaged in transit');
  }
  // The records are views of a plain Uint8Array over the body (never Buffer slices).
  const r = new ByteReader(new Uint8Array(body.buffer, body.byteOffset, length));
  const records: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    if (r.left < 4) {
      throw refuse('body-size', `record ${i} of ${count} starts past the body`, { record: i, offset: r.at });
    }
    const n = r.u32();
    if (n > EVFR_MAX_RECORD || n > r.left) {
      throw refuse('record-length', `record ${i} declares ${n} bytes; ${r.left} remain in the body`, {
        record: i,
        declared: n,
      });
    }
    records.push(r.bytes(n));
  }
  if (r.left !== 0) {
    throw refuse('body-size', `${r.left} bytes follow the last record`, { extra: r.left });
  }
  const batchId = bytes.slice(32, 48);
  return {
    kind: 'frame',
    frame: { batchId, first, last: first + count - 1, epoch: getU64n(bytes, 24), records },
    consumed: size,
  };
}

function headerMessage(reason: EvfrRefusal, b: Uint8Array): string {
  switch (reason) {
    case 'length':
      return `the body length ${getU32(b, 8)} is above the maximum ${EVFR_MAX_BODY}`;
    case 'magic':
      return 'the bytes do not start with "EVFR": not a replication frame';
    case 'version':
      return `version ${b[4]} is not supported (this build reads version ${EVFR_VERSION}); upgrade the follower`;
    case 'flags':
      return `flags 0x${(b[5] as number).toString(16)} has reserved bits set`;
    case 'reserved':
      return 'the reserved field is not zero';
    case 'count':
      return `record count ${getU32(b, 12)} is outside 1 .. ${EVFR_MAX_RECORDS}`;
    default:
      return 'the first position is outside 1 .. 2^53 - 1';
  }
}
