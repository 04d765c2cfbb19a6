/**
 * The actor journal record (docs/runtime.md, "The journal record"): the payload of one
 * log-engine record in a shard's journal. One macrostep is one record, appended as one
 * atomic batch; a snapshot is one record too. Version 1, all integers little endian.
 *
 * Header (32 bytes), checked length first on the generic header kernel of plexus/core
 * (WebAssembly, or its TypeScript twin):
 *   0 u32 body length | 4 u8 kind (1 macrostep, 2 snapshot) | 5 u8 version (1)
 *   6 u16 flags (bit 0: the macrostep carries its new state) | 8 u64 seq
 *   16 u64 time (ms) | 24 u64 dispatched-through
 * Body: the actor IRI (u16 length + UTF-8), then by kind
 *   macrostep: message id (u16 + UTF-8), event (u32 + JSON), [state (u32 + JSON)],
 *              send count (u32), each send (u32 + JSON)
 *   snapshot:  state (u32 + JSON), dedup count (u32), each id (u16 + UTF-8),
 *              pending count (u32), each: seq (u64), index (u32), send (u32 + JSON)
 * Every count and length is checked against the bytes that remain before anything is
 * allocated; the body must end exactly where the header's length says.
 */
import { PlexusError } from '../core/errors.js';
import { checkHeader, defineHeader, encodeHeader } from '../core/index.js';
import { type ByteFail, ByteReader, ByteWriter, getU16, getU32, getU64 } from './bytes.js';

export const JOURNAL_HEADER_SIZE = 32;
/** The largest body of one journal record: 16 MiB. */
export const MAX_JOURNAL_BODY = 16 * 1024 * 1024;
/** The longest actor IRI, in UTF-8 bytes. */
export const MAX_IRI_BYTES = 4096;
/** The longest message id, in UTF-8 bytes (room for an IRI and a suffix). */
export const MAX_MESSAGE_ID_BYTES = 8192;
/** The most sends one macrostep may produce. */
export const MAX_SENDS = 4096;
/** The largest actor position: positions stay below 2^53. */
export const MAX_SEQ = Number.MAX_SAFE_INTEGER;

export const JournalKind = { macrostep: 1, snapshot: 2 } as const;
const FLAG_STATE = 1;

export const JournalCode = {
  /** A journal record's bytes are malformed (details.reason, details.offset). */
  badRecord: 'PLX_JOURNAL_BAD_RECORD',
  /** A record to encode is out of range or not JSON. */
  badInput: 'PLX_JOURNAL_BAD_INPUT',
} as const;

/** A JSON value as stored in a record (events, states and sends are JSON). */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** One macrostep: the consumed event, the new state (unless rebuilt from events) and the sends. */
export interface MacrostepRecord {
  readonly kind: 'macrostep';
  readonly iri: string;
  /** The actor's journal position after this macrostep (1 for its first). */
  readonly seq: number;
  /** When the macrostep ran, by the node's clock (ms since 1970). */
  readonly time: number;
  /** Every send of a record at or below this seq had completed when this one was written. */
  readonly dispatchedThrough: number;
  readonly messageId: string;
  readonly event: JsonValue;
  /** Absent when the chart journals events only: replay runs the transition again. */
  readonly state?: JsonValue;
  readonly sends: readonly JsonValue[];
}

/** A send of a snapshot's outbox that had not completed when the snapshot was taken. */
export interface PendingSend {
  readonly seq: number;
  readonly index: number;
  readonly send: JsonValue;
}

/** The actor's state after `seq`, its dedup window and its unfinished sends. */
export interface SnapshotRecord {
  readonly kind: 'snapshot';
  readonly iri: string;
  readonly seq: number;
  readonly time: number;
  readonly dispatchedThrough: number;
  readonly state: JsonValue;
  readonly dedup: readonly string[];
  readonly pending: readonly PendingSend[];
}

export type JournalRecord = MacrostepRecord | SnapshotRecord;

const V = { length: 1, kind: 2, version: 3, flags: 4, seq: 5, time: 6, dispatched: 7 } as const;
const REASONS = ['', 'length', 'kind', 'version', 'flags', 'seq', 'time', 'dispatched-through'];

const SCHEMA = defineHeader({
  size: JOURNAL_HEADER_SIZE,
  fields: [
    { name: 'length', offset: 0, width: 4 },
    { name: 'kind', offset: 4, width: 1 },
    { name: 'version', offset: 5, width: 1 },
    { name: 'flags', offset: 6, width: 2 },
    { name: 'seq', offset: 8, width: 8 },
    { name: 'time', offset: 16, width: 8 },
    { name: 'dispatched', offset: 24, width: 8 },
  ],
  length: { field: 'length', max: MAX_JOURNAL_BODY, verdictTooLong: V.length },
  checks: [
    { name: 'kind', field: 'kind', op: 'range', min: 1, max: 2, verdict: V.kind },
    { name: 'version', field: 'version', op: 'eq', value: 1, verdict: V.version },
    { name: 'flags', field: 'flags', op: 'mask-zero', mask: 0xfffe, verdict: V.flags },
    {
      name: 'flags-snapshot',
      field: 'flags',
      op: 'eq',
      value: 0,
      verdict: V.flags,
      when: { field: 'kind', equals: 2 },
    },
    { name: 'seq', field: 'seq', op: 'range', min: 1, max: MAX_SEQ, verdict: V.seq },
    { name: 'time', field: 'time', op: 'range', min: 0, max: MAX_SEQ, verdict: V.time },
    { name: 'dispatched', field: 'dispatched', op: 'range', min: 0, max: MAX_SEQ, verdict: V.dispatched },
  ],
});

function refuse(reason: string, message: string, offset: number, extra: Record<string, unknown> = {}): PlexusError {
  return new PlexusError(JournalCode.badRecord, `journal record refused: ${message}`, { reason, offset, ...extra });
}

function badInput(message: string): PlexusError {
  return new PlexusError(JournalCode.badInput, `journal record not encodable: ${message}`);
}

const utf8Strict = new TextDecoder('utf-8', { fatal: true });

/** Cut-short and out-of-range reads of the body, as this format refuses them. */
const bodyFail: ByteFail = (reason, what, message, at) =>
  reason === 'short' ? refuse('cut', message, at) : refuse('range', `${what} is above 2^53 - 1`, at);

/** A string of `len` bytes (its length field just read), at most `max`, strict UTF-8. */
function text(r: ByteReader, len: number, max: number, what: string): string {
  if (len > max) throw refuse('too-long', `${what} of ${len} bytes is above the maximum of ${max}`, r.at - 2);
  const start = r.at;
  const b = r.bytes(len, what);
  try {
    return utf8Strict.decode(b);
  } catch {
    throw refuse('utf8', `${what} is not valid UTF-8`, start);
  }
}

/** A u32 length, then that many bytes of JSON. */
function json(r: ByteReader, what: string): JsonValue {
  const len = r.u32(`${what} length`);
  r.need(len, what);
  const start = r.at;
  const t = text(r, len, MAX_JOURNAL_BODY, what);
  try {
    return JSON.parse(t) as JsonValue;
  } catch {
    throw refuse('json', `${what} is not JSON`, start);
  }
}

/** A count of items each at least `minBytes` long, checked against what remains. */
function count(r: ByteReader, max: number, minBytes: number, what: string): number {
  const n = r.u32(what);
  if (n > max) throw refuse('count', `${what} ${n} is above the maximum of ${max}`, r.at - 4);
  if (n * minBytes > r.left) {
    throw refuse('cut', `${what} ${n} cannot fit in the ${r.left} bytes that remain`, r.at - 4);
  }
  return n;
}

function checkedHeader(bytes: Uint8Array): number {
  if (!(bytes instanceof Uint8Array)) throw new TypeError('a journal record is a Uint8Array');
  const verdict = checkHeader(SCHEMA, bytes.subarray(0, Math.min(bytes.length, JOURNAL_HEADER_SIZE)));
  if (verdict < 0) {
    throw refuse('cut', `${bytes.length} bytes are fewer than the ${JOURNAL_HEADER_SIZE}-byte header`, 0);
  }
  if (verdict !== 0) {
    const reason = REASONS[verdict] ?? 'header';
    const length = getU32(bytes, 0);
    const message =
      reason === 'length'
        ? `body length ${length} is above the maximum of ${MAX_JOURNAL_BODY} bytes`
        : `header field ${reason} is out of range (kind 1..2, version 1, flags bit 0 on macrosteps only, seq 1..2^53-1)`;
    throw refuse(reason, message, 0);
  }
  const end = JOURNAL_HEADER_SIZE + getU32(bytes, 0);
  if (bytes.length !== end) {
    throw refuse('length', `the header says ${end} bytes in all, the record has ${bytes.length}`, 0, {
      expected: end,
      actual: bytes.length,
    });
  }
  return end;
}

/**
 * Decodes one journal record (a whole log-engine payload). Refusals are PlexusError
 * `PLX_JOURNAL_BAD_RECORD` with `details.reason` and `details.offset`; no allocation is
 * sized by a length before that length is checked against the bytes present.
 */
export function decodeJournalRecord(bytes: Uint8Array): JournalRecord {
  const end = checkedHeader(bytes);
  // The kernel has checked the header: seq, time and dispatched-through are below 2^53.
  const kind = bytes[4] as number;
  const flags = getU16(bytes, 6);
  const seq = getU64(bytes, 8);
  const time = getU64(bytes, 16);
  const dispatchedThrough = getU64(bytes, 24);
  if (dispatchedThrough > seq) {
    throw refuse('dispatched-through', `dispatched-through ${dispatchedThrough} is above seq ${seq}`, 24);
  }
  const r = new ByteReader(bytes, bodyFail, JOURNAL_HEADER_SIZE);
  const iri = text(r, r.u16('IRI length'), MAX_IRI_BYTES, 'IRI');
  if (iri.length === 0) throw refuse('iri', 'the actor IRI is empty', JOURNAL_HEADER_SIZE);
  let record: JournalRecord;
  if (kind === JournalKind.macrostep) {
    const messageId = text(r, r.u16('message id length'), MAX_MESSAGE_ID_BYTES, 'message id');
    const event = json(r, 'event');
    const state = (flags & FLAG_STATE) !== 0 ? json(r, 'state') : undefined;
    const n = count(r, MAX_SENDS, 4, 'send count');
    const sends: JsonValue[] = [];
    for (let i = 0; i < n; i++) sends.push(json(r, `send ${i}`));
    record = { kind: 'macrostep', iri, seq, time, dispatchedThrough, messageId, event, sends };
    if (state !== undefined) record = { ...record, state };
  } else {
    const state = json(r, 'state');
    const nd = count(r, MAX_SEQ, 2, 'dedup count');
    const dedup: string[] = [];
    for (let i = 0; i < nd; i++) dedup.push(text(r, r.u16('dedup id length'), MAX_MESSAGE_ID_BYTES, `dedup id ${i}`));
    const np = count(r, MAX_SEQ, 16, 'pending count');
    const pending: PendingSend[] = [];
    for (let i = 0; i < np; i++) {
      const pseq = r.u64(`pending ${i} seq`);
      const index = r.u32(`pending ${i} index`);
      pending.push({ seq: pseq, index, send: json(r, `pending ${i} send`) });
    }
    record = { kind: 'snapshot', iri, seq, time, dispatchedThrough, state, dedup, pending };
  }
  if (r.at !== end) throw refuse('trailing', `${end - r.at} bytes follow the last field`, r.at);
  return record;
}

/**
 * The encoder's output buffer: one writer reused by every call (encoding is synchronous, and
 * the result is copied out), so a record costs no allocation but its own bytes; strings are
 * written in place with `encodeInto`.
 */
const shared = new ByteWriter(1024, JOURNAL_HEADER_SIZE);
let sharedBusy = false;

/** A string behind a u16 length, at most `max` bytes. */
function text16(w: ByteWriter, s: string, max: number, what: string): void {
  if (typeof s !== 'string') throw badInput(`${what} must be a string`);
  const at = w.at;
  const n = w.text(s, 2);
  if (n > max) {
    w.at = at;
    throw badInput(`${what} has ${n} bytes; at most ${max}`);
  }
}

/** A value as JSON text behind a u32 length. */
function json32(w: ByteWriter, v: unknown, what: string): void {
  let t: string | undefined;
  try {
    t = JSON.stringify(v);
  } catch (e) {
    throw badInput(`${what} cannot be written as JSON (${(e as Error).message})`);
  }
  if (t === undefined) throw badInput(`${what} is not a JSON value`);
  w.text(t, 4);
}

function checkInt(v: unknown, what: string, min = 0): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    throw badInput(`${what} must be an integer from ${min} to 2^53 - 1, got ${String(v)}`);
  }
  return v;
}

/** Encodes one journal record; JSON fields are written with JSON.stringify. */
export function encodeJournalRecord(rec: JournalRecord): Uint8Array {
  // JSON.stringify may run a value's toJSON, which could encode a record itself: such a
  // nested call gets a writer of its own.
  if (sharedBusy) return encodeWith(new ByteWriter(1024, JOURNAL_HEADER_SIZE), rec);
  sharedBusy = true;
  try {
    shared.reset(JOURNAL_HEADER_SIZE);
    return encodeWith(shared, rec);
  } finally {
    sharedBusy = false;
  }
}

function encodeWith(w: ByteWriter, rec: JournalRecord): Uint8Array {
  const seq = checkInt(rec.seq, 'seq', 1);
  const time = checkInt(rec.time, 'time');
  const dispatched = checkInt(rec.dispatchedThrough, 'dispatchedThrough');
  if (dispatched > seq) throw badInput(`dispatchedThrough ${dispatched} is above seq ${seq}`);
  if (typeof rec.iri !== 'string' || rec.iri.length === 0) throw badInput('the actor IRI must be a non-empty string');
  text16(w, rec.iri, MAX_IRI_BYTES, 'IRI');
  let flags = 0;
  let kind: number;
  if (rec.kind === 'macrostep') {
    kind = JournalKind.macrostep;
    text16(w, rec.messageId, MAX_MESSAGE_ID_BYTES, 'message id');
    json32(w, rec.event, 'event');
    if (rec.state !== undefined) {
      flags |= FLAG_STATE;
      json32(w, rec.state, 'state');
    }
    if (rec.sends.length > MAX_SENDS)
      throw badInput(`${rec.sends.length} sends; one macrostep makes at most ${MAX_SENDS}`);
    w.u32(rec.sends.length);
    for (let i = 0; i < rec.sends.length; i++) json32(w, rec.sends[i], `send ${i}`);
  } else if (rec.kind === 'snapshot') {
    kind = JournalKind.snapshot;
    json32(w, rec.state, 'state');
    w.u32(rec.dedup.length);
    for (const id of rec.dedup) text16(w, id, MAX_MESSAGE_ID_BYTES, 'dedup id');
    w.u32(rec.pending.length);
    for (const p of rec.pending) {
      w.u64(checkInt(p.seq, 'pending seq', 1));
      w.u32(checkInt(p.index, 'pending index'));
      json32(w, p.send, 'pending send');
    }
  } else {
    throw badInput(`kind ${String((rec as { kind?: unknown }).kind)} is neither macrostep nor snapshot`);
  }
  const out = w.finish();
  const length = out.length - JOURNAL_HEADER_SIZE;
  if (length > MAX_JOURNAL_BODY) throw badInput(`the body has ${length} bytes; at most ${MAX_JOURNAL_BODY}`);
  encodeHeader(
    SCHEMA,
    { length, kind, version: 1, flags, seq, time, dispatched },
    out.subarray(0, JOURNAL_HEADER_SIZE),
  );
  return w.copy();
}

/** What indexing a shard needs of a record: its kind, actor and seq (the body is not parsed). */
export interface RecordKey {
  readonly kind: 'macrostep' | 'snapshot';
  readonly iri: string;
  readonly seq: number;
}

/**
 * Reads the header and the actor IRI only, with the same checks as decodeJournalRecord
 * for those bytes; the rest of the body is left for a full decode when the actor replays.
 */
export function peekJournalRecord(bytes: Uint8Array): RecordKey {
  checkedHeader(bytes);
  const r = new ByteReader(bytes, bodyFail, JOURNAL_HEADER_SIZE);
  const iri = text(r, r.u16('IRI length'), MAX_IRI_BYTES, 'IRI');
  if (iri.length === 0) throw refuse('iri', 'the actor IRI is empty', JOURNAL_HEADER_SIZE);
  return {
    kind: bytes[4] === JournalKind.macrostep ? 'macrostep' : 'snapshot',
    iri,
    seq: getU64(bytes, 8),
  };
}
