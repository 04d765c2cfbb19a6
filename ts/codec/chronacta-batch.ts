/**
 * An append's records encoded in one pass into one buffer: the Chronacta record layout of
 * ts/codec/chronacta-record.ts, written in place for every event of an event table (the
 * events' bytes and, per event, the offsets and lengths of its id, type, data and metadata,
 * as the gRPC decoder leaves them; ts/chronacta/batch.ts checks a table and builds one from
 * EventData objects). No object per event.
 */
import { randomFillSync } from 'node:crypto';
import {
  FINGERPRINT_BYTES,
  FLAG_IDEMPOTENCY,
  RECORD_FORMAT,
  RECORD_HEADER_BYTES,
  RecordKind,
} from './chronacta-record.js';

/** Slots per event in an event table: offset and length of id, type, data, metadata. */
export const EV_SLOTS = 8;
export const EV_ID = 0;
export const EV_TYPE = 2;
export const EV_DATA = 4;
export const EV_META = 6;

/** The events of one append: their bytes and, per event, EV_SLOTS offsets and lengths into them. */
export interface EventTable {
  readonly buf: Uint8Array;
  readonly count: number;
  readonly ev: Uint32Array;
}

/** The largest gap encodeTable leaves before a record. */
const MAX_GAP = 4096;
const TWO32 = 2 ** 32;

/** The value of a hex digit's character code, or -1. */
export function hexNibble(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** The 16 bytes of the UUID text at `b[off..off+36)` (checked) written at `out[at]`. */
export function uuidInto(b: Uint8Array, off: number, out: Uint8Array, at: number): void {
  let j = 0;
  for (let i = 0; i < 36 && j < 16; i++) {
    const hi = hexNibble(b[off + i] as number);
    if (hi < 0) continue; // a dash
    out[at + j++] = (hi << 4) | hexNibble(b[off + ++i] as number);
  }
}

/** What every record of one append shares. */
export interface BatchHeader {
  readonly stream: Uint8Array;
  readonly firstPosition: number;
  readonly firstVersion: number;
  readonly recordedMs: number;
  /** On the first record, when the append carries a key. */
  readonly key?: Uint8Array;
  readonly fingerprint?: Uint8Array;
}

/**
 * The records of one append in one buffer: `gap` bytes (0, or the log's record header,
 * for `LogStorage#appendFramed`) before each payload, end to end.
 */
export class EncodedBatch {
  private views: Uint8Array[] | undefined;

  constructor(
    readonly bytes: Uint8Array,
    /** Each record's payload length. */
    readonly lengths: Uint32Array,
    readonly gap: number,
  ) {}

  /** A batch of one record already encoded on its own (no gap). */
  static of(payload: Uint8Array): EncodedBatch {
    return new EncodedBatch(payload, Uint32Array.of(payload.length), 0);
  }

  get count(): number {
    return this.lengths.length;
  }

  /** The payload bytes, gaps left out. */
  get payloadBytes(): number {
    return this.bytes.length - this.gap * this.lengths.length;
  }

  /** Each record's payload as a view into `bytes` (made on first use). */
  get payloads(): Uint8Array[] {
    if (this.views === undefined) {
      const n = this.lengths.length;
      const views: Uint8Array[] = new Array(n);
      let p = 0;
      for (let i = 0; i < n; i++) {
        const start = p + this.gap;
        p = start + (this.lengths[i] as number);
        views[i] = this.bytes.subarray(start, p);
      }
      this.views = views;
    }
    return this.views;
  }
}

/**
 * Random bytes for the UUIDs the store makes (events without an id, batch ids), taken
 * from a pool refilled from the system's CSPRNG (randomFillSync) when used up: one call
 * per 4 KiB rather than one per append. Each byte is handed out once.
 */
const POOL_BYTES = 4096;
const pool = new Uint8Array(POOL_BYTES);
let poolAt = POOL_BYTES;

/** `n` random bytes, copied out of the pool into `out` at `at`. */
export function randomInto(out: Uint8Array, at: number, n: number): void {
  if (n > POOL_BYTES) {
    randomFillSync(out, at, n);
    return;
  }
  if (poolAt + n > POOL_BYTES) {
    randomFillSync(pool);
    poolAt = 0;
  }
  for (let i = 0; i < n; i++) out[at + i] = pool[poolAt + i] as number;
  poolAt += n;
}

/** A random (version 4) UUID's 16 bytes. */
export function randomUuidBytes(): Uint8Array {
  const b = new Uint8Array(16);
  randomInto(b, 0, 16);
  b[6] = ((b[6] as number) & 0x0f) | 0x40;
  b[8] = ((b[8] as number) & 0x3f) | 0x80;
  return b;
}

function u64(dv: DataView, off: number, v: number): void {
  dv.setUint32(off, v % TWO32, true);
  dv.setUint32(off + 4, Math.floor(v / TWO32), true);
}

/**
 * Encodes the records of a checked table (checkTable) as EVENT entries: positions and
 * versions follow each other from `h`'s, the first record carries the key. Events without
 * an id get a random (version 4) UUID. Each record is written after `gap` bytes left for
 * the log (0 .. 4096; the log's RECORD_HEADER_BYTES for `appendFramed`), which stay zero.
 */
export function encodeTable(t: EventTable, h: BatchHeader, typeAndBodyBytes: number, gap = 0): EncodedBatch {
  const { buf, count, ev } = t;
  if (!Number.isSafeInteger(gap) || gap < 0 || gap > MAX_GAP) throw new RangeError(`encodeTable: gap ${gap}`);
  const keyBytes = h.key && h.fingerprint ? 2 + h.key.length + FINGERPRINT_BYTES : 0;
  const size = count * (gap + RECORD_HEADER_BYTES + h.stream.length) + typeAndBodyBytes + keyBytes;
  const out = new Uint8Array(size);
  const dv = new DataView(out.buffer);
  const lengths = new Uint32Array(count);
  const sLen = h.stream.length;
  let p = 0;
  for (let i = 0; i < count; i++) {
    const at = i * EV_SLOTS;
    p += gap;
    const start = p;
    const typeLen = ev[at + EV_TYPE + 1] as number;
    const metaLen = ev[at + EV_META + 1] as number;
    const dataLen = ev[at + EV_DATA + 1] as number;
    const withKey = i === 0 && keyBytes > 0;
    out[p] = RECORD_FORMAT;
    out[p + 1] = RecordKind.EVENT;
    dv.setUint16(p + 2, withKey ? FLAG_IDEMPOTENCY : 0, true);
    dv.setUint32(p + 4, count, true);
    dv.setUint32(p + 8, i, true);
    u64(dv, p + 12, h.firstPosition + i);
    u64(dv, p + 20, h.firstVersion + i);
    u64(dv, p + 28, h.recordedMs);
    if ((ev[at + EV_ID + 1] as number) > 0) uuidInto(buf, ev[at + EV_ID] as number, out, p + 36);
    else {
      randomInto(out, p + 36, 16);
      out[p + 42] = ((out[p + 42] as number) & 0x0f) | 0x40;
      out[p + 44] = ((out[p + 44] as number) & 0x3f) | 0x80;
    }
    dv.setUint16(p + 52, sLen, true);
    dv.setUint16(p + 54, typeLen, true);
    dv.setUint32(p + 56, metaLen, true);
    dv.setUint32(p + 60, dataLen, true);
    p += RECORD_HEADER_BYTES;
    out.set(h.stream, p);
    p += sLen;
    p = copy(buf, ev[at + EV_TYPE] as number, typeLen, out, p);
    p = copy(buf, ev[at + EV_META] as number, metaLen, out, p);
    p = copy(buf, ev[at + EV_DATA] as number, dataLen, out, p);
    if (withKey && h.key && h.fingerprint) {
      dv.setUint16(p, h.key.length, true);
      out.set(h.key, p + 2);
      out.set(h.fingerprint, p + 2 + h.key.length);
      p += keyBytes;
    }
    lengths[i] = p - start;
  }
  if (p !== size) throw new Error(`encodeTable: wrote ${p} bytes of ${size}`);
  return new EncodedBatch(out, lengths, gap);
}

/** Copies `len` bytes; short runs byte by byte (cheaper than a typed-array set). */
function copy(src: Uint8Array, off: number, len: number, out: Uint8Array, p: number): number {
  if (len > 32) out.set(src.subarray(off, off + len), p);
  else for (let i = 0; i < len; i++) out[p + i] = src[off + i] as number;
  return p + len;
}
