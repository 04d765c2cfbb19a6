/**
 * Checks of everything a caller hands the store, before any of it is encoded: stream names,
 * events, expected versions, idempotency keys, read options. Each refusal is
 * PLX_CHRONACTA_BAD_INPUT or PLX_CHRONACTA_TOO_LARGE with what was wrong.
 */
import { randomUUID } from 'node:crypto';
import { FINGERPRINT_BYTES } from '../codec/chronacta-record.js';
import { sha256 } from '../core/index.js';
import { badInput, tooLarge } from './errors.js';
import { isUuid, uuidToBytes } from './record.js';
import type { EventData, ExpectedVersion } from './types.js';

export const MAX_STREAM_NAME_BYTES = 512;
export const MAX_TYPE_BYTES = 256;
export const MAX_KEY_BYTES = 256;
/** Data and metadata of one event together. */
export const MAX_EVENT_BYTES = 16 * 1024 * 1024;
export const MAX_BATCH_EVENTS = 10_000;
/** All events of one append together (data, metadata, names). */
export const MAX_BATCH_BYTES = 64 * 1024 * 1024;
export const DEFAULT_READ_COUNT = 1000;
export const MAX_READ_COUNT = 10_000;
/** Versions and positions stay below 2^53 (the log's bound). */
export const MAX_NUMBER = 2 ** 53 - 1;

const utf8 = new TextEncoder();

/** An event checked and turned into bytes. */
export interface CheckedEvent {
  /** 16 bytes. */
  readonly id: Uint8Array;
  /** Whether the caller gave the id (it then counts for idempotency). */
  readonly idGiven: boolean;
  readonly type: string;
  readonly data: Uint8Array;
  readonly metadata: Uint8Array;
}

function utf8Length(s: string): number {
  return Buffer.byteLength(s, 'utf8');
}

/** A stream name: 1 to 512 bytes of UTF-8 without NUL; `$`-names are the store's own unless `system`. */
export function checkStream(stream: unknown, opts: { system?: boolean; what?: string } = {}): string {
  const what = opts.what ?? 'stream';
  if (typeof stream !== 'string' || stream.length === 0) throw badInput(`${what} must be a non-empty string`);
  if (utf8Length(stream) > MAX_STREAM_NAME_BYTES) {
    throw badInput(`${what} name is longer than ${MAX_STREAM_NAME_BYTES} bytes of UTF-8`, {
      bytes: utf8Length(stream),
    });
  }
  if (stream.includes('\u0000')) throw badInput(`${what} name contains a NUL character`);
  if (!opts.system && stream.startsWith('$')) {
    throw badInput(`stream "${stream}": names starting with "$" are reserved for the store ($all, $$<stream>)`, {
      stream,
    });
  }
  if (!isWellFormed(stream)) throw badInput(`${what} name is not valid Unicode (a lone surrogate)`);
  return stream;
}

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

function bytesOf(v: unknown, what: string): Uint8Array {
  if (v === undefined || v === null) return new Uint8Array(0);
  if (typeof v === 'string') {
    if (!isWellFormed(v)) throw badInput(`${what} is not valid Unicode (a lone surrogate)`);
    return utf8.encode(v);
  }
  if (v instanceof Uint8Array) return v;
  throw badInput(`${what} must be a Uint8Array or a string`);
}

export function checkEvents(events: unknown): CheckedEvent[] {
  if (!Array.isArray(events) || events.length === 0) throw badInput('events must be a non-empty array');
  if (events.length > MAX_BATCH_EVENTS) {
    throw tooLarge(`an append holds at most ${MAX_BATCH_EVENTS} events, got ${events.length}`, {
      events: events.length,
    });
  }
  let total = 0;
  return events.map((raw, i) => {
    if (typeof raw !== 'object' || raw === null) throw badInput(`event ${i} must be an object`);
    const e = raw as EventData;
    if (typeof e.type !== 'string' || e.type.length === 0)
      throw badInput(`event ${i}: type must be a non-empty string`);
    if (!isWellFormed(e.type)) throw badInput(`event ${i}: type is not valid Unicode`);
    if (utf8Length(e.type) > MAX_TYPE_BYTES) throw badInput(`event ${i}: type is longer than ${MAX_TYPE_BYTES} bytes`);
    let id: Uint8Array;
    let idGiven = false;
    if (e.id === undefined || e.id === '') id = uuidToBytes(randomUUID());
    else {
      if (typeof e.id !== 'string' || !isUuid(e.id))
        throw badInput(`event ${i}: id must be a UUID, got "${String(e.id)}"`);
      id = uuidToBytes(e.id);
      idGiven = true;
    }
    const data = bytesOf(e.data, `event ${i}: data`);
    const metadata = bytesOf(e.metadata, `event ${i}: metadata`);
    const size = data.length + metadata.length;
    if (size > MAX_EVENT_BYTES) {
      throw tooLarge(`event ${i}: data and metadata take ${size} bytes, above the limit of ${MAX_EVENT_BYTES}`, {
        bytes: size,
      });
    }
    total += size + MAX_STREAM_NAME_BYTES + MAX_TYPE_BYTES + 64;
    if (total > MAX_BATCH_BYTES) {
      throw tooLarge(`an append holds at most ${MAX_BATCH_BYTES} bytes`, { bytes: total });
    }
    return { id, idGiven, type: e.type, data, metadata };
  });
}

export function checkExpectedVersion(v: unknown): ExpectedVersion {
  if (v === undefined) return 'any';
  if (v === 'any' || v === 'no_stream' || v === 'exists') return v;
  if (typeof v === 'bigint' && v >= 0n && v <= BigInt(MAX_NUMBER)) return v;
  throw badInput(`expectedVersion must be 'any', 'no_stream', 'exists' or a version (a bigint from 0), got ${show(v)}`);
}

export function checkKey(key: unknown): string | undefined {
  if (key === undefined || key === '') return undefined;
  if (typeof key !== 'string') throw badInput('idempotencyKey must be a string');
  if (!isWellFormed(key) || utf8Length(key) > MAX_KEY_BYTES) {
    throw badInput(`idempotencyKey must be valid Unicode of at most ${MAX_KEY_BYTES} bytes`);
  }
  return key;
}

export function checkCount(v: unknown, what = 'maxCount'): number {
  if (v === undefined || v === 0) return DEFAULT_READ_COUNT;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw badInput(`${what} must be a whole number from 1`);
  return Math.min(v, MAX_READ_COUNT);
}

/** A version or position option: a bigint from `min`. */
export function checkBig(v: unknown, what: string, min = 0n): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'bigint' || v < min || v > BigInt(MAX_NUMBER)) {
    throw badInput(`${what} must be a bigint from ${min} to 2^53 - 1, got ${show(v)}`);
  }
  return Number(v);
}

export function checkTypes(v: unknown): ReadonlySet<string> | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || v.some((t) => typeof t !== 'string')) throw badInput('types must be an array of strings');
  return v.length === 0 ? undefined : new Set(v as string[]);
}

export function checkDirection(v: unknown): 'forwards' | 'backwards' {
  if (v === undefined || v === 'forwards') return 'forwards';
  if (v === 'backwards') return 'backwards';
  throw badInput(`direction must be 'forwards' or 'backwards', got ${show(v)}`);
}

function show(v: unknown): string {
  return typeof v === 'bigint' ? `${v}n` : typeof v === 'string' ? `"${v}"` : String(v);
}

/**
 * The fingerprint of an append for idempotency: SHA-256 of the stream and of each event's
 * type, metadata, data and (when the caller gave it) id, each length-prefixed.
 */
export function fingerprint(stream: string, events: readonly CheckedEvent[]): Uint8Array {
  const parts: Uint8Array[] = [utf8.encode('chronacta-append-v1')];
  const push = (b: Uint8Array) => {
    const len = new Uint8Array(4);
    new DataView(len.buffer).setUint32(0, b.length, true);
    parts.push(len, b);
  };
  push(utf8.encode(stream));
  for (const e of events) {
    push(e.idGiven ? e.id : new Uint8Array(0));
    push(utf8.encode(e.type));
    push(e.metadata);
    push(e.data);
  }
  const digest = sha256(Buffer.concat(parts));
  if (digest.length !== FINGERPRINT_BYTES) throw new Error('sha256 returned the wrong length');
  return digest;
}
