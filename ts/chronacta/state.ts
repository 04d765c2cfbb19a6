/**
 * The in-memory indexes of the store, rebuilt from the log on open: for every stream its
 * last version, what is deleted or truncated and the global position of each live
 * version; and the idempotency keys still within their time to live.
 *
 * `apply` is the one way they change: the write path applies the entries it appended once
 * they are durable, and open applies every entry of the archive and the log in position
 * order, so both end in the same state.
 */

import { type Entry, RecordKind } from '../codec/chronacta-record.js';
import { ChronactaCode, chronactaError } from './errors.js';
import { decodeStreamMeta, metaTarget } from './record.js';

export type DeletedState = 'none' | 'soft' | 'hard';

export interface StreamState {
  readonly name: string;
  /** Version of the last event ever written (-1: none). */
  lastVersion: number;
  /** Versions below this are gone (deleted or truncated). */
  truncateBefore: number;
  deleted: DeletedState;
  /** Version of `positions[0]`. */
  base: number;
  /** Global position of versions `base ...` (0 where a version has no record). */
  positions: number[];
}

/** What an expected-version check looks at. */
export interface StreamHead {
  readonly lastVersion: number;
  readonly deleted: DeletedState;
}

export const NO_STREAM: StreamHead = { lastVersion: -1, deleted: 'none' };

export interface KeyRecord {
  readonly key: string;
  readonly stream: string;
  readonly fingerprint: Uint8Array;
  readonly firstVersion: number;
  readonly count: number;
  readonly firstPosition: number;
  readonly batchId: Uint8Array;
  readonly recordedMs: number;
}

export class StoreState {
  readonly streams = new Map<string, StreamState>();
  /** In log order, so the oldest come first when expiring. */
  readonly keys = new Map<string, KeyRecord>();
  /** Highest position applied. */
  last = 0;
  /** Latest recorded time applied (recorded times never go backwards). */
  lastRecordedMs = 0;

  constructor(private readonly keyTtlMs: number) {}

  head(stream: string): StreamHead {
    const s = this.streams.get(stream);
    return s ? { lastVersion: s.lastVersion, deleted: s.deleted } : NO_STREAM;
  }

  private stream(name: string): StreamState {
    let s = this.streams.get(name);
    if (!s) {
      s = { name, lastVersion: -1, truncateBefore: 0, deleted: 'none', base: 0, positions: [] };
      this.streams.set(name, s);
    }
    return s;
  }

  /** True when a reader sees the entry (not deleted, truncated or redacted). */
  visible(e: Entry): boolean {
    if (e.kind === RecordKind.REDACTED) return false;
    if (e.kind === RecordKind.METADATA) return true;
    const s = this.streams.get(e.stream);
    if (!s) return true;
    return s.deleted !== 'hard' && e.version >= s.truncateBefore;
  }

  /** Applies one durable entry. `batchId` is the log batch it was written in. */
  apply(e: Entry, batchId: Uint8Array): void {
    if (e.kind === RecordKind.REDACTED) {
      const s = this.stream(e.stream);
      if (e.version + e.batchSize - 1 > s.lastVersion) s.lastVersion = e.version + e.batchSize - 1;
    } else {
      this.index(this.stream(e.stream), e);
      if (e.kind === RecordKind.EVENT) {
        const s = this.stream(e.stream);
        if (s.deleted === 'soft' && e.version >= s.truncateBefore) s.deleted = 'none';
      } else this.applyMeta(e);
    }
    if (e.idempotency) {
      this.keys.delete(e.idempotency.key);
      this.keys.set(e.idempotency.key, {
        key: e.idempotency.key,
        stream: e.stream,
        fingerprint: e.idempotency.fingerprint.slice(),
        firstVersion: e.version,
        count: e.batchSize,
        firstPosition: e.position,
        batchId: batchId.slice(),
        recordedMs: e.recordedMs,
      });
    }
    if (e.position > this.last) this.last = e.position;
    if (e.recordedMs > this.lastRecordedMs) this.lastRecordedMs = e.recordedMs;
  }

  /**
   * Applies the EVENT entries of one durable append without their objects: `count`
   * events of `stream` from `firstVersion` at `firstPosition`, the key (if any) on the
   * first. The same state as `apply` of each entry in order.
   */
  applyAppend(
    stream: string,
    firstVersion: number,
    firstPosition: number,
    count: number,
    recordedMs: number,
    batchId: Uint8Array,
    idempotency: { readonly key: string; readonly fingerprint: Uint8Array } | undefined,
  ): void {
    const s = this.stream(stream);
    for (let i = 0; i < count; i++) {
      const version = firstVersion + i;
      this.indexAt(s, version, firstPosition + i);
      if (s.deleted === 'soft' && version >= s.truncateBefore) s.deleted = 'none';
    }
    if (idempotency) {
      this.keys.delete(idempotency.key);
      this.keys.set(idempotency.key, {
        key: idempotency.key,
        stream,
        fingerprint: idempotency.fingerprint.slice(),
        firstVersion,
        count,
        firstPosition,
        batchId: batchId.slice(),
        recordedMs,
      });
    }
    const last = firstPosition + count - 1;
    if (last > this.last) this.last = last;
    if (recordedMs > this.lastRecordedMs) this.lastRecordedMs = recordedMs;
  }

  private index(s: StreamState, e: Entry): void {
    this.indexAt(s, e.version, e.position);
  }

  private indexAt(s: StreamState, version: number, position: number): void {
    if (s.positions.length === 0) {
      s.base = version;
      s.positions.push(position);
    } else {
      const at = version - s.base;
      if (at < s.positions.length) {
        throw chronactaError(
          ChronactaCode.CORRUPT,
          `stream "${s.name}" has version ${version} twice (positions ${s.positions[at]} and ${position})`,
          { stream: s.name, version, position },
        );
      }
      while (s.positions.length < at) s.positions.push(0);
      s.positions.push(position);
    }
    if (version > s.lastVersion) s.lastVersion = version;
  }

  private applyMeta(e: Entry): void {
    const m = decodeStreamMeta(e);
    const s = this.stream(metaTarget(e));
    if (m.lastVersion > s.lastVersion) s.lastVersion = m.lastVersion;
    s.deleted = m.deleted;
    if (m.truncateBefore > s.truncateBefore) s.truncateBefore = m.truncateBefore;
    if (s.deleted === 'hard') {
      s.positions = [];
      s.base = s.lastVersion + 1;
    } else if (s.truncateBefore > s.base) {
      const drop = Math.min(s.truncateBefore - s.base, s.positions.length);
      s.positions.splice(0, drop);
      s.base = s.truncateBefore;
    }
  }

  /** Forgets idempotency keys recorded before `now - ttl`. */
  expireKeys(now: number): void {
    const limit = now - this.keyTtlMs;
    for (const [k, r] of this.keys) {
      if (r.recordedMs >= limit) break;
      this.keys.delete(k);
    }
  }

  /** Whether a key recorded at `recordedMs` is still kept at `now`. */
  keyAlive(recordedMs: number, now: number): boolean {
    return recordedMs >= now - this.keyTtlMs;
  }

  /** Global position of `version` of `stream`, 0 when it has none (gone or never written). */
  positionOf(s: StreamState, version: number): number {
    if (version < s.truncateBefore || version < s.base) return 0;
    return s.positions[version - s.base] ?? 0;
  }
}
