/**
 * Conversions between the runtime's journal entries (types.ts) and the journal record
 * codec (ts/codec/journal-record.ts), with the shape checks a record read back must pass.
 */
import {
  JournalCode,
  type JournalRecord,
  type JsonValue,
  type MacrostepRecord,
  type SnapshotRecord,
} from '../codec/journal-record.js';
import { PlexusError } from '../core/errors.js';
import type { ActorEvent, MacrostepEntry, PendingEntry, Send, SnapshotEntry } from './types.js';

function shapeError(what: string, iri: string, seq: number): PlexusError {
  return new PlexusError(JournalCode.badRecord, `journal record of ${iri} at seq ${seq}: ${what}`, {
    reason: 'shape',
    iri,
    seq,
  });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function optString(o: Record<string, unknown>, key: string): boolean {
  return o[key] === undefined || typeof o[key] === 'string';
}

/** An event read back from a record, or undefined when it does not have the shape of one. */
export function eventOf(v: unknown): ActorEvent | undefined {
  if (!isObject(v) || typeof v.name !== 'string') return undefined;
  if (!optString(v, 'sendid') || !optString(v, 'origin') || !optString(v, 'origintype')) return undefined;
  if (v.originverified !== undefined && typeof v.originverified !== 'boolean') return undefined;
  return v as unknown as ActorEvent;
}

/** A send read back from a record (or returned by a chart), or undefined when malformed. */
export function sendOf(v: unknown): Send | undefined {
  if (!isObject(v) || typeof v.event !== 'string' || v.event.length === 0) return undefined;
  if (!optString(v, 'id') || !optString(v, 'type') || !optString(v, 'target')) return undefined;
  if (v.delay !== undefined && (typeof v.delay !== 'number' || !Number.isFinite(v.delay) || v.delay < 0)) {
    return undefined;
  }
  return v as unknown as Send;
}

/**
 * An event or send as a record's JSON value. The record is encoded straight away with
 * JSON.stringify, which leaves out members whose value is undefined, so no copy is made.
 */
function asJson(o: object): JsonValue {
  return o as unknown as JsonValue;
}

export function recordOfMacrostep(iri: string, e: MacrostepEntry): MacrostepRecord {
  const rec: MacrostepRecord = {
    kind: 'macrostep',
    iri,
    seq: e.seq,
    time: e.time,
    dispatchedThrough: e.dispatchedThrough,
    messageId: e.messageId,
    event: asJson(e.event),
    sends: e.sends as unknown as JsonValue[],
  };
  return e.state === undefined ? rec : { ...rec, state: e.state };
}

export function recordOfSnapshot(iri: string, e: SnapshotEntry): SnapshotRecord {
  return {
    kind: 'snapshot',
    iri,
    seq: e.seq,
    time: e.time,
    dispatchedThrough: e.dispatchedThrough,
    state: e.state,
    dedup: e.dedup,
    pending: e.pending.map((p) => ({ seq: p.seq, index: p.index, send: asJson(p.send) })),
  };
}

export function macrostepOfRecord(r: MacrostepRecord): MacrostepEntry {
  const event = eventOf(r.event);
  if (event === undefined) throw shapeError('the event has no name', r.iri, r.seq);
  const sends: Send[] = [];
  for (const s of r.sends) {
    const send = sendOf(s);
    if (send === undefined) throw shapeError('a send is malformed', r.iri, r.seq);
    sends.push(send);
  }
  const e: MacrostepEntry = {
    seq: r.seq,
    time: r.time,
    dispatchedThrough: r.dispatchedThrough,
    messageId: r.messageId,
    event,
    sends,
  };
  return r.state === undefined ? e : { ...e, state: r.state };
}

export function snapshotOfRecord(r: SnapshotRecord): SnapshotEntry {
  const pending: PendingEntry[] = [];
  for (const p of r.pending) {
    const send = sendOf(p.send);
    if (send === undefined) throw shapeError('a pending send is malformed', r.iri, r.seq);
    pending.push({ seq: p.seq, index: p.index, send });
  }
  return {
    seq: r.seq,
    time: r.time,
    dispatchedThrough: r.dispatchedThrough,
    state: r.state,
    dedup: r.dedup,
    pending,
  };
}

export type { JournalRecord };
