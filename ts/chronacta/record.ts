/**
 * What Chronacta makes of its log record payloads (docs/chronacta.md#the-record-in-the-log):
 * entries decoded with its refusal (PLX_CHRONACTA_BAD_INPUT), stream metadata, redaction and
 * event ids. The byte layout of an entry is ts/codec/chronacta-record.ts.
 */
import { decodeEntry as decodeEntryBytes, type Entry, RecordKind } from '../codec/chronacta-record.js';
import { badInput } from './errors.js';

/** The state a metadata entry sets for its stream (the data of a METADATA entry, as JSON). */
export interface StreamMeta {
  /** Versions below this are gone. */
  readonly truncateBefore: number;
  readonly deleted: 'none' | 'soft' | 'hard';
  /** The stream's last version when the change was made (-1: never written). */
  readonly lastVersion: number;
}

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

function damaged(what: string, position?: number): Error {
  return badInput(
    `a log record${position === undefined ? '' : ` at position ${position}`} is not a Chronacta entry: ${what}`,
    {
      position,
    },
  );
}

/**
 * Decodes a log record payload (ts/codec/chronacta-record.ts). `metadata` and `data` are views
 * into `payload`. A payload that is not a well-formed entry fails with PLX_CHRONACTA_BAD_INPUT
 * (the store reports it as damage).
 */
export function decodeEntry(payload: Uint8Array): Entry {
  return decodeEntryBytes(payload, damaged);
}

/** The stream a metadata entry applies to: `$$X` -> `X`. */
export function metaTarget(entry: Entry): string {
  return entry.stream.slice(2);
}

export function encodeStreamMeta(m: StreamMeta): Uint8Array {
  return utf8.encode(JSON.stringify(m));
}

export function decodeStreamMeta(entry: Entry): StreamMeta {
  let m: unknown;
  try {
    m = JSON.parse(utf8Decoder.decode(entry.data));
  } catch {
    throw damaged('metadata is not JSON', entry.position);
  }
  const o = m as Partial<StreamMeta>;
  if (
    typeof o !== 'object' ||
    o === null ||
    !Number.isSafeInteger(o.truncateBefore) ||
    !Number.isSafeInteger(o.lastVersion) ||
    (o.deleted !== 'none' && o.deleted !== 'soft' && o.deleted !== 'hard')
  ) {
    throw damaged('metadata has the wrong shape', entry.position);
  }
  return { truncateBefore: o.truncateBefore!, deleted: o.deleted, lastVersion: o.lastVersion! };
}

/** The entry with its body dropped (kept for its idempotency key). */
export function redact(e: Entry): Entry {
  return { ...e, kind: RecordKind.REDACTED, type: '', metadata: new Uint8Array(0), data: new Uint8Array(0) };
}

// ------------------------------------------------------------------ UUIDs

const UUID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

export function isUuid(s: string): boolean {
  return UUID_RE.test(s);
}

function hexNibble(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** The 16 bytes of a UUID in its text form (checked with isUuid first). */
export function uuidToBytes(s: string): Uint8Array {
  const out = new Uint8Array(16);
  let j = 0;
  for (let i = 0; i < s.length && j < 16; i++) {
    const hi = hexNibble(s.charCodeAt(i));
    if (hi < 0) continue; // a dash
    out[j++] = (hi << 4) | hexNibble(s.charCodeAt(++i));
  }
  return out;
}

export function bytesToUuid(b: Uint8Array): string {
  const h = Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}
