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

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true });

/** A bounds-checked reader over the body; every read names the field it reads. */
class Reader {
  at: number;
  private readonly dv: DataView;
  constructor(
    private readonly b: Uint8Array,
    start: number,
    readonly end: number,
  ) {
    this.at = start;
    this.dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }
  private need(n: number, what: string): void {
    if (this.end - this.at < n) {
      throw refuse('cut', `${what} needs ${n} bytes at offset ${this.at}, only ${this.end - this.at} remain`, this.at);
    }
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.dv.getUint16(this.at, true);
    this.at += 2;
    return v;
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.dv.getUint32(this.at, true);
    this.at += 4;
    return v;
  }
  u64(what: string): number {
    this.need(8, what);
    const v = this.dv.getBigUint64(this.at, true);
    if (v > BigInt(MAX_SEQ)) throw refuse('range', `${what} ${v} is above 2^53 - 1`, this.at);
    this.at += 8;
    return Number(v);
  }
  text(len: number, max: number, what: string): string {
    if (len > max) throw refuse('too-long', `${what} of ${len} bytes is above the maximum of ${max}`, this.at - 2);
    this.need(len, what);
    const start = this.at;
    this.at += len;
    try {
      return utf8Strict.decode(this.b.subarray(start, start + len));
    } catch {
      throw refuse('utf8', `${what} is not valid UTF-8`, start);
    }
  }
  json(what: string): JsonValue {
    const len = this.u32(`${what} length`);
    this.need(len, what);
    const start = this.at;
    const text = this.text(len, MAX_JOURNAL_BODY, what);
    try {
      return JSON.parse(text) as JsonValue;
    } catch {
      throw refuse('json', `${what} is not JSON`, start);
    }
  }
  /** A count of items each at least `minBytes` long, checked against what remains. */
  count(max: number, minBytes: number, what: string): number {
    const n = this.u32(what);
    if (n > max) throw refuse('count', `${what} ${n} is above the maximum of ${max}`, this.at - 4);
    if (n * minBytes > this.end - this.at) {
      throw refuse('cut', `${what} ${n} cannot fit in the ${this.end - this.at} bytes that remain`, this.at - 4);
    }
    return n;
  }
}

function checkedHeader(bytes: Uint8Array): { dv: DataView; end: number } {
  if (!(bytes instanceof Uint8Array)) throw new TypeError('a journal record is a Uint8Array');
  const verdict = checkHeader(SCHEMA, bytes.subarray(0, Math.min(bytes.length, JOURNAL_HEADER_SIZE)));
  if (verdict < 0) {
    throw refuse('cut', `${bytes.length} bytes are fewer than the ${JOURNAL_HEADER_SIZE}-byte header`, 0);
  }
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (verdict !== 0) {
    const reason = REASONS[verdict] ?? 'header';
    const length = dv.getUint32(0, true);
    const message =
      reason === 'length'
        ? `body length ${length} is above the maximum of ${MAX_JOURNAL_BODY} bytes`
        : `header field ${reason} is out of range (kind 1..2, version 1, flags bit 0 on macrosteps only, seq 1..2^53-1)`;
    throw refuse(reason, message, 0);
  }
  const end = JOURNAL_HEADER_SIZE + dv.getUint32(0, true);
  if (bytes.length !== end) {
    throw refuse('length', `the header says ${end} bytes in all, the record has ${bytes.length}`, 0, {
      expected: end,
      actual: bytes.length,
    });
  }
  return { dv, end };
}

/**
 * Decodes one journal record (a whole log-engine payload). Refusals are PlexusError
 * `PLX_JOURNAL_BAD_RECORD` with `details.reason` and `details.offset`; no allocation is
 * sized by a length before that length is checked against the bytes present.
 */
export function decodeJournalRecord(bytes: Uint8Array): JournalRecord {
  const { dv, end } = checkedHeader(bytes);
  const kind = dv.getUint8(4);
  const flags = dv.getUint16(6, true);
  const seq = Number(dv.getBigUint64(8, true));
  const time = Number(dv.getBigUint64(16, true));
  const dispatchedThrough = Number(dv.getBigUint64(24, true));
  if (dispatchedThrough > seq) {
    throw refuse('dispatched-through', `dispatched-through ${dispatchedThrough} is above seq ${seq}`, 24);
  }
  const r = new Reader(bytes, JOURNAL_HEADER_SIZE, end);
  const iri = r.text(r.u16('IRI length'), MAX_IRI_BYTES, 'IRI');
  if (iri.length === 0) throw refuse('iri', 'the actor IRI is empty', JOURNAL_HEADER_SIZE);
  let record: JournalRecord;
  if (kind === JournalKind.macrostep) {
    const messageId = r.text(r.u16('message id length'), MAX_MESSAGE_ID_BYTES, 'message id');
    const event = r.json('event');
    const state = (flags & FLAG_STATE) !== 0 ? r.json('state') : undefined;
    const n = r.count(MAX_SENDS, 4, 'send count');
    const sends: JsonValue[] = [];
    for (let i = 0; i < n; i++) sends.push(r.json(`send ${i}`));
    record = { kind: 'macrostep', iri, seq, time, dispatchedThrough, messageId, event, sends };
    if (state !== undefined) record = { ...record, state };
  } else {
    const state = r.json('state');
    const nd = r.count(MAX_SEQ, 2, 'dedup count');
    const dedup: string[] = [];
    for (let i = 0; i < nd; i++) dedup.push(r.text(r.u16('dedup id length'), MAX_MESSAGE_ID_BYTES, `dedup id ${i}`));
    const np = r.count(MAX_SEQ, 16, 'pending count');
    const pending: PendingSend[] = [];
    for (let i = 0; i < np; i++) {
      const pseq = r.u64(`pending ${i} seq`);
      const index = r.u32(`pending ${i} index`);
      pending.push({ seq: pseq, index, send: r.json(`pending ${i} send`) });
    }
    record = { kind: 'snapshot', iri, seq, time, dispatchedThrough, state, dedup, pending };
  }
  if (r.at !== end) throw refuse('trailing', `${end - r.at} bytes follow the last field`, r.at);
  return record;
}

/**
 * Output buffer of the encoder. One instance is reused by every call (encoding is
 * synchronous, and the result is copied out), so a record costs no allocation but its own
 * bytes; strings are written in place with `encodeInto`.
 */
class Writer {
  private buf = new Uint8Array(1024);
  private dv = new DataView(this.buf.buffer);
  at = JOURNAL_HEADER_SIZE;
  reset(): void {
    this.at = JOURNAL_HEADER_SIZE;
    // Give back a buffer grown for one large record.
    if (this.buf.length > 1 << 20) {
      this.buf = new Uint8Array(1024);
      this.dv = new DataView(this.buf.buffer);
    }
  }
  private grow(n: number): void {
    if (this.at + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.at + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.at));
    this.buf = next;
    this.dv = new DataView(next.buffer);
  }
  u16(v: number): void {
    this.grow(2);
    this.dv.setUint16(this.at, v, true);
    this.at += 2;
  }
  u32(v: number): void {
    this.grow(4);
    this.dv.setUint32(this.at, v, true);
    this.at += 4;
  }
  u64(v: number): void {
    this.grow(8);
    this.dv.setBigUint64(this.at, BigInt(v), true);
    this.at += 8;
  }
  /** Writes `s` as UTF-8 behind a length field of `lenBytes` (2 or 4); its byte count. */
  private utf8(s: string, lenBytes: 2 | 4): number {
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    this.grow(lenBytes + s.length * 3);
    const start = this.at + lenBytes;
    const n = utf8.encodeInto(s, this.buf.subarray(start)).written;
    if (lenBytes === 2) this.dv.setUint16(this.at, n, true);
    else this.dv.setUint32(this.at, n, true);
    this.at = start + n;
    return n;
  }
  text16(s: string, max: number, what: string): void {
    if (typeof s !== 'string') throw badInput(`${what} must be a string`);
    const at = this.at;
    const n = this.utf8(s, 2);
    if (n > max) {
      this.at = at;
      throw badInput(`${what} has ${n} bytes; at most ${max}`);
    }
  }
  json(v: unknown, what: string): void {
    let text: string | undefined;
    try {
      text = JSON.stringify(v);
    } catch (e) {
      throw badInput(`${what} cannot be written as JSON (${(e as Error).message})`);
    }
    if (text === undefined) throw badInput(`${what} is not a JSON value`);
    this.utf8(text, 4);
  }
  /** The record so far, copied out. */
  copy(): Uint8Array {
    return this.buf.slice(0, this.at);
  }
  /** The record so far, in place (valid until the next call). */
  view(): Uint8Array {
    return this.buf.subarray(0, this.at);
  }
}

const shared = new Writer();
let sharedBusy = false;

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
  if (sharedBusy) return encodeWith(new Writer(), rec);
  sharedBusy = true;
  try {
    shared.reset();
    return encodeWith(shared, rec);
  } finally {
    sharedBusy = false;
  }
}

function encodeWith(w: Writer, rec: JournalRecord): Uint8Array {
  const seq = checkInt(rec.seq, 'seq', 1);
  const time = checkInt(rec.time, 'time');
  const dispatched = checkInt(rec.dispatchedThrough, 'dispatchedThrough');
  if (dispatched > seq) throw badInput(`dispatchedThrough ${dispatched} is above seq ${seq}`);
  if (typeof rec.iri !== 'string' || rec.iri.length === 0) throw badInput('the actor IRI must be a non-empty string');
  w.text16(rec.iri, MAX_IRI_BYTES, 'IRI');
  let flags = 0;
  let kind: number;
  if (rec.kind === 'macrostep') {
    kind = JournalKind.macrostep;
    w.text16(rec.messageId, MAX_MESSAGE_ID_BYTES, 'message id');
    w.json(rec.event, 'event');
    if (rec.state !== undefined) {
      flags |= FLAG_STATE;
      w.json(rec.state, 'state');
    }
    if (rec.sends.length > MAX_SENDS)
      throw badInput(`${rec.sends.length} sends; one macrostep makes at most ${MAX_SENDS}`);
    w.u32(rec.sends.length);
    for (let i = 0; i < rec.sends.length; i++) w.json(rec.sends[i], `send ${i}`);
  } else if (rec.kind === 'snapshot') {
    kind = JournalKind.snapshot;
    w.json(rec.state, 'state');
    w.u32(rec.dedup.length);
    for (const id of rec.dedup) w.text16(id, MAX_MESSAGE_ID_BYTES, 'dedup id');
    w.u32(rec.pending.length);
    for (const p of rec.pending) {
      w.u64(checkInt(p.seq, 'pending seq', 1));
      w.u32(checkInt(p.index, 'pending index'));
      w.json(p.send, 'pending send');
    }
  } else {
    throw badInput(`kind ${String((rec as { kind?: unknown }).kind)} is neither macrostep nor snapshot`);
  }
  const out = w.view();
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
  const { dv, end } = checkedHeader(bytes);
  const r = new Reader(bytes, JOURNAL_HEADER_SIZE, end);
  const iri = r.text(r.u16('IRI length'), MAX_IRI_BYTES, 'IRI');
  if (iri.length === 0) throw refuse('iri', 'the actor IRI is empty', JOURNAL_HEADER_SIZE);
  return {
    kind: dv.getUint8(4) === JournalKind.macrostep ? 'macrostep' : 'snapshot',
    iri,
    seq: Number(dv.getBigUint64(8, true)),
  };
}
