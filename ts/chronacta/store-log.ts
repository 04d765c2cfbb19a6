/**
 * The event store's view of its log: a stored record decoded into its entry, an entry as
 * readers get it, replay of a log into the indexes, and the warnings logger used when the
 * caller gives none.
 */

import type { Entry } from '../codec/chronacta-record.js';
import type { PlexusError } from '../core/errors.js';
import type { LogRecord, LogStorage, StorageLogger } from '../storage/types.js';
import { ChronactaCode, chronactaError } from './errors.js';
import { bytesToUuid, decodeEntry } from './record.js';
import type { RecordedEvent } from './types.js';

export interface Decoded {
  readonly entry: Entry;
  readonly batchId: Uint8Array;
  readonly payload: Uint8Array;
}

export const stderrWarnings: StorageLogger = {
  warn(message, details) {
    process.stderr.write(`plexus chronacta: ${message}${details ? ` ${JSON.stringify(details, big)}` : ''}\n`);
  },
};

function big(_k: string, v: unknown): unknown {
  return typeof v === 'bigint' ? String(v) : v;
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export function toRecorded(e: Entry, batchId: Uint8Array): RecordedEvent {
  return {
    stream: e.stream,
    version: BigInt(e.version),
    position: BigInt(e.position),
    id: bytesToUuid(e.id),
    type: e.type,
    data: e.data,
    metadata: e.metadata,
    recordedMs: e.recordedMs,
    batchId: bytesToUuid(batchId),
  };
}

export function decodeRecord(r: LogRecord): Decoded {
  return decodePayload(r.payload, Number(r.position), r.batchId);
}

/** `decodeRecord` of a record given by its parts (`position` only names it in errors). */
export function decodePayload(payload: Uint8Array, position: number, batchId: Uint8Array): Decoded {
  let entry: Entry;
  try {
    entry = decodeEntry(payload);
  } catch (e) {
    throw corrupt('log', position, (e as Error).message);
  }
  return { entry, batchId, payload };
}

export function corrupt(where: string, position: number, what: string): PlexusError {
  return chronactaError(ChronactaCode.CORRUPT, `the ${where} is damaged at position ${position}: ${what}`, {
    position,
  });
}

/** Applies `fn` to every record of `log` from `from`, in order. */
export async function replay(log: LogStorage, from: number, fn: (d: Decoded) => void): Promise<void> {
  if (log.last < BigInt(from)) return;
  let p = BigInt(Math.max(from, Number(log.first) || 1));
  for (;;) {
    const recs = await log.read(p, { maxCount: 4096 });
    if (recs.length === 0) return;
    for (const r of recs) fn(decodeRecord(r));
    p = (recs[recs.length - 1] as LogRecord).position + 1n;
  }
}
