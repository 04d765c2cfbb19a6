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
 * which moves past an append only once it is durable and applied, in log order. *
 * This file holds opening, the write pipeline and cluster membership; the rest is split by
 * concern: store-apply.ts (the one apply path every committed change takes: replay, own
 * appends and stream changes, replicated batches), store-reads.ts (reads by stream and by
 * position), store-compaction.ts (archiving closed segments), store-checks.ts (expected
 * versions and idempotency conflicts) and store-log.ts (decoding the log's records).
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { EncodedBatch, type EventTable, encodeTable, randomUuidBytes } from '../codec/chronacta-batch.js';
import { type Entry, encodeEntry, RecordKind } from '../codec/chronacta-record.js';
import { type Clock, type ClockTimers, heldMonotonicClock, systemClock } from '../core/clock.js';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { Condition } from '../core/watermark.js';
import { type FileLog, openLog } from '../storage/file-log.js';
import { RECORD_HEADER_BYTES as LOG_RECORD_GAP } from '../storage/format.js';
import type { FsyncMode, LogStorage, StorageLogger } from '../storage/types.js';
import { ArchiveGen, genDirName, readPointer, removeOtherGenerations } from './archive.js';
import { checkTable, fingerprintTable, tableOf } from './batch.js';
import { type AppliedBatch, openClusterLog, type ReplicatedLog, type ReplicatedLogOptions } from './cluster-log.js';
import { ChronactaCode, chronactaError, fromStorage } from './errors.js';
import { HaErrorCode, haError } from './ha-errors.js';
import { type PreparedDataDir, prepareDataDir } from './layout.js';
import { bytesToUuid, encodeStreamMeta, type StreamMeta, uuidToBytes } from './record.js';
import { type StoreState as State, StoreState, type StreamHead } from './state.js';
import { ApplyPath, type OwnBatch } from './store-apply.js';
import { checkExpected, idempotencyConflict } from './store-checks.js';
import { Compactor } from './store-compaction.js';
import { corrupt, replay, sameBytes, stderrWarnings } from './store-log.js';
import { StoreReader } from './store-reads.js';
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
import { checkBig, checkExpectedVersion, checkKey, checkStream } from './validate.js';
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
  /**
   * Wall time, milliseconds since the Unix epoch (default `systemClock`): a `Clock`
   * (ts/core/clock.ts), or a function returning the time (the earlier form, still taken).
   * Recorded times never go backwards.
   */
  readonly clock?: Clock | (() => number);
  /**
   * Time and timers of durations (default `heldMonotonicClock`): in cluster mode, how long a
   * write waits for a new leader to apply the entries of earlier terms.
   */
  readonly timers?: ClockTimers;
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

export class EventStore {
  private readonly state: State;
  private readonly overlay = new Map<string, Overlay>();
  private readonly pendingKeys = new Map<string, PendingKey>();
  /** The one path every committed change takes into the indexes, the subscribers and the watermark. */
  private readonly apply: ApplyPath;
  private readonly reader: StoreReader;
  private readonly compactor: Compactor;
  /** Last position counting every accepted append, durable or not. */
  private pendingLast: number;
  /** Bumped when a failed append voids every change accepted after the last durable one. */
  private gen = 0;
  private lastAssignedMs: number;
  private archive: ArchiveGen;
  private compacting: Promise<CompactionReport> | undefined;
  private closing: Promise<void> | undefined;
  private failure: PlexusError | undefined;
  /** Notified when this store fails or closes (a leader's wait for readiness re-checks then). */
  private readonly changed: Condition;
  /** Time of the cluster leader's readiness deadline. */
  private readonly timers: ClockTimers;
  private readonly clock: Clock;
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
    apply: ApplyPath,
    private readonly opts: StoreOptions,
  ) {
    this.state = state;
    this.archive = archive;
    this.pendingLast = state.last;
    this.apply = apply;
    this.lastAssignedMs = state.lastRecordedMs;
    this.clock = storeClock(opts.clock);
    this.timers = opts.timers ?? heldMonotonicClock;
    this.changed = new Condition(this.timers);
    this.reader = new StoreReader({ state, log, archive: () => this.archive, observer: opts.observer });
    this.compactor = new Compactor({
      prepared,
      log,
      state,
      clock: this.clock,
      fsync: opts.fsync,
      logger: opts.logger,
      archive: () => this.archive,
      setArchive: (a) => {
        this.archive = a;
      },
    });
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
    const apply = new ApplyPath(state);
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
          apply.replayed(d);
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
        apply.replayed(d);
      });
      if (Number(log.last) >= from && state.last !== Number(log.last)) {
        throw corrupt('log', Number(log.last), 'the indexes end elsewhere than the log');
      }
      if (state.last < Number(log.last)) state.last = Number(log.last);
      state.expireKeys(storeClock(opts.clock).now());
      const store = new EventStore(prepared, log, new ArchiveGen(pointer, archiveLog, globals), state, apply, opts);
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
    return this.apply.onCommit(listener);
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
    const end = this.timers.now() + (this.opts.replication?.timeoutMs ?? 10_000);
    for (;;) {
      this.checkWritable();
      if (r.acceptingWrites || this.timers.now() > end) return;
      // Wakes when the log's readiness or this store's state changes, or at the deadline (on
      // this store's timers: the log's own wait has no timeout and ends with the abort).
      const timeoutMs = end - this.timers.now() + 1;
      const ac = new AbortController();
      try {
        await Promise.race([
          r.readinessChanged({ signal: ac.signal }),
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

  /** Cluster mode: applies a batch the replicated log committed (ApplyPath.committed). */
  private applyReplicated(batch: AppliedBatch): void {
    if (this.failure || this.closing) return;
    this.apply.committed(batch.payloads, Number(batch.first), batch.batchId, (failure) => {
      this.failure = failure;
      this.changed.notify();
    });
    if (this.failure) return;
    if (this.pendingLast < this.state.last) this.pendingLast = this.state.last;
  }

  /**
   * Resolves `true` once `lastPosition` is at least `position` (at once if it is), `false`
   * when `timeoutMs` passes first (none: no bound); rejects when `signal` aborts.
   */
  whenApplied(position: bigint, timeoutMs?: number, signal?: AbortSignal): Promise<boolean> {
    return this.apply.applied.wait(position, {
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
      ...(signal ? { signal } : {}),
    });
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
        this.state.expireKeys(this.clock.now());
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
    checkExpected(name, head, expected);
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
    const done = this.submit(encoded, first, batchId, heads, {
      kind: 'append',
      stream: name,
      firstVersion,
      count,
      recordedMs,
      idempotency: idem,
    });
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
    // Cluster mode: at least the latest time applied, which other leaders may have assigned.
    const now = Math.max(Math.floor(this.clock.now()), this.lastAssignedMs, this.state.lastRecordedMs);
    this.lastAssignedMs = now;
    return now;
  }

  /**
   * The write pipeline: encoded entries -> one log batch -> (durable) apply and publish.
   * Resolves once applied. `heads` are the stream heads the batch leaves; `own` says what
   * the batch's entries are, for the apply path (store-apply.ts) to apply them to the
   * indexes without decoding, in log order with every other batch.
   * A batch laid out with the log's record gaps goes down through `appendFramed`.
   */
  private submit(
    batch: EncodedBatch,
    first: number,
    batchId: Uint8Array,
    heads: Map<string, StreamHead>,
    own: OwnBatch,
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
          // Applied and published through applyReplicated before the replicated log resolved.
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
        for (const s of heads.keys()) {
          const o = this.overlay.get(s);
          if (o && o.gen === gen && --o.refs === 0) this.overlay.delete(s);
        }
        this.apply.own(own, batch.payloads, first, batchId);
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
    checkExpected(name, head, expected);
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
    checkExpected(name, head, expected);
    if (head.lastVersion < 0) {
      throw chronactaError(ChronactaCode.STREAM_NOT_FOUND, `stream "${name}" does not exist; nothing to truncate`, {
        stream: name,
      });
    }
    const s = this.state.streams.get(name);
    let tb = s?.truncateBefore ?? 0;
    if (before !== undefined) tb = Math.max(tb, before);
    if (maxCount !== undefined) tb = Math.max(tb, head.lastVersion + 1 - maxCount);
    if (maxAgeMs !== undefined && s)
      tb = Math.max(tb, await this.reader.firstVersionSince(s, this.clock.now() - maxAgeMs));
    head = this.head(name);
    checkExpected(name, head, expected);
    tb = Math.min(tb, head.lastVersion + 1);
    const meta: StreamMeta = { truncateBefore: tb, deleted: head.deleted, lastVersion: head.lastVersion };
    const position = await this.writeMeta(name, '$truncated', meta, head);
    return { position: BigInt(position), truncateBefore: BigInt(tb) };
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
      await this.submit(EncodedBatch.of(encodeEntry(entry)), position, batchId, heads, { kind: 'entry', entry });
    } catch (e) {
      throw fromStorage(e, `changing stream "${name}"`);
    }
    return position;
  }

  // ------------------------------------------------------------------ reads

  readStream(stream: string, opts: ReadStreamOptions = {}): Promise<ReadStreamResult> {
    this.checkOpen();
    return this.reader.readStream(stream, opts);
  }

  readAll(opts: ReadAllOptions = {}): Promise<ReadAllResult> {
    this.checkOpen();
    return this.reader.readAll(opts);
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
      this.compacting = (r ? this.runClusterCompaction(r, true) : this.compactor.runCompaction()).finally(() => {
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
    const wanted = this.compactor.compactionCutoff();
    const agreed = agree ? await r.agreeCompaction(BigInt(wanted)) : r.compactionLimit;
    return this.compactor.runCompaction(Math.min(wanted, Number(agreed)));
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

/** The store's clock option as a `Clock` (a bare function is the earlier form of the option). */
export function storeClock(c: Clock | (() => number) | undefined): Clock {
  if (c === undefined) return systemClock;
  return typeof c === 'function' ? { now: c } : c;
}
