/**
 * The records of one append, checked and encoded in one pass into one buffer.
 *
 * An append reaches the store as an event table: the bytes its events live in and, per
 * event, the offset and length of its id, type, data and metadata (wire.ts leaves a gRPC
 * request that way; `tableOf` makes the same table from EventData objects). `checkTable`
 * applies the rules of validate.ts#checkEvents to it; `encodeTable` writes every record
 * (record.ts layout) end to end into one buffer, reading the events' bytes where they
 * are, with no object per event.
 */
import { randomFillSync } from 'node:crypto';
import { FINGERPRINT_BYTES, RECORD_FORMAT, RECORD_HEADER_BYTES, RecordKind } from '../codec/chronacta-record.js';
import { sha256 } from '../core/index.js';
import { badInput, tooLarge } from './errors.js';
import type { EventData } from './types.js';
import {
  MAX_BATCH_BYTES,
  MAX_BATCH_EVENTS,
  MAX_EVENT_BYTES,
  MAX_STREAM_NAME_BYTES,
  MAX_TYPE_BYTES,
} from './validate.js';
import { EV_DATA, EV_ID, EV_META, EV_SLOTS, EV_TYPE } from './wire.js';

/** The events of one append: their bytes and, per event, EV_SLOTS offsets and lengths into them. */
export interface EventTable {
  readonly buf: Uint8Array;
  readonly count: number;
  readonly ev: Uint32Array;
}

const FLAG_IDEMPOTENCY = 1;
/** The largest gap encodeTable leaves before a record. */
const MAX_GAP = 4096;
const TWO32 = 2 ** 32;
const utf8Fatal = new TextDecoder('utf-8', { fatal: true });
const utf8 = new TextEncoder();

function isWellFormed(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (!(d >= 0xdc00 && d <= 0xdfff)) return false;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) return false;
  }
  return true;
}

/**
 * The table of EventData objects as given to EventStore#append (checked as checkEvents
 * does: the same refusals and messages). Strings become their UTF-8 bytes.
 */
export function tableOf(events: unknown): EventTable {
  if (!Array.isArray(events) || events.length === 0) throw badInput('events must be a non-empty array');
  if (events.length > MAX_BATCH_EVENTS) {
    throw tooLarge(`an append holds at most ${MAX_BATCH_EVENTS} events, got ${events.length}`, {
      events: events.length,
    });
  }
  const parts: Uint8Array[] = [];
  const ev = new Uint32Array(events.length * EV_SLOTS);
  let off = 0;
  const put = (slot: number, b: Uint8Array) => {
    ev[slot] = off;
    ev[slot + 1] = b.length;
    parts.push(b);
    off += b.length;
  };
  for (let i = 0; i < events.length; i++) {
    const raw: unknown = events[i];
    if (typeof raw !== 'object' || raw === null) throw badInput(`event ${i} must be an object`);
    const e = raw as EventData;
    if (typeof e.type !== 'string' || e.type.length === 0) {
      throw badInput(`event ${i}: type must be a non-empty string`);
    }
    if (!isWellFormed(e.type)) throw badInput(`event ${i}: type is not valid Unicode`);
    const at = i * EV_SLOTS;
    if (e.id !== undefined && e.id !== '') {
      if (typeof e.id !== 'string') throw badInput(`event ${i}: id must be a UUID, got "${String(e.id)}"`);
      put(at + EV_ID, utf8.encode(e.id));
    }
    put(at + EV_TYPE, utf8.encode(e.type));
    put(at + EV_DATA, bytesOf(e.data, `event ${i}: data`));
    put(at + EV_META, bytesOf(e.metadata, `event ${i}: metadata`));
  }
  const buf = Buffer.concat(parts, off);
  return { buf: new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength), count: events.length, ev };
}

function bytesOf(v: unknown, what: string): Uint8Array {
  if (v === undefined || v === null) return new Uint8Array(0);
  if (typeof v === 'string') {
    if (!isWellFormed(v)) throw badInput(`${what} is not valid Unicode (a lone surrogate)`);
    return utf8.encode(v);
  }
  if (v instanceof Uint8Array) return v;
  throw badInput(`${what} must be a Uint8Array or a string`);
}

function hexNibble(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** Whether `b[off..off+36)` is a UUID in text form (8-4-4-4-12 hex digits). */
function isUuidText(b: Uint8Array, off: number, len: number): boolean {
  if (len !== 36) return false;
  for (let i = 0; i < 36; i++) {
    const c = b[off + i] as number;
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (c !== 45) return false;
    } else if (hexNibble(c) < 0) return false;
  }
  return true;
}

function showId(b: Uint8Array, off: number, len: number): string {
  return Buffer.from(b.buffer, b.byteOffset + off, Math.min(len, 64)).toString('latin1');
}

/** Whether `b[off..off+len)` is UTF-8 (ASCII checked inline, the rest by the decoder). */
function isUtf8(b: Uint8Array, off: number, len: number): boolean {
  for (let i = off; i < off + len; i++) {
    if ((b[i] as number) >= 0x80) {
      try {
        utf8Fatal.decode(b.subarray(off, off + len));
        return true;
      } catch {
        return false;
      }
    }
  }
  return true;
}

function sameBytes(b: Uint8Array, a: number, c: number, len: number): boolean {
  for (let i = 0; i < len; i++) if (b[a + i] !== b[c + i]) return false;
  return true;
}

/**
 * Checks the events of a table as checkEvents does (empty batch, count, type, id, sizes;
 * PLX_CHRONACTA_BAD_INPUT or PLX_CHRONACTA_TOO_LARGE) and returns the bytes their records'
 * bodies take (names excluded).
 */
export function checkTable(t: EventTable): number {
  const { buf, count, ev } = t;
  if (count === 0) throw badInput('events must be a non-empty array');
  if (count > MAX_BATCH_EVENTS) {
    throw tooLarge(`an append holds at most ${MAX_BATCH_EVENTS} events, got ${count}`, { events: count });
  }
  let total = 0;
  let body = 0;
  let lastTypeOff = -1;
  let lastTypeLen = -1;
  for (let i = 0; i < count; i++) {
    const at = i * EV_SLOTS;
    const typeOff = ev[at + EV_TYPE] as number;
    const typeLen = ev[at + EV_TYPE + 1] as number;
    if (typeLen === 0) throw badInput(`event ${i}: type must be a non-empty string`);
    // Most batches repeat one type: check its bytes once.
    if (!(typeLen === lastTypeLen && sameBytes(buf, typeOff, lastTypeOff, typeLen))) {
      if (typeLen > MAX_TYPE_BYTES) throw badInput(`event ${i}: type is longer than ${MAX_TYPE_BYTES} bytes`);
      if (!isUtf8(buf, typeOff, typeLen)) throw badInput(`event ${i}: type is not valid Unicode`);
      lastTypeOff = typeOff;
      lastTypeLen = typeLen;
    }
    const idLen = ev[at + EV_ID + 1] as number;
    if (idLen !== 0 && !isUuidText(buf, ev[at + EV_ID] as number, idLen)) {
      throw badInput(`event ${i}: id must be a UUID, got "${showId(buf, ev[at + EV_ID] as number, idLen)}"`);
    }
    const size = (ev[at + EV_DATA + 1] as number) + (ev[at + EV_META + 1] as number);
    if (size > MAX_EVENT_BYTES) {
      throw tooLarge(`event ${i}: data and metadata take ${size} bytes, above the limit of ${MAX_EVENT_BYTES}`, {
        bytes: size,
      });
    }
    total += size + MAX_STREAM_NAME_BYTES + MAX_TYPE_BYTES + 64;
    if (total > MAX_BATCH_BYTES) throw tooLarge(`an append holds at most ${MAX_BATCH_BYTES} bytes`, { bytes: total });
    body += typeLen + size;
  }
  return body;
}

/**
 * The idempotency fingerprint of a checked table: the same bytes as
 * validate.ts#fingerprint of the same append, hashed in one call.
 */
export function fingerprintTable(stream: Uint8Array, t: EventTable): Uint8Array {
  const { buf, count, ev } = t;
  const prefix = utf8.encode('chronacta-append-v1');
  let size = prefix.length + 4 + stream.length;
  for (let i = 0; i < count; i++) {
    const at = i * EV_SLOTS;
    size += 16 + (ev[at + EV_TYPE + 1] as number) + (ev[at + EV_META + 1] as number) + (ev[at + EV_DATA + 1] as number);
    if ((ev[at + EV_ID + 1] as number) > 0) size += 16;
  }
  const out = new Uint8Array(size);
  const v = new DataView(out.buffer);
  out.set(prefix, 0);
  let p = prefix.length;
  v.setUint32(p, stream.length, true);
  out.set(stream, p + 4);
  p += 4 + stream.length;
  for (let i = 0; i < count; i++) {
    const at = i * EV_SLOTS;
    const idLen = ev[at + EV_ID + 1] as number;
    v.setUint32(p, idLen > 0 ? 16 : 0, true);
    p += 4;
    if (idLen > 0) {
      uuidInto(buf, ev[at + EV_ID] as number, out, p);
      p += 16;
    }
    for (const slot of [EV_TYPE, EV_META, EV_DATA]) {
      const off = ev[at + slot] as number;
      const len = ev[at + slot + 1] as number;
      v.setUint32(p, len, true);
      out.set(buf.subarray(off, off + len), p + 4);
      p += 4 + len;
    }
  }
  const digest = sha256(out);
  if (digest.length !== FINGERPRINT_BYTES) throw new Error('sha256 returned the wrong length');
  return digest;
}

/** The 16 bytes of the UUID text at `b[off..off+36)` (checked) written at `out[at]`. */
function uuidInto(b: Uint8Array, off: number, out: Uint8Array, at: number): void {
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
