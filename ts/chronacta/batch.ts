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
import {
  EV_DATA,
  EV_ID,
  EV_META,
  EV_SLOTS,
  EV_TYPE,
  type EventTable,
  hexNibble,
  uuidInto,
} from '../codec/chronacta-batch.js';
import { FINGERPRINT_BYTES } from '../codec/chronacta-record.js';
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
