/**
 * The shard-shipping stream (docs/shard-shipping.md): the frames with which a member that
 * holds a prefix of a shard's journal (the receiver) gets the suffix it lacks from a member
 * that holds more (the sender). Every frame is
 *
 *   0 4 magic "PXSH" | 4 u8 version (1) | 5 u8 type | 6 u16 reserved (0)
 *   8 u32 body length | 12 u32 CRC-32C of bytes 0..11 and the covered body | 16 body
 *
 * (integers little endian); the covered body is the whole body, except for CHUNK, whose
 * 32-byte head is covered and whose records carry a CRC-32C each. The bodies, by type:
 *
 *   1 OPEN    u32 shard | u32 window | u64 epoch | u64 end | u32 maxChunk | u32 CRC-32C of the record at end (0 when end is 0)
 *   2 CHUNK   u32 shard | u32 count | u64 epoch | u64 first | u64 last, then `count` records:
 *             u32 length | u32 CRC-32C | u64 epoch | 16 batch id | payload
 *   3 ACK     u32 shard | u32 reserved (0) | u64 durable
 *   4 END     u32 shard | u32 CRC-32C of the last record (0 when end is 0) | u64 epoch | u64 end
 *   5 REFUSE  u32 shard | u16 reason | u16 text length | u64 position | UTF-8 text
 *
 * A record's CRC-32C covers its length, its position (u64, which the frame gives by order:
 * first, first + 1, ...), its epoch, its batch id and its payload (`shipRecordCrc`). The
 * decoder checks the layout and the frame CRC, never a record's CRC: that is the receiver's
 * check (`shipRecordCrc`), refused PLX_SHIP_BAD_CRC with the record's position.
 *
 * The header is checked (magic, version, type, reserved, length against SHIP_MAX_BODY and the
 * stream's maximum) before any body byte is held (`ShipStream` is a `FrameAssembler`); every
 * count and length is checked against the bytes left before anything is allocated; payloads
 * are views of the input. Every refusal is PLX_SHIP_BAD_FRAME with `details.reason`.
 */
import { PlexusError } from '../core/errors.js';
import { crc32c } from '../core/index.js';
import { getU32, putU32, putU64n } from './bytes.js';
import { FrameAssembler } from './frames.js';

export const SHIP_HEADER_BYTES = 16;
export const SHIP_VERSION = 1;
/** "PXSH" as it lies on the wire. */
export const SHIP_MAGIC = new Uint8Array([0x50, 0x58, 0x53, 0x48]);
/** The largest record payload: the log engine's (64 MiB). */
export const SHIP_MAX_PAYLOAD = 64 * 1024 * 1024;
/** The bytes of a record in a CHUNK before its payload. */
export const SHIP_RECORD_HEAD = 32;
/** The bytes of a CHUNK body before its records (the part the frame CRC covers). */
export const SHIP_CHUNK_HEAD = 32;
/** The largest body: a CHUNK of one record of the largest payload. */
export const SHIP_MAX_BODY = SHIP_CHUNK_HEAD + SHIP_RECORD_HEAD + SHIP_MAX_PAYLOAD;
/** The most records in one CHUNK. */
export const SHIP_MAX_COUNT = 65_536;
/** The longest REFUSE text, in bytes. */
export const SHIP_MAX_TEXT = 1024;
/** The smallest chunk size and window a receiver may state in OPEN (64 KiB). */
export const SHIP_MIN_WINDOW = 64 * 1024;
/** The largest position: positions stay below 2^53 (docs/storage.md). */
export const SHIP_MAX_POSITION = BigInt(Number.MAX_SAFE_INTEGER);

export const SHIP_OPEN = 1;
export const SHIP_CHUNK = 2;
export const SHIP_ACK = 3;
export const SHIP_END = 4;
export const SHIP_REFUSE = 5;

/** Why a side refuses a stream: the REFUSE frame's reason and the code each one raises. */
export const ShipRefusal = {
  /** The stream's epoch is below the one the receiver has accepted. */
  STALE_EPOCH: 1,
  /** The sender holds no journal of the shard. */
  UNKNOWN_SHARD: 2,
  /** The receiver states an end position beyond the sender's end. */
  BEYOND_END: 3,
  /** A record's CRC-32C does not match its bytes. */
  BAD_CRC: 4,
  /** The receiver's end position or last record's CRC does not match the sender's END. */
  END_MISMATCH: 5,
  /** The sender no longer holds the records after the receiver's end (compacted). */
  COMPACTED: 6,
  /** A frame out of place (a gap in positions, another shard, a window overrun). */
  BAD_FRAME: 7,
  /** The receiver could not store a chunk (its log refused the append). */
  STORE_FAILED: 8,
} as const;

export type ShipRefusalReason = (typeof ShipRefusal)[keyof typeof ShipRefusal];

export type ShipCode =
  | 'PLX_SHIP_STALE_EPOCH'
  | 'PLX_SHIP_UNKNOWN_SHARD'
  | 'PLX_SHIP_BEYOND_END'
  | 'PLX_SHIP_BAD_CRC'
  | 'PLX_SHIP_END_MISMATCH'
  | 'PLX_SHIP_COMPACTED'
  | 'PLX_SHIP_BAD_FRAME'
  | 'PLX_SHIP_STORE_FAILED';

/** The code of each refusal reason (the same code on both sides of the stream). */
export const SHIP_REFUSAL_CODES: Readonly<Record<ShipRefusalReason, ShipCode>> = {
  1: 'PLX_SHIP_STALE_EPOCH',
  2: 'PLX_SHIP_UNKNOWN_SHARD',
  3: 'PLX_SHIP_BEYOND_END',
  4: 'PLX_SHIP_BAD_CRC',
  5: 'PLX_SHIP_END_MISMATCH',
  6: 'PLX_SHIP_COMPACTED',
  7: 'PLX_SHIP_BAD_FRAME',
  8: 'PLX_SHIP_STORE_FAILED',
};

/** One record of a CHUNK: the log engine's record, with the CRC-32C the chunk carries for it. */
export interface ShipRecord {
  readonly position: bigint;
  readonly epoch: bigint;
  /** 16 bytes. */
  readonly batchId: Uint8Array;
  readonly payload: Uint8Array;
  /** The CRC-32C as carried (a decoded record); the encoder computes it. */
  readonly crc: number;
}

export type ShipFrame =
  | {
      readonly type: 'open';
      readonly shard: number;
      readonly epoch: bigint;
      readonly end: bigint;
      readonly window: number;
      readonly maxChunk: number;
      /** The record CRC (`shipRecordCrc`) of the receiver's record at `end`; 0 when `end` is 0. */
      readonly endCrc: number;
    }
  | {
      readonly type: 'chunk';
      readonly shard: number;
      readonly epoch: bigint;
      readonly first: bigint;
      readonly last: bigint;
      readonly records: readonly ShipRecord[];
    }
  | { readonly type: 'ack'; readonly shard: number; readonly durable: bigint }
  | {
      readonly type: 'end';
      readonly shard: number;
      readonly epoch: bigint;
      readonly end: bigint;
      readonly lastCrc: number;
    }
  | {
      readonly type: 'refuse';
      readonly shard: number;
      readonly reason: ShipRefusalReason;
      readonly position: bigint;
      readonly text: string;
    };

function bad(reason: string, message: string, extra: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_SHIP_BAD_FRAME', `shard-shipping stream: ${message}; the stream is closed`, {
    reason,
    ...extra,
  });
}

function checkU32(v: number, what: string): void {
  if (!Number.isInteger(v) || v < 0 || v > 0xffff_ffff)
    throw bad('field', `${what} ${v} is not a u32`, { field: what });
}

function checkU64(v: bigint, what: string): void {
  if (typeof v !== 'bigint' || v < 0n || v > 0xffff_ffff_ffff_ffffn)
    throw bad('field', `${what} ${v} is not a u64`, { field: what });
}

function checkPosition(v: bigint, what: string): void {
  if (typeof v !== 'bigint' || v < 0n || v > SHIP_MAX_POSITION)
    throw bad('position', `${what} ${v} is not a position below 2^53`, { field: what });
}

const scratch = new Uint8Array(16);

/**
 * The CRC-32C a CHUNK carries for a record: over its payload length (u32), its position
 * (u64), its epoch (u64), its 16-byte batch id and its payload, in that order, as one running
 * CRC.
 */
export function shipRecordCrc(position: bigint, epoch: bigint, batchId: Uint8Array, payload: Uint8Array): number {
  putU32(scratch, 0, payload.length);
  putU64n(scratch, 4, position);
  let crc = crc32c(scratch.subarray(0, 12));
  putU64n(scratch, 0, epoch);
  crc = crc32c(scratch.subarray(0, 8), crc);
  crc = crc32c(batchId, crc);
  return crc32c(payload, crc);
}

function frame(type: number, bodyBytes: number, covered: number, fill: (b: Uint8Array) => void): Uint8Array {
  if (bodyBytes > SHIP_MAX_BODY) throw bad('length', `a body of ${bodyBytes} bytes is above ${SHIP_MAX_BODY}`);
  const out = new Uint8Array(SHIP_HEADER_BYTES + bodyBytes);
  out.set(SHIP_MAGIC, 0);
  out[4] = SHIP_VERSION;
  out[5] = type;
  putU32(out, 8, bodyBytes);
  fill(out.subarray(SHIP_HEADER_BYTES));
  putU32(out, 12, crc32c(out.subarray(SHIP_HEADER_BYTES, SHIP_HEADER_BYTES + covered), crc32c(out.subarray(0, 12))));
  return out;
}

export function encodeShipOpen(f: {
  shard: number;
  epoch: bigint;
  end: bigint;
  window: number;
  maxChunk: number;
  endCrc: number;
}): Uint8Array {
  checkU32(f.shard, 'shard');
  checkU64(f.epoch, 'epoch');
  checkPosition(f.end, 'end');
  checkU32(f.window, 'window');
  checkU32(f.maxChunk, 'maxChunk');
  checkU32(f.endCrc, 'endCrc');
  if (f.end === 0n && f.endCrc !== 0) throw bad('field', 'an OPEN at position 0 carries an end CRC of 0');
  return frame(SHIP_OPEN, 32, 32, (b) => {
    putU32(b, 0, f.shard);
    putU32(b, 4, f.window);
    putU64n(b, 8, f.epoch);
    putU64n(b, 16, f.end);
    putU32(b, 24, f.maxChunk);
    putU32(b, 28, f.endCrc);
  });
}

/** The bytes a CHUNK of these payload lengths takes on the wire, header included. */
export function shipChunkBytes(payloadBytes: number, count: number): number {
  return SHIP_HEADER_BYTES + SHIP_CHUNK_HEAD + count * SHIP_RECORD_HEAD + payloadBytes;
}

/**
 * A CHUNK of consecutive records from `records[0].position`; each record's CRC-32C is
 * computed here (`shipRecordCrc`). At least one record, at most SHIP_MAX_COUNT.
 */
export function encodeShipChunk(
  shard: number,
  epoch: bigint,
  records: readonly { position: bigint; epoch: bigint; batchId: Uint8Array; payload: Uint8Array }[],
): Uint8Array {
  checkU32(shard, 'shard');
  checkU64(epoch, 'epoch');
  const count = records.length;
  if (count < 1 || count > SHIP_MAX_COUNT)
    throw bad('count', `a chunk holds 1 to ${SHIP_MAX_COUNT} records, not ${count}`);
  const first = (records[0] as ShipRecord).position;
  const last = first + BigInt(count - 1);
  checkPosition(first, 'first');
  if (first < 1n) throw bad('position', 'the first position of a chunk is at least 1');
  checkPosition(last, 'last');
  let size = SHIP_CHUNK_HEAD;
  for (let i = 0; i < count; i++) {
    const r = records[i] as ShipRecord;
    if (r.position !== first + BigInt(i))
      throw bad('position', `record ${i} is at ${r.position}, not ${first + BigInt(i)}`);
    if (r.batchId.length !== 16) throw bad('field', `record ${i}'s batch id is ${r.batchId.length} bytes, not 16`);
    if (r.payload.length > SHIP_MAX_PAYLOAD)
      throw bad('length', `record ${i}'s payload is above ${SHIP_MAX_PAYLOAD} bytes`);
    checkU64(r.epoch, 'record epoch');
    size += SHIP_RECORD_HEAD + r.payload.length;
  }
  return frame(SHIP_CHUNK, size, SHIP_CHUNK_HEAD, (b) => {
    putU32(b, 0, shard);
    putU32(b, 4, count);
    putU64n(b, 8, epoch);
    putU64n(b, 16, first);
    putU64n(b, 24, last);
    let at = SHIP_CHUNK_HEAD;
    for (const r of records) {
      putU32(b, at, r.payload.length);
      putU32(b, at + 4, shipRecordCrc(r.position, r.epoch, r.batchId, r.payload));
      putU64n(b, at + 8, r.epoch);
      b.set(r.batchId, at + 16);
      b.set(r.payload, at + SHIP_RECORD_HEAD);
      at += SHIP_RECORD_HEAD + r.payload.length;
    }
  });
}

export function encodeShipAck(shard: number, durable: bigint): Uint8Array {
  checkU32(shard, 'shard');
  checkPosition(durable, 'durable');
  return frame(SHIP_ACK, 16, 16, (b) => {
    putU32(b, 0, shard);
    putU64n(b, 8, durable);
  });
}

export function encodeShipEnd(shard: number, epoch: bigint, end: bigint, lastCrc: number): Uint8Array {
  checkU32(shard, 'shard');
  checkU64(epoch, 'epoch');
  checkPosition(end, 'end');
  checkU32(lastCrc, 'lastCrc');
  if (end === 0n && lastCrc !== 0) throw bad('field', 'an END at position 0 carries a last CRC of 0');
  return frame(SHIP_END, 24, 24, (b) => {
    putU32(b, 0, shard);
    putU32(b, 4, lastCrc);
    putU64n(b, 8, epoch);
    putU64n(b, 16, end);
  });
}

const utf8 = new TextEncoder();

/** A REFUSE frame; the text is cut to SHIP_MAX_TEXT bytes (at a character boundary). */
export function encodeShipRefuse(shard: number, reason: ShipRefusalReason, position: bigint, text: string): Uint8Array {
  checkU32(shard, 'shard');
  if (!(reason in SHIP_REFUSAL_CODES)) throw bad('reason', `refusal reason ${reason} is unknown`);
  checkPosition(position, 'position');
  let t = utf8.encode(text);
  let chars = text.length;
  while (t.length > SHIP_MAX_TEXT) {
    chars = Math.floor(chars * 0.9);
    t = utf8.encode(text.slice(0, chars));
  }
  return frame(SHIP_REFUSE, 16 + t.length, 16 + t.length, (b) => {
    putU32(b, 0, shard);
    b[4] = reason & 0xff;
    b[5] = reason >>> 8;
    b[6] = t.length & 0xff;
    b[7] = t.length >>> 8;
    putU64n(b, 8, position);
    b.set(t, 16);
  });
}

/** The frame's type byte from its header; the header itself is checked by `shipFrameLength`. */
const TYPES = [SHIP_OPEN, SHIP_CHUNK, SHIP_ACK, SHIP_END, SHIP_REFUSE];

/**
 * The whole frame's length from its 16 header bytes: magic, version, type, reserved and the
 * body length (against SHIP_MAX_BODY and the type's size) are checked here, before any body byte.
 */
export function shipFrameLength(header: Uint8Array): number {
  if (header.length < SHIP_HEADER_BYTES) throw bad('short', `a header is ${SHIP_HEADER_BYTES} bytes`);
  for (let i = 0; i < 4; i++) {
    if (header[i] !== SHIP_MAGIC[i]) throw bad('magic', 'the frame does not start with PXSH');
  }
  const version = header[4] as number;
  if (version !== SHIP_VERSION) throw bad('version', `version ${version} is not ${SHIP_VERSION}`, { version });
  const type = header[5] as number;
  if (!TYPES.includes(type)) throw bad('type', `frame type ${type} is unknown`, { type });
  if (header[6] !== 0 || header[7] !== 0) throw bad('reserved', 'the reserved header bytes are not zero');
  const length = getU32(header, 8);
  const fixed = type === SHIP_OPEN || type === SHIP_END ? (type === SHIP_OPEN ? 32 : 24) : type === SHIP_ACK ? 16 : -1;
  if (fixed >= 0 && length !== fixed) throw bad('length', `a body of type ${type} is ${fixed} bytes, not ${length}`);
  if (type === SHIP_REFUSE && (length < 16 || length > 16 + SHIP_MAX_TEXT)) {
    throw bad('length', `a REFUSE body is 16 to ${16 + SHIP_MAX_TEXT} bytes, not ${length}`);
  }
  if (type === SHIP_CHUNK && (length < SHIP_CHUNK_HEAD + SHIP_RECORD_HEAD || length > SHIP_MAX_BODY)) {
    throw bad(
      'length',
      `a CHUNK body is ${SHIP_CHUNK_HEAD + SHIP_RECORD_HEAD} to ${SHIP_MAX_BODY} bytes, not ${length}`,
      {
        length,
      },
    );
  }
  return SHIP_HEADER_BYTES + length;
}

function position(b: Uint8Array, at: number, what: string): bigint {
  const hi = getU32(b, at + 4);
  if (hi > 0x1fffff) throw bad('position', `${what} is above 2^53 - 1`, { field: what });
  return BigInt(hi) * 0x1_0000_0000n + BigInt(getU32(b, at));
}

function u64n(b: Uint8Array, at: number): bigint {
  return (BigInt(getU32(b, at + 4)) << 32n) | BigInt(getU32(b, at));
}

const utf8d = new TextDecoder('utf-8', { fatal: true });

/** The frame of `bytes`: exactly one whole frame, its header accepted by `shipFrameLength`. */
function decodeFrame(bytes: Uint8Array): ShipFrame {
  const type = bytes[5] as number;
  const body = bytes.subarray(SHIP_HEADER_BYTES);
  const covered = type === SHIP_CHUNK ? SHIP_CHUNK_HEAD : body.length;
  if (crc32c(body.subarray(0, covered), crc32c(bytes.subarray(0, 12))) !== getU32(bytes, 12)) {
    throw bad('crc', 'the frame CRC-32C does not match');
  }
  const shard = getU32(body, 0);
  if (type === SHIP_OPEN) {
    const end = position(body, 16, 'end');
    const endCrc = getU32(body, 28);
    if (end === 0n && endCrc !== 0) throw bad('field', 'an OPEN at position 0 carries an end CRC of 0');
    return {
      type: 'open',
      shard,
      window: getU32(body, 4),
      epoch: u64n(body, 8),
      end,
      maxChunk: getU32(body, 24),
      endCrc,
    };
  }
  if (type === SHIP_ACK) {
    if (getU32(body, 4) !== 0) throw bad('reserved', 'the reserved bytes of ACK are not zero');
    return { type: 'ack', shard, durable: position(body, 8, 'durable') };
  }
  if (type === SHIP_END) {
    const lastCrc = getU32(body, 4);
    const end = position(body, 16, 'end');
    if (end === 0n && lastCrc !== 0) throw bad('field', 'an END at position 0 carries a last CRC of 0');
    return { type: 'end', shard, lastCrc, epoch: u64n(body, 8), end };
  }
  if (type === SHIP_REFUSE) {
    const reason = (body[4] as number) | ((body[5] as number) << 8);
    if (!(reason in SHIP_REFUSAL_CODES))
      throw bad('reason', `refusal reason ${reason} is unknown`, { refusal: reason });
    const n = (body[6] as number) | ((body[7] as number) << 8);
    if (n !== body.length - 16) throw bad('length', `the text length ${n} is not the ${body.length - 16} bytes left`);
    const pos = position(body, 8, 'position');
    let text: string;
    try {
      text = utf8d.decode(body.subarray(16));
    } catch {
      throw bad('text', 'the refusal text is not UTF-8');
    }
    return { type: 'refuse', shard, reason: reason as ShipRefusalReason, position: pos, text };
  }
  const count = getU32(body, 4);
  const epoch = u64n(body, 8);
  const first = position(body, 16, 'first');
  const last = position(body, 24, 'last');
  if (first < 1n) throw bad('position', 'the first position of a chunk is at least 1');
  // Every record takes at least its 32-byte head: a count the body cannot hold is refused before anything is allocated.
  if (count < 1 || count > SHIP_MAX_COUNT || count > Math.floor((body.length - SHIP_CHUNK_HEAD) / SHIP_RECORD_HEAD)) {
    throw bad('count', `${count} records do not fit a chunk of ${body.length} bytes`, { count });
  }
  if (last !== first + BigInt(count - 1)) throw bad('position', `last ${last} is not first ${first} + ${count - 1}`);
  const records: ShipRecord[] = [];
  let at = SHIP_CHUNK_HEAD;
  for (let i = 0; i < count; i++) {
    if (body.length - at < SHIP_RECORD_HEAD) throw bad('short', `record ${i} is cut`);
    const len = getU32(body, at);
    if (len > body.length - at - SHIP_RECORD_HEAD)
      throw bad('short', `record ${i} claims ${len} payload bytes; fewer are left`);
    records.push({
      position: first + BigInt(i),
      crc: getU32(body, at + 4),
      epoch: u64n(body, at + 8),
      batchId: body.subarray(at + 16, at + 32),
      payload: body.subarray(at + SHIP_RECORD_HEAD, at + SHIP_RECORD_HEAD + len),
    });
    at += SHIP_RECORD_HEAD + len;
  }
  if (at !== body.length) throw bad('trailing', `${body.length - at} bytes follow the last record`);
  return { type: 'chunk', shard, epoch, first, last, records };
}

/**
 * Decodes one frame at the start of `bytes`: `incomplete` with the bytes needed to go on, or
 * the frame and the bytes it took. Refusals are PLX_SHIP_BAD_FRAME.
 */
export function decodeShipFrame(
  bytes: Uint8Array,
): { kind: 'incomplete'; need: number } | { kind: 'frame'; frame: ShipFrame; consumed: number } {
  if (bytes.length < SHIP_HEADER_BYTES) return { kind: 'incomplete', need: SHIP_HEADER_BYTES };
  const size = shipFrameLength(bytes.subarray(0, SHIP_HEADER_BYTES));
  if (bytes.length < size) return { kind: 'incomplete', need: size };
  return { kind: 'frame', frame: decodeFrame(bytes.subarray(0, size)), consumed: size };
}

/**
 * A byte-fed decoder for one shipping connection (a `FrameAssembler` with the 16-byte header):
 * `push` takes the bytes that arrived and returns the frames they complete; bytes are held
 * only up to one frame, its length checked against `maxBody` first. A refused frame throws
 * (and every later push throws it again). Payloads are views of the pushed chunks: a chunk
 * must not change after it is pushed.
 */
export class ShipStream {
  private readonly frames: FrameAssembler;
  private failure: Error | undefined;

  /** @param maxBody the largest body accepted (at most SHIP_MAX_BODY). */
  constructor(readonly maxBody = SHIP_MAX_BODY) {
    const max = Math.min(maxBody, SHIP_MAX_BODY);
    this.frames = new FrameAssembler({
      headerBytes: SHIP_HEADER_BYTES,
      maxFrame: SHIP_HEADER_BYTES + max,
      frameLength: shipFrameLength,
      tooLarge: (length) =>
        bad('length', `a body of ${length - SHIP_HEADER_BYTES} bytes is above the ${max} this stream accepts`, {
          length: length - SHIP_HEADER_BYTES,
        }),
    });
  }

  push(chunk: Uint8Array): ShipFrame[] {
    if (this.failure) throw this.failure;
    try {
      return this.frames.push(chunk).map(decodeFrame);
    } catch (e) {
      this.failure = e as Error;
      throw e;
    }
  }

  /** Bytes held of a frame not yet whole. */
  get buffered(): number {
    return this.frames.buffered;
  }
}
