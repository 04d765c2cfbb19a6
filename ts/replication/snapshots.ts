/**
 * Snapshots, catch-up and compaction cutoffs of a replica (docs/chronacta-ha.md, "Snapshots
 * and catch-up"): when to take a Raft snapshot and where (`snapshotEvery`/`snapshotRetain`,
 * counted in appends, and their byte limits); installing a received or stored snapshot, which
 * pulls the records the local log lacks from other members over catch-up streams (snapshot.ts),
 * retrying on the one retry policy (ts/core/retry.ts); and the cutoff below which the leader
 * may agree that members drop records (what every member has applied and keeps on disk).
 */
import { RefusedReason } from '../codec/catch-up.js';
import type { ClockTimers } from '../core/clock.js';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { delay, RetryPolicy } from '../core/retry.js';
import type { RaftNode } from '../raft/node.js';
import type { Entry, Snapshot } from '../raft/types.js';
import type { LogRecord } from '../storage/types.js';
import type { HaMember } from './config.js';
import { hex, hexBytes } from './entries.js';
import { ReplicationErrorCode, replicationError } from './errors.js';
import type { ReplicaLocalLog, ReplicaRaftStorage, ReplicaTransport } from './raft-edge.js';
import type { ReplicaSignals, ReplicaState } from './replica-state.js';
import {
  type CatchUpSocket,
  decodeDescriptor,
  encodeDescriptor,
  fetchRecords,
  queryHolding,
  type SnapshotDescriptor,
} from './snapshot.js';
import type { AppliedBatch, ReplicatedLogOptions } from './types.js';

/**
 * Between catch-up rounds that brought nothing: 20 ms, doubling up to 1 s, back to 20 ms after
 * a round that brought records. No jitter: the rounds already go to every source in turn.
 */
export const CATCH_UP_RETRY = new RetryPolicy({ baseMs: 20, capMs: 1000, factor: 2, jitter: 'none' });

export interface SnapshotsDeps extends ReplicaSignals {
  readonly opts: ReplicatedLogOptions;
  readonly clock: ClockTimers;
  readonly state: ReplicaState;
  readonly node: Pick<RaftNode, 'status' | 'compact'>;
  readonly local: ReplicaLocalLog;
  readonly raftStorage: Pick<ReplicaRaftStorage, 'snapshot' | 'entries' | 'compact'>;
  readonly transport: Pick<ReplicaTransport, 'openStream'>;
  /** Records caught up are in the local log: tell the listeners. */
  notify(batch: AppliedBatch): void;
  /** A member known from a snapshot: dial it. */
  dialPeer(m: HaMember): void;
  /** Makes the local log durable as far as it is written (local-tail.ts). */
  syncLocal(): Promise<void>;
  /** Bytes of entries applied so far (apply.ts). */
  appliedBytes(): number;
}

export class Snapshots {
  snapshotsTaken = 0;
  snapshotsInstalled = 0;
  recordsCaughtUp = 0;
  /** The position a catch-up is pulling records up to, while it runs. */
  catchUpTarget: bigint | undefined;
  /** A snapshot install in progress (the apply path waits for it). */
  installing: Promise<void> | undefined;
  /** A Raft snapshot being taken, off the apply path (`start`). */
  snapshotting: Promise<void> | undefined;
  private catchUpStream: CatchUpSocket | undefined;
  /** Bytes of entries applied when the last snapshot was taken. */
  private appliedBytesAtSnapshot = 0;
  private lastCatchUpWarning = 0;
  /**
   * The last position each other member reported on disk in its local log (QUERY on a catch-up
   * stream), the highest answer so far: a local log only grows, so an answer stays true.
   */
  private readonly holding = new Map<number, bigint>();

  constructor(private readonly deps: SnapshotsDeps) {}

  /** Ends the catch-up stream in progress (the member closes). */
  closeStream(): void {
    this.catchUpStream?.destroy();
  }

  // ---- compaction cutoffs ----

  /**
   * The highest cutoff the leader may agree now: below what every member of the configuration
   * has applied (`safeCompactionPosition`) and keeps on disk (`holdingLimit`).
   */
  async compactionCutoff(): Promise<number> {
    const held = await this.holdingLimit();
    return Math.min(this.safeCompactionPosition(), held);
  }

  /**
   * One past the lowest local position any other member of the configuration keeps on disk, as
   * each one answers a QUERY now (or answered last, when it cannot be reached); the current
   * cutoff while a member never answered; no limit without other members. A member's Raft
   * match index is not enough: a member that acknowledged entries it has not applied yet, and
   * then installs a snapshot past them, drops those entries and fetches their records from the
   * others' local logs.
   */
  private async holdingLimit(): Promise<number> {
    const { state, opts } = this.deps;
    const s = this.deps.node.status();
    if (s.role !== 'leader' || !s.progress) return state.compactBelow;
    const ids = [...s.progress.keys()].filter((id) => id !== s.id);
    const timeoutMs = Math.min(opts.catchUpTimeoutMs ?? 5000, 2000);
    await Promise.all(
      ids.map(async (id) => {
        let socket: CatchUpSocket | undefined;
        try {
          socket = await this.deps.transport.openStream(id, timeoutMs);
          const h = await queryHolding(socket, timeoutMs, this.deps.clock);
          const durable = BigInt(h.durable);
          if (durable > (this.holding.get(id) ?? -1n)) this.holding.set(id, durable);
        } catch {
          // Not reachable now (down, cut off, or a version without QUERY): its last answer holds.
        } finally {
          socket?.destroy();
        }
      }),
    );
    let low = Number.POSITIVE_INFINITY;
    for (const id of ids) {
      const d = this.holding.get(id);
      if (d === undefined) return state.compactBelow;
      low = Math.min(low, Number(d) + 1);
    }
    return low;
  }

  /** One past the lowest position any member of the configuration (this one included) has. */
  private safeCompactionPosition(): number {
    const { state } = this.deps;
    const s = this.deps.node.status();
    if (s.role !== 'leader' || !s.progress) return state.compactBelow;
    let low = Number.POSITIVE_INFINITY;
    for (const [id, p] of s.progress) {
      const mark = state.positions.markAt(id === s.id ? state.raftApplied : Math.min(p.match, state.raftApplied));
      // Unknown (behind the window, or a new member with nothing yet): hold the agreement.
      if (!mark) return state.compactBelow;
      low = Math.min(low, mark[1]);
    }
    return Number.isFinite(low) ? low + 1 : state.compactBelow;
  }

  // ---- installing ----

  /**
   * Installs a received snapshot: the founding one (index 1, no data) needs nothing; a
   * descriptor needs the local log to reach its last position (pulled from other members)
   * before the entries after it are applied. The driver has already made the snapshot durable
   * in the Raft log, so a crash in here resumes the install on restart (see `Replica.open`).
   */
  async restore(s: Snapshot): Promise<void> {
    const { state } = this.deps;
    let d: SnapshotDescriptor | undefined;
    try {
      d = decodeDescriptor(s.data);
    } catch (err) {
      throw this.deps.fail(err as PlexusError);
    }
    if (!d) {
      state.raftApplied = Math.max(state.raftApplied, s.metadata.index);
      return;
    }
    if (d.index !== s.metadata.index || d.term !== s.metadata.term) {
      throw this.deps.fail(
        replicationError(
          ReplicationErrorCode.DIVERGED,
          `a snapshot at ${s.metadata.index} carries a descriptor of index ${d.index}`,
          {
            index: s.metadata.index,
          },
        ),
      );
    }
    await this.startInstall(d, true);
  }

  /** Runs an install after any running one (one at a time: both append to the local log). */
  startInstall(d: SnapshotDescriptor, received = false): Promise<void> {
    const before = this.installing ?? Promise.resolve();
    const p = before.catch(() => undefined).then(() => this.install(d, received));
    this.installing = p;
    p.then(
      () => {
        if (this.installing === p) this.installing = undefined;
      },
      () => undefined,
    );
    return p;
  }

  private async install(d: SnapshotDescriptor, received: boolean): Promise<void> {
    const { state, local } = this.deps;
    for (const m of d.members) {
      if (!state.members.has(m.id)) {
        state.members.set(m.id, m);
        this.deps.dialPeer(m);
      }
    }
    const target = BigInt(d.lastPosition);
    if (local.last < target) {
      this.catchUpTarget = target;
      const backoff = CATCH_UP_RETRY.start(this.deps.clock);
      while (local.last < target) {
        this.deps.checkOpen();
        const before = local.last;
        await this.catchUpRound(d.lastPosition);
        if (local.last > before) backoff.reset();
        else if (local.last < target) {
          // No maxAttempts and no deadline: next() always gives a delay.
          await delay(backoff.next() as number, this.deps.clock);
        }
      }
      this.catchUpTarget = undefined;
    }
    // The record at the snapshot's last position must be the one the snapshot names.
    if (d.lastPosition > 0 && target >= local.first && local.first > 0n) {
      const [rec] = await local.read(target, { maxCount: 1, maxBytes: 1 });
      if (!rec || rec.position !== target || hex(rec.batchId) !== d.lastBatchId) {
        throw this.deps.fail(
          replicationError(
            ReplicationErrorCode.DIVERGED,
            `the local log holds batch ${rec ? hex(rec.batchId) : 'none'} at position ${target} where the snapshot at Raft index ${d.index} has ${d.lastBatchId}: the replicas diverged; the member stops`,
            { index: d.index, position: d.lastPosition },
          ),
        );
      }
    }
    state.localTail = Number(local.last);
    if (state.raftApplied < d.index) state.raftApplied = d.index;
    state.positions.clear();
    state.remember(d.index, d.lastPosition, hexBytes(d.lastBatchId), BigInt(d.lastEpoch));
    state.gated = false;
    if (received) this.snapshotsInstalled++;
    if ((d.compactBelow ?? 1) > state.compactBelow) state.compactBelow = d.compactBelow ?? 1;
    if (d.index >= this.deps.raftStorage.snapshot().metadata.index) state.snapshotPosition = d.lastPosition;
  }

  /** Tries each source once (the leader first): resolves when one of them is done or all failed. */
  private async catchUpRound(to: number): Promise<void> {
    const { state, opts, local, clock } = this.deps;
    const s = this.deps.node.status();
    const ids = [...state.members.keys()].filter((id) => id !== opts.id).sort((a, b) => a - b);
    const order = s.lead && s.lead !== opts.id ? [s.lead, ...ids.filter((id) => id !== s.lead)] : ids;
    const timeoutMs = opts.catchUpTimeoutMs ?? 5000;
    let compacted = 0;
    for (const id of order) {
      this.deps.checkOpen();
      let socket: CatchUpSocket | undefined;
      try {
        socket = await this.deps.transport.openStream(id, timeoutMs);
        this.catchUpStream = socket;
        if (state.closed) return;
        await fetchRecords(socket, {
          local,
          to,
          chunkBytes: opts.catchUpChunkBytes ?? 1024 * 1024,
          timeoutMs,
          timers: clock,
          stopped: () => state.stopped,
          onChunk: (runs) => {
            // The records are in the local log now: listeners see them as applied batches.
            for (const run of runs) {
              const a = run[0] as LogRecord;
              const b = run[run.length - 1] as LogRecord;
              this.recordsCaughtUp += run.length;
              this.deps.notify({
                raftIndex: 0,
                first: a.position,
                last: b.position,
                batchId: a.batchId,
                epoch: a.epoch,
                payloads: run.map((r) => r.payload),
                records: run,
              });
            }
          },
        });
        return;
      } catch (err) {
        if (isPlexusError(err) && err.code === ReplicationErrorCode.STOPPED) throw err;
        if (
          isPlexusError(err, ReplicationErrorCode.CATCH_UP_UNAVAILABLE) &&
          err.details.reason === RefusedReason.COMPACTED
        ) {
          compacted++;
        }
        if (clock.now() - this.lastCatchUpWarning > 1000) {
          this.lastCatchUpWarning = clock.now();
          opts.logger?.warn('replicated log: catch-up from a member failed; trying again', {
            id: opts.id,
            source: id,
            last: local.last,
            to,
            error: isPlexusError(err) ? `${err.code}: ${err.message}` : String(err),
          });
        }
      } finally {
        socket?.destroy();
        if (this.catchUpStream === socket) this.catchUpStream = undefined;
      }
    }
    if (order.length > 0 && compacted === order.length) {
      throw this.deps.fail(
        replicationError(
          ReplicationErrorCode.CATCH_UP_UNAVAILABLE,
          `member ${opts.id} needs positions ${local.last + 1n}..${to}, which every other member compacted away; stop it, copy log/ (and the store's archive/) of a stopped member into its data directory, leave raft/ empty and start it with join again`,
          { from: local.last + 1n, to },
        ),
      );
    }
  }

  // ---- taking snapshots ----

  /**
   * Starts `maybeSnapshot` unless one runs: the snapshot waits for the local log to be durable
   * (an fsync of everything written since the last one), and applying goes on meanwhile.
   */
  start(): void {
    if (this.snapshotting !== undefined || this.deps.state.closed) return;
    const p = this.maybeSnapshot()
      .catch((err: unknown) => {
        this.deps.opts.logger?.warn('replicated log: taking a Raft snapshot failed; the log stays as it is', {
          id: this.deps.opts.id,
          error: String(err),
        });
      })
      .finally(() => {
        if (this.snapshotting === p) this.snapshotting = undefined;
      });
    this.snapshotting = p;
  }

  /**
   * Takes a Raft snapshot `snapshotRetain` entries behind the applied index once
   * `snapshotEvery` entries were applied since the last one, and compacts the Raft log
   * before it. Started at the end of an apply (after the local appends it made are done)
   * and not awaited there: applying goes on while the local log is made durable.
   */
  private async maybeSnapshot(): Promise<void> {
    const { opts, state, raftStorage } = this.deps;
    const window = state.positions;
    const every = opts.snapshotEvery ?? 10_000;
    if (every <= 0) return;
    const retain = opts.snapshotRetain ?? 5_000;
    const current = raftStorage.snapshot().metadata.index;
    // The core's applied index (entries of earlier Readies): a snapshot may not go past it.
    const applied = Math.min(state.raftApplied, this.deps.node.status().applied);
    // Counted in appends, not entries: an entry may carry many appends (group commit), and
    // what the Raft log holds in memory grows with the appends.
    const top = window.markAt(applied);
    if (!top) return;
    let mark = window.markByFrames(top[4] - retain);
    const everyBytes = opts.snapshotEveryBytes ?? 64 * 1024 * 1024;
    const byBytes = everyBytes > 0 && this.deps.appliedBytes() - this.appliedBytesAtSnapshot >= everyBytes;
    if (!byBytes) {
      if (!mark || mark[0] <= current) return;
      if (mark[4] - (window.markAt(current)?.[4] ?? 0) < every) return;
    }
    // Keep at most snapshotRetainBytes of entries: a later snapshot point when the retained
    // appends are large.
    const retainBytes = opts.snapshotRetainBytes ?? 8 * 1024 * 1024;
    const lo = Math.max(mark?.[0] ?? current, current);
    const kept = raftStorage.entries(lo + 1, top[0] + 1);
    let bytes = 0;
    let from = top[0];
    for (let i = kept.length - 1; i >= 0; i--) {
      const e = kept[i] as Entry;
      bytes += e.data.length;
      if (bytes > retainBytes) break;
      from = e.index - 1;
    }
    if (from > lo) {
      const later = window.markAt(from);
      if (later && later[0] > lo) mark = later;
    }
    if (!mark || mark[0] <= current) return;
    const at = mark[0];
    const bytesThen = this.deps.appliedBytes();
    try {
      // The Raft entries up to `at` go away: the local records derived from them must be durable.
      await this.deps.syncLocal();
      // Meanwhile an installed snapshot may have covered `at` already.
      if (state.closed || raftStorage.snapshot().metadata.index >= at) return;
      const meta = this.deps.node.compact(at, new Uint8Array(0)).metadata;
      const data = encodeDescriptor({
        index: at,
        term: meta.term,
        lastPosition: mark[1],
        lastBatchId: mark[1] > 0 ? hex(mark[2]) : '',
        lastEpoch: String(mark[1] > 0 ? mark[3] : 0n),
        members: [...state.members.values()],
        compactBelow: state.compactBelow,
      });
      raftStorage.compact({ metadata: meta, data });
      this.snapshotsTaken++;
      this.appliedBytesAtSnapshot = bytesThen;
      state.snapshotPosition = mark[1];
    } catch (err) {
      opts.logger?.warn('replicated log: taking a Raft snapshot failed; the log stays as it is', {
        id: opts.id,
        index: at,
        error: String(err),
      });
    }
  }
}
