/**
 * Reads of the event store: one stream by version, the whole log (`$all`) by position,
 * and records by position, from the archive and the log. Reads see what is applied only
 * (up to the indexes' last position) and retry once when a compaction moved records from
 * under them.
 */
import { isPlexusError } from '../core/errors.js';
import type { FileLog } from '../storage/file-log.js';
import type { LogRecord, LogStorage } from '../storage/types.js';
import type { ArchiveGen } from './archive.js';
import { ChronactaCode, chronactaError, fromStorage } from './errors.js';
import type { StoreState as State, StreamState } from './state.js';
import type { StoreObserver } from './store.js';
import { corrupt, type Decoded, decodeRecord, toRecorded } from './store-log.js';
import type { ReadAllOptions, ReadAllResult, ReadStreamOptions, ReadStreamResult, RecordedEvent } from './types.js';
import { checkBig, checkCount, checkDirection, checkStream, checkTypes } from './validate.js';

/** Records a filtered read looks at per call, at most. */
const SCAN_BUDGET = 4096;
/** Records fetched from the log per read call. */
export const CHUNK = 512;
/**
 * A read stops once the data and metadata of its events reach this (it always returns at
 * least one event), so a response and a subscription page stay bounded in bytes.
 */
export const READ_BYTE_BUDGET = 4 * 1024 * 1024;

/** What the reads use of the store. */
export interface StoreReaderDeps {
  readonly state: State;
  readonly log: LogStorage;
  /** The archive generation readers use now (compaction replaces it). */
  readonly archive: () => ArchiveGen;
  readonly observer?: StoreObserver | undefined;
}

export class StoreReader {
  private readonly state: State;
  private readonly log: LogStorage;
  private readonly opts: { readonly observer?: StoreObserver | undefined };

  constructor(private readonly deps: StoreReaderDeps) {
    this.state = deps.state;
    this.log = deps.log;
    this.opts = { observer: deps.observer };
  }

  private get archive(): ArchiveGen {
    return this.deps.archive();
  }

  /** The first version of `s` recorded at or after `since` (binary search over its live versions). */
  async firstVersionSince(s: StreamState, since: number): Promise<number> {
    let lo = Math.max(s.truncateBefore, s.base);
    let hi = s.lastVersion + 1;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      const p = this.state.positionOf(s, mid);
      const rec = p === 0 ? undefined : (await this.readPositions([p]))[0];
      if (!rec || rec.entry.recordedMs < since) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  async readStream(stream: string, opts: ReadStreamOptions = {}): Promise<ReadStreamResult> {
    const started = performance.now();
    const name = checkStream(stream, { system: true });
    const direction = checkDirection(opts.direction);
    const from = checkBig(opts.fromVersion, 'fromVersion');
    const max = checkCount(opts.maxCount);
    const types = checkTypes(opts.types);
    const s = this.state.streams.get(name);
    if (s?.deleted === 'hard') {
      throw chronactaError(ChronactaCode.STREAM_DELETED, `stream "${name}" was deleted hard (tombstoned)`, {
        stream: name,
      });
    }
    if (!s || s.lastVersion < 0) {
      return { stream: name, events: [], lastVersion: -1n, nextVersion: undefined, end: true, deleted: false };
    }
    const low = Math.max(s.truncateBefore, s.base);
    const last = s.lastVersion;
    const step = direction === 'forwards' ? 1 : -1;
    const events: RecordedEvent[] = [];
    let v = direction === 'forwards' ? Math.max(from ?? 0, low) : Math.min(from ?? last, last);
    let scanned = 0;
    const inRange = () => (direction === 'forwards' ? v <= last : v >= low);
    let bytes = 0;
    while (inRange() && events.length < max && bytes < READ_BYTE_BUDGET && scanned < SCAN_BUDGET) {
      const want = types ? CHUNK : Math.min(CHUNK, max - events.length);
      const versions: number[] = [];
      const positions: number[] = [];
      for (; inRange() && versions.length < want; v += step) {
        const p = this.state.positionOf(s, v);
        if (p === 0) continue;
        versions.push(v);
        positions.push(p);
      }
      const recs = await this.readPositions(positions, READ_BYTE_BUDGET - bytes);
      // Where to go on: after the chunk, or at the first version not taken.
      if (recs.length < versions.length) v = versions[recs.length] as number;
      for (let i = 0; i < recs.length; i++) {
        if (events.length === max || bytes >= READ_BYTE_BUDGET) {
          v = versions[i] as number;
          break;
        }
        scanned++;
        const r = recs[i];
        if (!r || !this.state.visible(r.entry)) continue;
        if (types && !types.has(r.entry.type)) continue;
        events.push(toRecorded(r.entry, r.batchId));
        bytes += r.entry.data.length + r.entry.metadata.length;
      }
    }
    // A soft delete (or a truncation) can land while the read runs: drop what it removed.
    const kept = events.filter((e) => Number(e.version) >= s.truncateBefore && s.deleted !== 'hard');
    const end = !inRange();
    this.opts.observer?.read?.('stream', kept.length, (performance.now() - started) / 1000);
    return {
      stream: name,
      events: kept,
      lastVersion: BigInt(last),
      nextVersion: end ? undefined : BigInt(v),
      end,
      deleted: s.deleted === 'soft',
    };
  }

  async readAll(opts: ReadAllOptions = {}): Promise<ReadAllResult> {
    const started = performance.now();
    const direction = checkDirection(opts.direction);
    const from = checkBig(opts.fromPosition, 'fromPosition');
    const max = checkCount(opts.maxCount);
    const types = checkTypes(opts.types);
    if (opts.streamPrefix !== undefined && typeof opts.streamPrefix !== 'string') {
      throw chronactaError(ChronactaCode.BAD_INPUT, 'streamPrefix must be a string');
    }
    const prefix = opts.streamPrefix ?? '';
    const last = this.state.last;
    const events: RecordedEvent[] = [];
    let scanned = 0;
    let p = direction === 'forwards' ? Math.max(from ?? 1, 1) : Math.min(from ?? last, last);
    const inRange = () => (direction === 'forwards' ? p <= last : p >= 1);
    let bytes = 0;
    while (inRange() && events.length < max && bytes < READ_BYTE_BUDGET && scanned < SCAN_BUDGET) {
      const want = Math.min(CHUNK, types || prefix ? CHUNK : max - events.length);
      const recs = await this.readRange(p, direction, direction === 'forwards' ? last : 1, want);
      if (recs.length === 0) {
        p = direction === 'forwards' ? last + 1 : 0;
        break;
      }
      let stopped = false;
      for (const r of recs) {
        const e = r.entry;
        if (events.length === max || bytes >= READ_BYTE_BUDGET) {
          p = e.position;
          stopped = true;
          break;
        }
        scanned++;
        p = direction === 'forwards' ? e.position + 1 : e.position - 1;
        if (!this.state.visible(e)) continue;
        if (prefix && !e.stream.startsWith(prefix)) continue;
        if (types && !types.has(e.type)) continue;
        events.push(toRecorded(e, r.batchId));
        bytes += e.data.length + e.metadata.length;
      }
      if (stopped) break;
    }
    const end = !inRange();
    this.opts.observer?.read?.('all', events.length, (performance.now() - started) / 1000);
    return {
      events,
      nextPosition: BigInt(direction === 'forwards' ? p : Math.max(p, 0)),
      end,
      lastPosition: BigInt(last),
    };
  }

  /**
   * Records from global position `from` in `direction` up to `bound` (inclusive), at most
   * `max`, from the archive and the log. Retries once a compaction moved records under it.
   */
  private async readRange(
    from: number,
    direction: 'forwards' | 'backwards',
    bound: number,
    max: number,
  ): Promise<Decoded[]> {
    for (let attempt = 0; ; attempt++) {
      const arc = this.archive.acquire();
      try {
        const recs: LogRecord[] = [];
        if (direction === 'forwards') {
          if (from < arc.cutoff) recs.push(...(await arc.readUp(from, Math.min(bound, arc.cutoff - 1), max)));
          const start = Math.max(from, arc.cutoff);
          if (recs.length < max && start <= bound) {
            recs.push(
              ...(await this.log.read(BigInt(start), { maxCount: Math.min(max - recs.length, bound - start + 1) })),
            );
          }
        } else {
          if (from >= arc.cutoff) {
            const lo = Math.max(bound, arc.cutoff);
            recs.push(...(await this.log.readBackward(BigInt(from), { maxCount: Math.min(max, from - lo + 1) })));
          }
          const top = Math.min(from, arc.cutoff - 1);
          if (recs.length < max && top >= bound) recs.push(...(await arc.readDown(bound, top, max - recs.length)));
        }
        return recs.map(decodeRecord);
      } catch (e) {
        if (attempt < 3 && isPlexusError(e, 'PLX_STORAGE_COMPACTED')) continue;
        throw fromStorage(e, `reading from position ${from}`);
      } finally {
        arc.release();
      }
    }
  }

  /**
   * The records at global positions `ps` (ascending or descending), in that order, with
   * undefined where none is stored. Stops early, after at least one record, once the
   * payloads reach `byteBudget`: the result is then a prefix of `ps`.
   */
  private async readPositions(
    ps: readonly number[],
    byteBudget = Number.POSITIVE_INFINITY,
  ): Promise<(Decoded | undefined)[]> {
    for (let attempt = 0; ; attempt++) {
      const arc = this.archive.acquire();
      try {
        const out: (Decoded | undefined)[] = [];
        let bytes = 0;
        while (out.length < ps.length && (out.length === 0 || bytes < byteBudget)) {
          const i = out.length;
          const p = ps[i] as number;
          const archived = p < arc.cutoff;
          const k = archived ? arc.indexOf(p) : 0;
          if (archived && k < 0) {
            out.push(undefined);
            continue;
          }
          // A run of positions stored one after the other, in the order asked for.
          const step = ps[i + 1] === p - 1 ? -1 : 1;
          let n = 1;
          while (
            i + n < ps.length &&
            ps[i + n] === p + n * step &&
            (archived ? arc.globals[k + n * step] === p + n * step : p + n * step >= arc.cutoff)
          ) {
            n++;
          }
          const opts = { maxCount: n, maxBytes: Math.max(0, byteBudget - bytes) };
          let recs: LogRecord[];
          if (archived) {
            const log = arc.log as FileLog;
            recs = step > 0 ? await log.read(BigInt(k + 1), opts) : await log.readBackward(BigInt(k + 1), opts);
          } else {
            recs = step > 0 ? await this.log.read(BigInt(p), opts) : await this.log.readBackward(BigInt(p), opts);
          }
          if (recs.length === 0) {
            out.push(undefined);
            continue;
          }
          for (const r of recs) {
            const d = decodeRecord(r);
            if (d.entry.position !== ps[out.length]) throw corrupt('log', d.entry.position, 'not the record asked for');
            out.push(d);
            bytes += r.payload.length;
          }
        }
        return out;
      } catch (e) {
        if (attempt < 3 && isPlexusError(e, 'PLX_STORAGE_COMPACTED')) continue;
        throw fromStorage(e, 'reading events');
      } finally {
        arc.release();
      }
    }
  }
}
