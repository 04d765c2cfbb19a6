/**
 * The Chronacta event store on one node.
 *
 * Every change runs one pipeline: check it against the state the store will have once
 * every change already accepted is durable, encode it as entries (record.ts), append them
 * to the log as one batch (ts/storage: atomic, group-commit fsync, compare-and-set on the
 * position the store expects), and, once durable, apply the same entries to the in-memory
 * indexes (state.ts) and hand them to live subscribers. Open rebuilds the indexes by
 * applying every record of the archive and the log in position order.
 *
 * Readers see acknowledged changes only: reads and subscriptions stop at `lastPosition`,
 * which moves past an append only once it is durable and applied, in log order.
 */
import { randomUUID } from 'node:crypto';
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { Condition, Watermark } from '../core/watermark.js';
import { type FileLog, openLog } from '../storage/file-log.js';
import { RECORD_HEADER_BYTES as LOG_RECORD_GAP } from '../storage/format.js';
import { isSegmented, logSegments } from '../storage/segmented.js';
import type { FsyncMode, LogRecord, LogStorage, SegmentInfo, StorageLogger } from '../storage/types.js';
import { ArchiveGen, genDirName, readPointer, removeOtherGenerations, writePointer } from './archive.js';
import {
  checkTable,
  EncodedBatch,
  type EventTable,
  encodeTable,
  fingerprintTable,
  randomUuidBytes,
  tableOf,
} from './batch.js';
import { type AppliedBatch, openClusterLog, type ReplicatedLog, type ReplicatedLogOptions } from './cluster-log.js';
import { ChronactaCode, chronactaError, fromStorage } from './errors.js';
import { HaErrorCode, haError } from './ha-errors.js';
import { type PreparedDataDir, prepareDataDir } from './layout.js';
import {
  bytesToUuid,
  decodeEntry,
  type Entry,
  encodeEntry,
  encodeStreamMeta,
  followsInAppend,
  RecordKind,
  redact,
  type StreamMeta,
  streamBytesOf,
  uuidToBytes,
} from './record.js';
import { type StoreState as State, StoreState, type StreamHead, type StreamState } from './state.js';
import type {
  AppendOptions,
  AppendResult,
  CompactionReport,
  DeleteOptions,
  DeleteResult,
  EventData,
  ExpectedVersion,
  ReadAllOptions,
  ReadAllResult,
  ReadStreamOptions,
  ReadStreamResult,
  RecordedEvent,
  TruncateOptions,
  TruncateResult,
} from './types.js';
import {
  checkBig,
  checkCount,
  checkDirection,
  checkExpectedVersion,
  checkKey,
  checkStream,
  checkTypes,
} from './validate.js';
import type { AppendReply, AppendWire } from './wire.js';

const utf8 = new TextEncoder();

/** Hooks for metrics; every one is optional. */
export interface StoreObserver {
  appended?(events: number, bytes: number, seconds: number): void;
  appendFailed?(code: string): void;
  read?(kind: 'stream' | 'all', events: number, seconds: number): void;
  synced?(): void;
}

export interface StoreOptions {
  /** The data directory (made when missing). */
  readonly dataDir: string;
  /** fsync mode of the log (default `batch`: group commit). */
  readonly fsync?: FsyncMode;
  /** Segment size of the log (default 64 MiB); compaction works on closed segments. */
  readonly segmentBytes?: number;
  /** How long idempotency keys are kept (default 24 hours), measured by recorded time. */
  readonly idempotencyTtlMs?: number;
  /** Milliseconds since the Unix epoch (default Date.now); recorded times never go backwards. */
  readonly clock?: () => number;
  readonly logger?: StorageLogger;
  readonly observer?: StoreObserver;
  /**
   * Cluster mode: the store's log is a replicated log (docs/chronacta-ha.md) kept in
   * `DIR/replica/`, opened with these options. Only the leader takes writes; every member
   * applies committed records through the same path (`onApply`).
   */
  readonly replication?: Omit<ReplicatedLogOptions, 'dir'>;
}

export const DEFAULT_IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;
/** Records a filtered read looks at per call, at most. */
const SCAN_BUDGET = 4096;
/** Records fetched from the log per read call. */
const CHUNK = 512;
/**
 * A read stops once the data and metadata of its events reach this (it always returns at
 * least one event), so a response and a subscription page stay bounded in bytes.
 */
export const READ_BYTE_BUDGET = 4 * 1024 * 1024;

interface Overlay {
  head: StreamHead;
  refs: number;
  readonly gen: number;
}

interface PendingKey {
  readonly stream: string;
  readonly fingerprint: Uint8Array;
  readonly settled: Promise<unknown>;
}

interface Decoded {
  readonly entry: Entry;
  readonly batchId: Uint8Array;
  readonly payload: Uint8Array;
}

const stderrWarnings: StorageLogger = {
  warn(message, details) {
    process.stderr.write(`plexus chronacta: ${message}${details ? ` ${JSON.stringify(details, big)}` : ''}\n`);
  },
};

function big(_k: string, v: unknown): unknown {
  return typeof v === 'bigint' ? String(v) : v;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
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

function describeExpected(v: ExpectedVersion): string {
  return typeof v === 'bigint' ? `version ${v}` : v;
}

/** Whether a stream at `head` meets `expected` (a hard-deleted stream is refused before this). */
export function meetsExpectation(head: StreamHead, expected: ExpectedVersion): boolean {
  switch (expected) {
    case 'any':
      return true;
    case 'no_stream':
      return head.lastVersion < 0 || head.deleted === 'soft';
    case 'exists':
      return head.lastVersion >= 0 && head.deleted === 'none';
    default:
      return BigInt(head.lastVersion) === expected;
  }
}

export class EventStore {
  private readonly state: State;
  private readonly overlay = new Map<string, Overlay>();
  private readonly pendingKeys = new Map<string, PendingKey>();
  private readonly listeners = new Set<(ev: RecordedEvent, entry: Entry) => void>();
  /** Last position counting every accepted append, durable or not. */
  private pendingLast: number;
  /** Bumped when a failed append voids every change accepted after the last durable one. */
  private gen = 0;
  private lastAssignedMs: number;
  private archive: ArchiveGen;
  private compacting: Promise<CompactionReport> | undefined;
  private closing: Promise<void> | undefined;
  private failure: PlexusError | undefined;
  /** `lastPosition`, raised as records are applied: what reads wait on instead of polling. */
  private readonly applied: Watermark;
  /** Notified when this store fails or closes (a leader's wait for readiness re-checks then). */
  private readonly changed = new Condition();
  private readonly clock: () => number;
  /** Cluster mode: the replicated log (the same object as `log`). */
  private replicated: ReplicatedLog | undefined;
  private unhook: (() => void) | undefined;

  /** Cluster mode: the replicated log under this store; undefined for a single-node store. */
  get replicatedLog(): ReplicatedLog | undefined {
    return this.replicated;
  }

  private constructor(
    readonly prepared: PreparedDataDir,
    private readonly log: LogStorage,
    archive: ArchiveGen,
    state: State,
    private readonly opts: StoreOptions,
  ) {
    this.state = state;
    this.archive = archive;
    this.pendingLast = state.last;
    this.applied = new Watermark(BigInt(state.last));
    this.lastAssignedMs = state.lastRecordedMs;
    this.clock = opts.clock ?? Date.now;
  }

  /** Opens (or makes) the store in `opts.dataDir`, rebuilding its indexes from the archive and the log. */
  static async open(opts: StoreOptions): Promise<EventStore> {
    const prepared = await prepareDataDir(opts.dataDir);
    if (!opts.replication && prepared.cluster.mode === 'cluster') {
      throw chronactaError(
        ChronactaCode.BAD_DATA_DIR,
        `${prepared.paths.clusterFile}: mode is "cluster" but the store was opened standalone; serve it with --cluster`,
        { file: prepared.paths.clusterFile },
      );
    }
    const logger = opts.logger ?? stderrWarnings;
    const ttl = opts.idempotencyTtlMs ?? DEFAULT_IDEMPOTENCY_TTL_MS;
    if (!Number.isFinite(ttl) || ttl < 0) {
      throw chronactaError(ChronactaCode.BAD_INPUT, 'idempotencyTtlMs must be a number from 0');
    }
    const state = new StoreState(ttl);
    const pointer = await readPointer(prepared.paths.archive);
    await removeOtherGenerations(prepared.paths.archive, pointer.generation);
    let archiveLog: FileLog | undefined;
    let log: LogStorage | undefined;
    let replicated: ReplicatedLog | undefined;
    let unhook: (() => void) | undefined;
    const early: AppliedBatch[] = [];
    try {
      const globals: number[] = [];
      if (pointer.generation > 0) {
        archiveLog = await openLog(join(prepared.paths.archive, genDirName(pointer.generation)), {
          logger,
          fsync: opts.fsync ?? 'batch',
        });
        await replay(archiveLog, 1, (d) => {
          if (d.entry.position >= pointer.cutoff) throw corrupt('archive', d.entry.position, 'at or above the cutoff');
          if (globals.length > 0 && d.entry.position <= (globals[globals.length - 1] as number)) {
            throw corrupt('archive', d.entry.position, 'out of order');
          }
          globals.push(d.entry.position);
          state.apply(d.entry, d.batchId);
        });
      }
      if (opts.replication) {
        replicated = await openClusterLog({
          ...(opts.segmentBytes === undefined ? {} : { segmentBytes: opts.segmentBytes }),
          logger,
          ...opts.replication,
          dir: join(prepared.paths.root, 'replica'),
        });
        // Batches committed while the indexes are rebuilt wait here; replay skips none of them.
        unhook = replicated.onApply((b) => early.push(b));
        log = replicated;
      } else {
        log = await openLog(prepared.paths.log, {
          logger,
          fsync: opts.fsync ?? 'batch',
          ...(opts.segmentBytes === undefined ? {} : { segmentBytes: opts.segmentBytes }),
          ...(opts.observer?.synced ? { onSync: () => opts.observer?.synced?.() } : {}),
        });
      }
      const first = Number(log.first);
      if (first > pointer.cutoff) {
        throw chronactaError(
          ChronactaCode.CORRUPT,
          `the log starts at position ${first} but the archive ends below ${pointer.cutoff}: records are missing`,
          { first, cutoff: pointer.cutoff },
        );
      }
      const from = Math.max(pointer.cutoff, 1);
      let expect = from;
      await replay(log, from, (d) => {
        if (d.entry.position !== expect) throw corrupt('log', expect, `the record names position ${d.entry.position}`);
        expect++;
        state.apply(d.entry, d.batchId);
      });
      if (Number(log.last) >= from && state.last !== Number(log.last)) {
        throw corrupt('log', Number(log.last), 'the indexes end elsewhere than the log');
      }
      if (state.last < Number(log.last)) state.last = Number(log.last);
      state.expireKeys(opts.clock?.() ?? Date.now());
      const store = new EventStore(prepared, log, new ArchiveGen(pointer, archiveLog, globals), state, opts);
      if (replicated) {
        store.replicated = replicated;
        unhook?.();
        unhook = undefined;
        const offApply = replicated.onApply((b) => store.applyReplicated(b));
        // Every member compacts its own files once the members agreed a cutoff through Raft.
        const offAgreed = replicated.onCompactionAgreed(() => {
          if (store.closing) return;
          store.compactToAgreed().catch((e: unknown) => {
            if (!store.closing)
              opts.logger?.warn('chronacta: compaction to the agreed cutoff failed', { error: String(e) });
          });
        });
        store.unhook = () => {
          offApply();
          offAgreed();
        };
        for (const b of early) store.applyReplicated(b);
      }
      // A compaction that stopped after switching archives: drop what the archive now holds.
      if (first > 0 && first < pointer.cutoff) await log.compactBefore(BigInt(pointer.cutoff));
      return store;
    } catch (e) {
      unhook?.();
      await archiveLog?.close().catch(() => {});
      await log?.close().catch(() => {});
      throw fromStorage(e, `opening the store in ${opts.dataDir}`);
    }
  }

  // ------------------------------------------------------------------ positions and state

  /** Position of the last durable, applied record (0: none). */
  get lastPosition(): bigint {
    return BigInt(this.state.last);
  }

  get dataDir(): string {
    return this.prepared.paths.root;
  }

  /** A stream's last version and deletion state as readers see them now. */
  streamInfo(stream: string): { lastVersion: bigint; deleted: 'none' | 'soft' | 'hard'; truncateBefore: bigint } {
    const s = this.state.streams.get(checkStream(stream, { system: true }));
    return s
      ? { lastVersion: BigInt(s.lastVersion), deleted: s.deleted, truncateBefore: BigInt(s.truncateBefore) }
      : { lastVersion: -1n, deleted: 'none', truncateBefore: 0n };
  }

  /**
   * Healthy when open and no write has failed in a way that needs a reopen. Standalone, a
   * failed append that left the log taking writes (too many open files, a full disk) counts
   * only while the log refuses writes: readiness re-checks the disk itself, so it recovers
   * once the cause has gone.
   */
  get healthy(): { ok: boolean; reason?: string } {
    if (this.closing) return { ok: false, reason: 'closed' };
    if (this.failure && this.replicated) return { ok: false, reason: this.failure.message };
    const refusal = this.log.refusal;
    if (refusal) return { ok: false, reason: refusal.message };
    const f = this.replicated?.status().failure;
    if (f) return { ok: false, reason: f };
    return { ok: true };
  }

  /** Called with every durable, visible entry in position order; returns the unsubscribe. */
  onCommit(listener: (ev: RecordedEvent, entry: Entry) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The head an expected-version check sees: counting every accepted change. */
  private head(stream: string): StreamHead {
    const o = this.overlay.get(stream);
    return o && o.gen === this.gen ? o.head : this.state.head(stream);
  }

  private checkOpen(): void {
    if (this.closing) throw chronactaError(ChronactaCode.UNAVAILABLE, 'the store is closed');
  }

  /** Cluster mode: a member that is not the leader refuses changes, naming the leader. */
  private checkWritable(): void {
    this.checkOpen();
    const r = this.replicated;
    if (!r) return;
    if (this.failure) throw this.failure;
    if (r.role === 'leader') return;
    const s = r.status();
    const leader = s.leader;
    const addr = leader === 0 ? undefined : s.leaderAddress;
    throw haError(
      HaErrorCode.NOT_LEADER,
      `member ${s.id} is a ${s.role} and does not take writes: ${
        leader === 0 ? 'no leader is known yet; retry shortly' : `send it to the leader, member ${leader} at ${addr}`
      }`,
      { leader, leaderAddress: addr, term: s.term },
    );
  }

  /**
   * Cluster mode: waits (up to the log's timeout) until this leader has applied every entry
   * of earlier terms, so that expected versions and idempotency keys are checked against them.
   */
  private async leaderReady(r: ReplicatedLog): Promise<void> {
    const end = Date.now() + (this.opts.replication?.timeoutMs ?? 10_000);
    for (;;) {
      this.checkWritable();
      if (r.acceptingWrites || Date.now() > end) return;
      // Wakes when the log's readiness or this store's state changes, or at the deadline.
      const timeoutMs = end - Date.now() + 1;
      const ac = new AbortController();
      try {
        await Promise.race([
          r.readinessChanged({ timeoutMs, signal: ac.signal }),
          this.changed.wait({ timeoutMs, signal: ac.signal }),
        ]);
      } finally {
        ac.abort();
      }
    }
  }

  /** Cluster mode: this member's replication state (undefined when standalone). */
  clusterStatus(): ReturnType<ReplicatedLog['status']> | undefined {
    return this.replicated?.status();
  }

  /**
   * Cluster mode: the one apply path. Every member, the leader included, applies each
   * committed batch here once it is in its local log, in position order; the leader's own
   * appends resolve only after this ran for them.
   */
  private applyReplicated(batch: AppliedBatch): void {
    if (this.failure || this.closing) return;
    const payloads = batch.payloads;
    const first = Number(batch.first);
    for (let i = 0; i < payloads.length; i++) {
      const payload = payloads[i] as Uint8Array;
      let d: Decoded;
      try {
        d = decodePayload(payload, first + i, batch.batchId);
      } catch (e) {
        this.failure = fromStorage(e, 'applying a replicated record');
        this.changed.notify();
        this.published();
        return;
      }
      const p = d.entry.position;
      if (p <= this.state.last) continue; // already applied while the indexes were rebuilt
      if (p !== this.state.last + 1) {
        this.failure = corrupt('replicated log', p, `expected position ${this.state.last + 1}`);
        this.changed.notify();
        this.published();
        return;
      }
      const e = d.entry;
      if (
        e.kind === RecordKind.EVENT &&
        e.indexInBatch === 0 &&
        e.batchSize > 1 &&
        i + e.batchSize <= payloads.length &&
        this.listeners.size === 0
      ) {
        // A whole append: the events after its first are checked from their headers and
        // indexed as one run, without decoding their strings.
        const name = streamBytesOf(payload);
        let n = 1;
        while (n < e.batchSize && followsInAppend(payloads[i + n] as Uint8Array, e, name, n)) n++;
        if (n === e.batchSize) {
          this.state.applyAppend(e.stream, e.version, p, n, e.recordedMs, d.batchId, e.idempotency);
          if (e.recordedMs > this.lastAssignedMs) this.lastAssignedMs = e.recordedMs;
          i += n - 1;
          continue;
        }
      }
      this.state.apply(d.entry, d.batchId);
      if (d.entry.recordedMs > this.lastAssignedMs) this.lastAssignedMs = d.entry.recordedMs;
      if (this.listeners.size > 0) {
        const ev = toRecorded(d.entry, d.batchId);
        for (const l of this.listeners) {
          try {
            l(ev, d.entry);
          } catch {
            // A listener's failure is its own; the commit stands.
          }
        }
      }
    }
    if (this.pendingLast < this.state.last) this.pendingLast = this.state.last;
    this.published();
  }

  /** Releases the waiters for positions applied by now. */
  private published(): void {
    this.applied.advance(BigInt(this.state.last));
  }

  /**
   * Resolves `true` once `lastPosition` is at least `position` (at once if it is), `false`
   * when `timeoutMs` passes first.
   */
  whenApplied(position: bigint, timeoutMs: number): Promise<boolean> {
    return this.applied.wait(position, { timeoutMs });
  }

  // ------------------------------------------------------------------ appends

  async append(stream: string, events: readonly EventData[], opts: AppendOptions = {}): Promise<AppendResult> {
    this.checkWritable();
    const name = checkStream(stream);
    const table = tableOf(events);
    const expected = checkExpectedVersion(opts?.expectedVersion);
    const key = checkKey(opts?.idempotencyKey);
    const r = await this.appendTable(name, table, expected, key);
    return {
      stream: name,
      firstVersion: BigInt(r.firstVersion),
      lastVersion: BigInt(r.lastVersion),
      firstPosition: BigInt(r.firstPosition),
      lastPosition: BigInt(r.lastPosition),
      batchId: bytesToUuid(r.batchId),
      duplicate: r.duplicate,
    };
  }

  /**
   * An append as the gRPC server decodes it (wire.ts): the events stay in the request's
   * bytes until the record encoder copies them into the log's batch. Same checks, same
   * result as `append`, with numbers and the batch id's bytes.
   */
  appendWire(w: AppendWire): Promise<AppendReply> {
    this.checkWritable();
    const name = checkStream(w.stream);
    const key = checkKey(w.key);
    return this.appendTable(name, w, w.expected, key);
  }

  private async appendTable(
    name: string,
    table: EventTable,
    expected: ExpectedVersion,
    key: string | undefined,
  ): Promise<AppendReply> {
    // A leader that accepts writes goes on without a turn of the event loop.
    if (this.replicated && !this.replicated.acceptingWrites) await this.leaderReady(this.replicated);
    const bodyBytes = checkTable(table);
    const streamBytes = utf8.encode(name);
    const fp = key === undefined ? undefined : fingerprintTable(streamBytes, table);
    const count = table.count;
    if (key !== undefined && fp !== undefined) {
      for (;;) {
        this.state.expireKeys(this.clock());
        const done = this.state.keys.get(key);
        if (done) {
          if (done.stream !== name || !sameBytes(done.fingerprint, fp)) throw idempotencyConflict(key, done.stream);
          return {
            firstVersion: done.firstVersion,
            lastVersion: done.firstVersion + done.count - 1,
            firstPosition: done.firstPosition,
            lastPosition: done.firstPosition + done.count - 1,
            batchId: done.batchId,
            duplicate: true,
          };
        }
        const pending = this.pendingKeys.get(key);
        if (!pending) break;
        if (pending.stream !== name || !sameBytes(pending.fingerprint, fp))
          throw idempotencyConflict(key, pending.stream);
        await pending.settled;
        this.checkOpen();
      }
    }
    const head = this.head(name);
    this.checkExpected(name, head, expected);
    const first = this.pendingLast + 1;
    const firstVersion = head.lastVersion + 1;
    const recordedMs = this.recordedNow();
    const encoded = encodeTable(
      table,
      {
        stream: streamBytes,
        firstPosition: first,
        firstVersion,
        recordedMs,
        ...(key !== undefined && fp !== undefined ? { key: utf8.encode(key), fingerprint: fp } : {}),
      },
      bodyBytes,
      // Laid out as the log stores it, when the log takes such a batch: no copy on the way down.
      this.log.appendFramed ? LOG_RECORD_GAP : 0,
    );
    const heads = new Map<string, StreamHead>([[name, { lastVersion: head.lastVersion + count, deleted: 'none' }]]);
    const started = performance.now();
    const batchId = randomUuidBytes();
    const idem = key !== undefined && fp !== undefined ? { key, fingerprint: fp } : undefined;
    const done = this.submit(encoded, first, batchId, heads, () =>
      this.state.applyAppend(name, firstVersion, first, count, recordedMs, batchId, idem),
    );
    if (key !== undefined && fp !== undefined) {
      // Settles (never rejects) once the append is applied or failed; retries wait for it.
      const settled = done.then(
        () => this.pendingKeys.delete(key),
        () => this.pendingKeys.delete(key),
      );
      this.pendingKeys.set(key, { stream: name, fingerprint: fp, settled });
    }
    try {
      await done;
      this.opts.observer?.appended?.(count, encoded.payloadBytes, (performance.now() - started) / 1000);
    } catch (e) {
      const err = fromStorage(e, `appending to "${name}"`);
      this.opts.observer?.appendFailed?.(err.code);
      throw err;
    }
    return {
      firstVersion,
      lastVersion: head.lastVersion + count,
      firstPosition: first,
      lastPosition: first + count - 1,
      batchId,
      duplicate: false,
    };
  }

  private recordedNow(): number {
    const now = Math.max(Math.floor(this.clock()), this.lastAssignedMs);
    this.lastAssignedMs = now;
    return now;
  }

  private checkExpected(stream: string, head: StreamHead, expected: ExpectedVersion): void {
    if (head.deleted === 'hard') {
      throw chronactaError(
        ChronactaCode.STREAM_DELETED,
        `stream "${stream}" was deleted hard (tombstoned); it takes no more events`,
        { stream },
      );
    }
    if (meetsExpectation(head, expected)) return;
    const actual =
      head.lastVersion < 0
        ? 'the stream does not exist'
        : head.deleted === 'soft'
          ? `the stream is deleted (its last version was ${head.lastVersion})`
          : `its last version is ${head.lastVersion}`;
    throw chronactaError(
      ChronactaCode.WRONG_EXPECTED_VERSION,
      `stream "${stream}": expected ${describeExpected(expected)}, but ${actual}; read the stream and retry`,
      {
        stream,
        expected: typeof expected === 'bigint' ? expected : expected,
        actual: BigInt(head.lastVersion),
        deleted: head.deleted,
      },
    );
  }

  /**
   * The write pipeline: encoded entries -> one log batch -> (durable) apply and publish.
   * Resolves once applied. `heads` are the stream heads the batch leaves; `apply` applies
   * the batch's entries to the indexes (state.ts), in log order with every other batch.
   * A batch laid out with the log's record gaps goes down through `appendFramed`.
   */
  private submit(
    batch: EncodedBatch,
    first: number,
    batchId: Uint8Array,
    heads: Map<string, StreamHead>,
    apply: () => void,
  ): Promise<void> {
    if (first !== this.pendingLast + 1) throw new Error('entries do not start after the pending last position');
    const gen = this.gen;
    const count = batch.count;
    this.pendingLast += count;
    for (const [s, h] of heads) {
      const o = this.overlay.get(s);
      if (o && o.gen === gen) {
        o.head = h;
        o.refs++;
      } else this.overlay.set(s, { head: h, refs: 1, gen });
    }
    const replicated = this.replicated !== undefined;
    const log = this.log;
    const opts = { batchId, expectedLast: BigInt(first - 1) };
    const appended =
      batch.gap === LOG_RECORD_GAP && log.appendFramed
        ? log.appendFramed({ bytes: batch.bytes, lengths: batch.lengths }, opts)
        : log.append(batch.payloads, opts);
    return appended.then(
      () => {
        if (replicated) {
          // Applied and published by applyReplicated before the replicated log resolved.
          for (const s of heads.keys()) {
            const o = this.overlay.get(s);
            if (o && o.gen === gen && --o.refs === 0) this.overlay.delete(s);
          }
          if (this.state.last < first + count - 1) {
            throw chronactaError(
              ChronactaCode.UNAVAILABLE,
              `the append at positions ${first}.. committed but this member could not apply it${
                this.failure ? `: ${this.failure.message}` : ''
              }`,
            );
          }
          return;
        }
        apply();
        this.published();
        for (const s of heads.keys()) {
          const o = this.overlay.get(s);
          if (o && o.gen === gen && --o.refs === 0) this.overlay.delete(s);
        }
        if (this.listeners.size > 0) {
          for (const p of batch.payloads) {
            const e = decodeEntry(p);
            const ev = toRecorded(e, batchId);
            for (const l of this.listeners) {
              try {
                l(ev, e);
              } catch {
                // A listener's failure is its own; the commit stands.
              }
            }
          }
        }
      },
      (e: unknown) => {
        if (gen === this.gen) {
          // The log fails this append and every one accepted after it: start again from the durable state.
          this.gen++;
          this.overlay.clear();
          // Cluster mode: a new leader projects from what it applied; records committed later arrive through onApply.
          this.pendingLast = replicated ? this.state.last : Number(this.log.last);
          if (isPlexusError(e) && e.code === 'PLX_STORAGE_IO') {
            this.failure = e;
            this.changed.notify();
          }
        }
        throw e;
      },
    );
  }

  // ------------------------------------------------------------------ deletion and truncation

  async deleteStream(stream: string, opts: DeleteOptions = {}): Promise<DeleteResult> {
    this.checkWritable();
    const name = checkStream(stream);
    const expected = checkExpectedVersion(opts.expectedVersion);
    if (opts.hard !== undefined && typeof opts.hard !== 'boolean') {
      throw chronactaError(ChronactaCode.BAD_INPUT, 'hard must be a boolean');
    }
    if (this.replicated) await this.leaderReady(this.replicated);
    const head = this.head(name);
    this.checkExpected(name, head, expected);
    if (!opts.hard && head.lastVersion < 0) {
      throw chronactaError(ChronactaCode.STREAM_NOT_FOUND, `stream "${name}" does not exist; nothing to delete`, {
        stream: name,
      });
    }
    const meta: StreamMeta = {
      truncateBefore: head.lastVersion + 1,
      deleted: opts.hard ? 'hard' : 'soft',
      lastVersion: head.lastVersion,
    };
    const position = await this.writeMeta(name, opts.hard ? '$tombstone' : '$deleted', meta, head);
    return { position: BigInt(position), lastVersion: BigInt(head.lastVersion) };
  }

  async truncateStream(stream: string, opts: TruncateOptions): Promise<TruncateResult> {
    this.checkWritable();
    const name = checkStream(stream);
    const expected = checkExpectedVersion(opts?.expectedVersion);
    const { maxCount, maxAgeMs } = opts ?? {};
    if (maxCount !== undefined && (!Number.isSafeInteger(maxCount) || maxCount < 0)) {
      throw chronactaError(ChronactaCode.BAD_INPUT, 'maxCount must be a whole number from 0');
    }
    if (maxAgeMs !== undefined && (!Number.isSafeInteger(maxAgeMs) || maxAgeMs < 0)) {
      throw chronactaError(ChronactaCode.BAD_INPUT, 'maxAgeMs must be a whole number of milliseconds from 0');
    }
    const before = checkBig(opts?.beforeVersion, 'beforeVersion');
    if (this.replicated) await this.leaderReady(this.replicated);
    if (maxCount === undefined && maxAgeMs === undefined && before === undefined) {
      throw chronactaError(ChronactaCode.BAD_INPUT, 'give maxCount, maxAgeMs or beforeVersion');
    }
    let head = this.head(name);
    this.checkExpected(name, head, expected);
    if (head.lastVersion < 0) {
      throw chronactaError(ChronactaCode.STREAM_NOT_FOUND, `stream "${name}" does not exist; nothing to truncate`, {
        stream: name,
      });
    }
    const s = this.state.streams.get(name);
    let tb = s?.truncateBefore ?? 0;
    if (before !== undefined) tb = Math.max(tb, before);
    if (maxCount !== undefined) tb = Math.max(tb, head.lastVersion + 1 - maxCount);
    if (maxAgeMs !== undefined && s) tb = Math.max(tb, await this.firstVersionSince(s, this.clock() - maxAgeMs));
    head = this.head(name);
    this.checkExpected(name, head, expected);
    tb = Math.min(tb, head.lastVersion + 1);
    const meta: StreamMeta = { truncateBefore: tb, deleted: head.deleted, lastVersion: head.lastVersion };
    const position = await this.writeMeta(name, '$truncated', meta, head);
    return { position: BigInt(position), truncateBefore: BigInt(tb) };
  }

  /** The first version of `s` recorded at or after `since` (binary search over its live versions). */
  private async firstVersionSince(s: StreamState, since: number): Promise<number> {
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

  private async writeMeta(name: string, type: string, meta: StreamMeta, head: StreamHead): Promise<number> {
    const metaStream = `$$${name}`;
    const metaHead = this.head(metaStream);
    const position = this.pendingLast + 1;
    const entry: Entry = {
      kind: RecordKind.METADATA,
      batchSize: 1,
      indexInBatch: 0,
      position,
      version: metaHead.lastVersion + 1,
      recordedMs: this.recordedNow(),
      id: uuidToBytes(randomUUID()),
      stream: metaStream,
      type,
      metadata: new Uint8Array(0),
      data: encodeStreamMeta(meta),
    };
    const heads = new Map<string, StreamHead>([
      [name, { lastVersion: head.lastVersion, deleted: meta.deleted }],
      [metaStream, { lastVersion: metaHead.lastVersion + 1, deleted: 'none' }],
    ]);
    try {
      const batchId = uuidToBytes(randomUUID());
      await this.submit(EncodedBatch.of(encodeEntry(entry)), position, batchId, heads, () =>
        this.state.apply(entry, batchId),
      );
    } catch (e) {
      throw fromStorage(e, `changing stream "${name}"`);
    }
    return position;
  }

  // ------------------------------------------------------------------ reads

  async readStream(stream: string, opts: ReadStreamOptions = {}): Promise<ReadStreamResult> {
    this.checkOpen();
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
    this.checkOpen();
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

  // ------------------------------------------------------------------ cluster membership

  /**
   * Cluster mode, on the leader: adds a member (docs/chronacta-ha.md#membership-from-the-cli):
   * its addresses are replicated, it joins as a learner, and once it has caught up (within
   * `catchUpMs`) it becomes a voter, unless `learner`. A follower refuses with
   * PLX_CHRONACTA_HA_NOT_LEADER naming the leader.
   */
  async addClusterMember(
    member: import('./cluster-config.js').HaMember,
    opts: { readonly learner?: boolean; readonly catchUpMs?: number } = {},
  ): Promise<void> {
    const r = this.membershipLog();
    this.checkWritable();
    await r.addMember(member, {
      voter: opts.learner !== true,
      ...(opts.catchUpMs !== undefined ? { catchUpMs: opts.catchUpMs } : {}),
    });
  }

  /** Cluster mode, on the leader: removes a voter or a learner (never the last voter). */
  async removeClusterMember(id: number): Promise<void> {
    const r = this.membershipLog();
    this.checkWritable();
    await r.removeMember(id);
  }

  private membershipLog(): ReplicatedLog {
    this.checkOpen();
    if (!this.replicated) {
      throw haError(HaErrorCode.UNSUPPORTED, 'a standalone store has no cluster membership; serve it with --cluster');
    }
    return this.replicated;
  }

  // ------------------------------------------------------------------ compaction

  /**
   * Moves the closed segments of the log into a new archive generation, keeping only what
   * readers still see (and redacted stubs of deleted appends whose idempotency keys are
   * alive), then drops those segments from the log. Appends, reads and subscriptions go on
   * while it runs. One compaction runs at a time; a second call gets the running one.
   *
   * In cluster mode only the leader takes `compact()` (followers refuse it with
   * PLX_CHRONACTA_HA_NOT_LEADER): it agrees a cutoff with every member through Raft first
   * (min(its own cutoff, the position every member has applied + 1), replicated as a
   * compaction record), then compacts its own local log and archive up to it. Each member
   * compacts its own files up to the agreed cutoff with `compactToAgreed()`, so no member drops
   * records another one may still need to catch up from it. See docs/chronacta-ha.md.
   */
  compact(): Promise<CompactionReport> {
    this.checkWritable();
    const r = this.replicated;
    if (!this.compacting) {
      this.compacting = (r ? this.runClusterCompaction(r, true) : this.runCompaction()).finally(() => {
        this.compacting = undefined;
      });
    }
    return this.compacting;
  }

  /**
   * Cluster mode, any member: compacts this member's local log and archive up to the cutoff
   * the members last agreed through Raft (`ReplicatedLog.onCompactionAgreed` says when it
   * moves). Standalone, the same as `compact()`.
   */
  compactToAgreed(): Promise<CompactionReport> {
    const r = this.replicated;
    if (!r) return this.compact();
    this.checkOpen();
    if (this.failure) return Promise.reject(this.failure);
    if (!this.compacting) {
      this.compacting = this.runClusterCompaction(r, false).finally(() => {
        this.compacting = undefined;
      });
    }
    return this.compacting;
  }

  private async runClusterCompaction(r: ReplicatedLog, agree: boolean): Promise<CompactionReport> {
    const wanted = this.compactionCutoff();
    const agreed = agree ? await r.agreeCompaction(BigInt(wanted)) : r.compactionLimit;
    return this.runCompaction(Math.min(wanted, Number(agreed)));
  }

  /** Below the log's open (last) segment and at most one past the last record applied. */
  private compactionCutoff(): number {
    const segments = this.segments();
    const tailBase = segments.length > 0 ? Number((segments[segments.length - 1] as SegmentInfo).first) : 1;
    return Math.min(tailBase, this.state.last + 1);
  }

  /** The log's segments, oldest first: FileLog's, or in cluster mode the replicated log's local FileLog's. */
  private segments(): SegmentInfo[] {
    return isSegmented(this.log) ? logSegments(this.log) : [];
  }

  private async runCompaction(limit = Number.POSITIVE_INFINITY): Promise<CompactionReport> {
    const paths = this.prepared.paths;
    const old = this.archive;
    const segments = this.segments();
    const bases = segments.map((s) => Number(s.first));
    const cutoff = Math.min(this.compactionCutoff(), limit);
    if (cutoff <= old.cutoff) {
      return { cutoff: BigInt(old.cutoff), kept: 0, dropped: 0, bytesBefore: 0, bytesAfter: 0 };
    }
    // The space the compacted range takes now: the closed segments below the cutoff and the old archive.
    let bytesBefore = await dirBytes(join(paths.archive, genDirName(old.pointer.generation)));
    for (let i = 0; i + 1 < segments.length; i++) {
      if ((bases[i + 1] as number) <= cutoff) {
        bytesBefore += await stat(join(paths.log, (segments[i] as SegmentInfo).file)).then(
          (x) => x.size,
          () => 0,
        );
      }
    }
    // What readers cannot see now: a prefix of each stream's versions, fixed for this run.
    const hidden = new Map<string, { truncateBefore: number; hard: boolean }>();
    for (const s of this.state.streams.values()) {
      if (s.truncateBefore > 0 || s.deleted === 'hard') {
        hidden.set(s.name, { truncateBefore: s.truncateBefore, hard: s.deleted === 'hard' });
      }
    }
    const now = this.clock();
    const generation = old.pointer.generation + 1;
    const dir = join(paths.archive, genDirName(generation));
    await rm(dir, { recursive: true, force: true });
    const archiveLog = await openLog(dir, {
      fsync: this.opts.fsync ?? 'batch',
      logger: this.opts.logger ?? stderrWarnings,
    });
    const globals: number[] = [];
    let kept = 0;
    let dropped = 0;
    const arc = old.acquire();
    try {
      let batch: Uint8Array[] = [];
      let batchId: Uint8Array | undefined;
      let pending: Promise<unknown>[] = [];
      const flush = async (force: boolean) => {
        if (batch.length > 0 && batchId) {
          const appended = archiveLog.append(batch, { batchId });
          appended.catch(() => {}); // awaited below; handled here so a failure is never unobserved
          pending.push(appended);
        }
        batch = [];
        batchId = undefined;
        if (force || pending.length >= 256) {
          await Promise.all(pending);
          pending = [];
        }
      };
      let p = 1;
      while (p < cutoff) {
        const recs =
          p < arc.cutoff
            ? await arc.readUp(p, arc.cutoff - 1, CHUNK)
            : await this.log.read(BigInt(p), { maxCount: Math.min(CHUNK, cutoff - p) });
        if (recs.length === 0) {
          if (p < arc.cutoff) {
            p = arc.cutoff;
            continue;
          }
          break;
        }
        for (const r of recs) {
          const d = decodeRecord(r);
          const e = d.entry;
          p = e.position + 1;
          let payload: Uint8Array | undefined = d.payload;
          if (e.kind === RecordKind.EVENT || e.kind === RecordKind.REDACTED) {
            const h = hidden.get(e.stream);
            const gone =
              e.kind === RecordKind.REDACTED || (h !== undefined && (h.hard || e.version < h.truncateBefore));
            if (gone) {
              payload =
                e.idempotency && this.state.keyAlive(e.recordedMs, now)
                  ? e.kind === RecordKind.REDACTED
                    ? d.payload
                    : encodeEntry(redact(e))
                  : undefined;
            }
          }
          if (!batchId || !sameBytes(batchId, d.batchId)) {
            await flush(false);
            batchId = d.batchId;
          }
          if (payload === undefined) {
            dropped++;
            continue;
          }
          kept++;
          batch.push(payload);
          globals.push(e.position);
        }
      }
      await flush(true);
    } catch (e) {
      await archiveLog.close().catch(() => {});
      throw fromStorage(e, 'compacting');
    } finally {
      arc.release();
    }
    const pointer = { generation, cutoff };
    await writePointer(paths.archive, pointer);
    this.archive = new ArchiveGen(pointer, archiveLog, globals);
    old.retire(() => {
      void (async () => {
        await old.log?.close().catch(() => {});
        // Only the retired generation: by the time its last reader is gone, a later compaction
        // may have made the generation after this run's, which is the one readers use then.
        await rm(join(paths.archive, genDirName(old.pointer.generation)), { recursive: true, force: true }).catch(
          () => {},
        );
      })();
    });
    await this.log.compactBefore(BigInt(cutoff));
    const bytesAfter = await dirBytes(dir);
    return { cutoff: BigInt(cutoff), kept, dropped, bytesBefore, bytesAfter };
  }

  // ------------------------------------------------------------------ close

  /** Waits for every accepted change, then closes the log and the archive. */
  close(): Promise<void> {
    if (!this.closing) {
      this.closing = (async () => {
        await this.compacting?.catch(() => {});
        this.unhook?.();
        await this.log.close();
        const arc = this.archive;
        await new Promise<void>((resolve) => arc.retire(resolve));
        await arc.log?.close();
      })();
      this.changed.notify();
    }
    return this.closing;
  }
}

function decodeRecord(r: LogRecord): Decoded {
  return decodePayload(r.payload, Number(r.position), r.batchId);
}

/** `decodeRecord` of a record given by its parts (`position` only names it in errors). */
function decodePayload(payload: Uint8Array, position: number, batchId: Uint8Array): Decoded {
  let entry: Entry;
  try {
    entry = decodeEntry(payload);
  } catch (e) {
    throw corrupt('log', position, (e as Error).message);
  }
  return { entry, batchId, payload };
}

function corrupt(where: string, position: number, what: string): PlexusError {
  return chronactaError(ChronactaCode.CORRUPT, `the ${where} is damaged at position ${position}: ${what}`, {
    position,
  });
}

function idempotencyConflict(key: string, stream: string): PlexusError {
  return chronactaError(
    ChronactaCode.IDEMPOTENCY_CONFLICT,
    `idempotency key "${key}" was used for a different append (stream "${stream}" or other events); use a new key for a new append`,
    { key, stream },
  );
}

/** Applies `fn` to every record of `log` from `from`, in order. */
async function replay(log: LogStorage, from: number, fn: (d: Decoded) => void): Promise<void> {
  if (log.last < BigInt(from)) return;
  let p = BigInt(Math.max(from, Number(log.first) || 1));
  for (;;) {
    const recs = await log.read(p, { maxCount: 4096 });
    if (recs.length === 0) return;
    for (const r of recs) fn(decodeRecord(r));
    p = (recs[recs.length - 1] as LogRecord).position + 1n;
  }
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  let names: import('node:fs').Dirent[];
  try {
    names = await readdir(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const d of names) {
    const p = join(dir, d.name);
    if (d.isDirectory()) total += await dirBytes(p);
    else
      total += await stat(p).then(
        (s) => s.size,
        () => 0,
      );
  }
  return total;
}
