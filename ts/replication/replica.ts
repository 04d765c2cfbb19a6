/**
 * ReplicatedLog: a LogStorage replicated over Raft (docs/replication.md); Chronacta's
 * cluster mode runs on it (docs/chronacta-ha.md).
 *
 * Each member runs a Raft node (ts/raft) whose log is a FileRaftStorage under `<dir>/raft/`
 * (durable: fsynced before any message of the same Ready leaves), and keeps the committed
 * records in a local FileLog under `<dir>/log/` at their global positions: the state
 * machine. Appends are accepted only on the leader: it checks compare-and-set against its
 * projected last position (applied + its own pending proposals), wraps the batch in an EVFR
 * frame (first position, the Raft term as epoch, the batch id), proposes it, and answers once
 * the entry is committed by a majority of voters and applied to its own local log. Every
 * member applies committed entries in Raft order: decode the frame (checksums), check that it
 * continues the local log, append it with the same batch id and the frame's epoch as fencing
 * epoch. A frame already in the local log (same batch id at the same positions: a replay
 * after a restart) is skipped; anything else stops the member with PLX_REPLICATION_DIVERGED.
 *
 * Every `snapshotEvery` applied appends the member takes a Raft snapshot `snapshotRetain`
 * appends behind its applied index and compacts its Raft log before it. The snapshot's data is
 * a descriptor of the local log there (ts/replication/snapshot.ts); a member that installs
 * one (far behind, new, or restarted with a local log that lost its tail) pulls the records it
 * lacks from a member that holds them over a catch-up stream, then goes on with the entries
 * after the snapshot. See docs/chronacta-ha.md, "Snapshots and catch-up".
 */
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { RefusedReason } from '../codec/catch-up.js';
import { decodeEvfr, type EvfrFrame, encodeEvfr } from '../codec/evfr.js';
import { encodeCompactMarker, isCompactMarker, isMeta } from '../codec/replication-entries.js';
import type { TimerHandle } from '../core/clock.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import { Condition, type WaitOptions } from '../core/watermark.js';
import { RaftNode } from '../raft/node.js';
import type { Entry, Role, Snapshot, SoftState } from '../raft/types.js';
import { conflictError, fencedError } from '../storage/errors.js';
import type { FileLog } from '../storage/file-log.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from '../storage/types.js';
import { checkAddress, checkMember, type HaMember } from './config.js';
import {
  concatFrames,
  decodeMeta,
  type FrameGroup,
  hex,
  hexBytes,
  type Mark,
  SOLO_FRAME_BYTES,
  sameBytes,
  splitAddress,
} from './entries.js';
import { type ReplicationCode, ReplicationErrorCode, replicationError, translateError } from './errors.js';
import { markCleanClose, openLocalLog, type SyncedSegments, syncLocalLog } from './local-tail.js';
import { MembershipChanges } from './membership.js';
import type { ReplicaDeps, ReplicaDriver, ReplicaRaftStorage, ReplicaTransport } from './raft-edge.js';
import { ReadBarrier } from './read-barrier.js';
import {
  CatchUpServer,
  decodeDescriptor,
  encodeDescriptor,
  fetchRecords,
  queryHolding,
  type SnapshotDescriptor,
} from './snapshot.js';
import {
  type AppliedBatch,
  type FollowerStatus,
  FrameBatch,
  type ReplicatedLogOptions,
  type ReplicatedLogStatus,
} from './types.js';

export { SOLO_FRAME_BYTES } from './entries.js';
export type { AppliedBatch, FollowerStatus, ReplicatedLogOptions, ReplicatedLogStatus } from './types.js';

const POSITION_WINDOW = 65_536;
const MAX_RETAIN = 50_000;
const defaultPromoteHint = (id: number): string => `promote it with promoteMember(${id})`;
const _noop = () => undefined;

export class Replica implements LogStorage {
  private readonly members = new Map<number, HaMember>();
  private readonly dialOverride = new Map<number, string>();
  private readonly listeners = new Set<(b: AppliedBatch) => void>();
  private readonly compactionListeners = new Set<(below: bigint) => void>();
  /** (raft index, last position, batch id, epoch) of recent frames, ascending: lag and snapshots. */
  private readonly positions: Mark[] = [];
  private raftApplied = 0;
  private projectedLast = 0;
  /** The local log's last position counting appends issued by the apply path and not yet acknowledged. */
  private localTail = 0;
  private admission: Promise<void> = Promise.resolve();
  /** Frames gathered for the next Raft entry (group commit), in call order. */
  private group: FrameGroup | undefined;

  private groupsProposed = 0;
  /** Frames applied or skipped as duplicates since open: what snapshots are counted in. */
  private framesSeen = 0;
  private framesGrouped = 0;
  /** Appends waiting in `admission` (an append may skip the queue only when none waits). */
  private admitting = 0;
  /** The term in which this leader has applied every earlier entry, and the index it waits for. */
  private readyTerm = 0;
  /** Notified whenever `acceptingWrites` may have changed (role, readiness, failure, close). */
  private readonly readiness = new Condition();
  private barrierTerm = 0;
  private barrierIndex = 0;
  private appliedFrames = 0;
  private duplicates = 0;
  private failure: PlexusError | undefined;
  private closed = false;
  private readonly membership: MembershipChanges;
  /** A snapshot install in progress (the apply path waits for it). */
  private installing: Promise<void> | undefined;
  private catchUpTarget: bigint | undefined;
  private catchUpStream: Socket | undefined;
  private snapshotsTaken = 0;
  private snapshotPosition = 0;
  /** A Raft snapshot being taken, off the apply path (`startSnapshot`). */
  private snapshotting: Promise<void> | undefined;
  /** Bytes of entries applied (all time), and where that stood at the last snapshot taken. */
  private appliedBytes = 0;
  private appliedBytesAtSnapshot = 0;
  /** The background write-back of the local log (localWritebackMs), and the one running. */
  private writebackTimer: TimerHandle | undefined;
  private writingBack: Promise<void> | undefined;
  private writtenBackTo = -1;
  /** The last local position a sync of the local log covered (localFsync 'never'). */
  private syncedTo = 0n;
  /**
   * The last position each other member reported on disk in its local log (QUERY on a catch-up
   * stream), the highest answer so far: a local log only grows, so an answer stays true.
   */
  private readonly holding = new Map<number, bigint>();
  /**
   * While a snapshot is installed and the local log lacks records below it, the member sends
   * no Raft message: to the others it looks down, so it neither acknowledges the snapshot nor
   * votes nor leads before it holds every record, and the leader does not count it as having
   * those records when it agrees a compaction cutoff.
   */
  private gated = false;
  /** Positions below this one may be dropped from local logs: agreed through Raft (compaction records). */
  private compactBelow = 1;
  private snapshotsInstalled = 0;
  private recordsCaughtUp = 0;
  private lastCatchUpWarning = 0;
  /** Closed local segments fsynced since they were closed (localFsync 'never'). */
  private readonly syncedSegments: SyncedSegments = new Set();
  /** What waits on this member's leadership (pending appends, read barriers): each one's abort, run when it steps down. */
  private readonly onStepDown = new Set<(why: string) => void>();
  /** Read barriers: the ReadIndex round in flight, and the one gathering the reads that arrive meanwhile. */
  private readonly barrier = new ReadBarrier({
    checkLeader: () => {
      this.checkOpen();
      const role = this.node.status().role;
      if (role !== 'leader') throw this.notLeader(`it is a ${role} and cannot confirm a leader read`);
    },
    confirmLeadership: () =>
      this.untilStepDown(
        this.driver.read(),
        (why) => `${why} before a majority confirmed its leadership for this read; read at the leader`,
      ),
    lastPosition: () => this.local.last,
  });

  private constructor(
    private readonly opts: ReplicatedLogOptions,
    private readonly deps: ReplicaDeps,
    private readonly node: RaftNode,
    private readonly raftStorage: ReplicaRaftStorage,
    private readonly local: FileLog,
    private readonly transport: ReplicaTransport,
    private readonly driver: ReplicaDriver,
    private readonly catchUp: CatchUpServer,
    members: readonly HaMember[],
    descriptor: SnapshotDescriptor | undefined,
  ) {
    this.membership = new MembershipChanges({
      clock: deps.clock,
      node: () => this.node,
      propose: (data) => this.driver.propose(data),
      whenAcceptingWrites: () => this.whenAcceptingWrites(),
      checkOpen: () => this.checkOpen(),
      notLeader: (why) => this.notLeader(why),
      timeoutMs: opts.timeoutMs ?? 10_000,
      promoteHint: opts.promoteHint ?? defaultPromoteHint,
      removed: (id) => {
        if (id !== this.opts.id) this.transport.removePeer(id);
        this.members.delete(id);
      },
      added: (id) => {
        const m = this.members.get(id);
        if (m) this.dialPeer(m);
      },
    });
    for (const m of members) this.members.set(m.id, m);
    // Members known only from the snapshot (their membership records were compacted away).
    for (const m of descriptor?.members ?? []) if (!this.members.has(m.id)) this.members.set(m.id, m);
    this.projectedLast = Number(local.last);
    this.localTail = Number(local.last);
    const snap = raftStorage.snapshot().metadata;
    this.raftApplied = snap.index;
    this.snapshotPosition = descriptor?.lastPosition ?? 0;
    this.compactBelow = descriptor?.compactBelow ?? 1;
    this.remember(
      snap.index,
      descriptor?.lastPosition ?? 0,
      hexBytes(descriptor?.lastBatchId ?? ''),
      BigInt(descriptor?.lastEpoch ?? 0),
    );
  }

  /** Opens (or creates) the member's data directory, starts its transport and Raft driver. */
  static async open(opts: ReplicatedLogOptions, deps: ReplicaDeps): Promise<Replica> {
    const id = opts.id;
    if (!Number.isSafeInteger(id) || id < 1) {
      throw replicationError(
        ReplicationErrorCode.BAD_CONFIG,
        `member id ${String(id)} must be a positive whole number`,
      );
    }
    const members = (opts.members ?? []).map(checkMember);
    const self = members.find((m) => m.id === id);
    if (!self)
      throw replicationError(ReplicationErrorCode.BAD_CONFIG, `the member list does not include this member (${id})`, {
        id,
      });
    if (new Set(members.map((m) => m.id)).size !== members.length) {
      throw replicationError(ReplicationErrorCode.BAD_CONFIG, 'member ids must be distinct');
    }
    for (const [, a] of opts.dial ?? []) checkAddress('dial address', a);
    const logOpts = opts.segmentBytes ? { segmentBytes: opts.segmentBytes } : {};
    const quiet = opts.logger ? { logger: opts.logger } : {};
    const raftDir = join(opts.dir, 'raft');
    // A follower's O_DSYNC journal writes run on the main thread (`softState` switches a
    // leader's to the thread pool): its Ready waits for the write anyway, and the thread
    // pool's two wake-ups per write cost more CPU than the write itself.
    const journalOpts = { ...logOpts, ...quiet, inlineSyncWrites: true };
    let raftStorage = await deps.raft.openStorage(raftDir, journalOpts);
    if (raftStorage.lastIndex() === 0 && !opts.join) {
      // Nothing durable yet (a first start, or a crash before the bootstrap was synced).
      await raftStorage.close();
      raftStorage = await deps.raft.bootstrapStorage(
        raftDir,
        { voters: members.map((m) => m.id).sort((a, b) => a - b), learners: [] },
        new Uint8Array(0),
        journalOpts,
      );
    }
    let local: FileLog | undefined;
    let transport: ReplicaTransport | undefined;
    try {
      const every = opts.snapshotEvery ?? 10_000;
      const retain = opts.snapshotRetain ?? 5_000;
      if (!Number.isSafeInteger(every) || every < 0) {
        throw replicationError(
          ReplicationErrorCode.BAD_CONFIG,
          `snapshotEvery ${String(every)} must be a whole number, 0 or more`,
        );
      }
      if (!Number.isSafeInteger(retain) || retain < 0 || retain > MAX_RETAIN) {
        throw replicationError(
          ReplicationErrorCode.BAD_CONFIG,
          `snapshotRetain ${String(retain)} must be a whole number in 0..${MAX_RETAIN}`,
        );
      }
      for (const [name, v] of [
        ['snapshotRetainBytes', opts.snapshotRetainBytes],
        ['snapshotEveryBytes', opts.snapshotEveryBytes],
      ] as const) {
        if (v !== undefined && (!Number.isSafeInteger(v) || v < 0)) {
          throw replicationError(
            ReplicationErrorCode.BAD_CONFIG,
            `${name} ${String(v)} must be a whole number of bytes, 0 or more`,
          );
        }
      }
      const writebackMs = opts.localWritebackMs ?? 1000;
      if (!Number.isSafeInteger(writebackMs) || writebackMs < 0) {
        throw replicationError(
          ReplicationErrorCode.BAD_CONFIG,
          `localWritebackMs ${String(writebackMs)} must be a whole number, 0 or more`,
        );
      }
      const chunk = opts.catchUpChunkBytes ?? 1024 * 1024;
      if (!Number.isSafeInteger(chunk) || chunk < 1 || chunk > 32 * 1024 * 1024) {
        throw replicationError(
          ReplicationErrorCode.BAD_CONFIG,
          `catchUpChunkBytes ${String(chunk)} must be a whole number in 1..32 MiB`,
        );
      }
      const descriptor = decodeDescriptor(raftStorage.snapshot().data);
      // Without fsyncs (`never`), a power loss can leave damage before the local log's tail: it
      // is cut there, and what was cut is re-applied from the Raft log (local-tail.ts).
      local = await openLocalLog(opts.dir, { ...logOpts, ...quiet }, opts.localFsync ?? 'never', opts.logger);
      // What the local log holds at open is on disk from here on (durableLocalLast). Synced
      // before anything runs: nothing may be applied before the caller's listeners are on.
      const syncedAtOpen = local.last;
      const segmentsSyncedAtOpen: SyncedSegments = new Set();
      if ((opts.localFsync ?? 'never') === 'never')
        await syncLocalLog(join(opts.dir, 'log'), local.segmentFiles, segmentsSyncedAtOpen);
      const holder: { log?: Replica } = {};
      const localLog = local;
      const catchUp = new CatchUpServer(
        local,
        opts.catchUpChunkBytes ?? 1024 * 1024,
        opts.logger,
        () => holder.log?.durableLocalLast ?? localLog.last,
      );
      const random = deps.random;
      const node = new RaftNode({
        id,
        storage: raftStorage,
        random,
        preVote: true,
        checkQuorum: true,
        electionTick: opts.electionTick ?? 10,
        heartbeatTick: opts.heartbeatTick ?? 1,
      });
      const listen = opts.listen ?? splitAddress(self.raftAddress);
      transport = await deps.raft.startTransport({
        id,
        host: listen.host ?? '127.0.0.1',
        port: listen.port ?? 0,
        onMessage: (m) => holder.log?.receive(m),
        onStream: (from, s) => catchUp.serve(from, s),
        retryMs: 20,
        maxRetryMs: 200,
        ...(opts.tls ? { tls: opts.tls } : {}),
        ...(opts.logger ? { logger: opts.logger } : {}),
      });
      const rs = raftStorage;
      const driver = deps.raft.startDriver({
        node,
        // The driver stops when persisting fails; the wrapper records why, for status().
        storage: {
          append: (es) => rs.append(es),
          setHardState: (h) => rs.setHardState(h),
          applySnapshot: (sn) => {
            // A data snapshot: silent until installed (see `gated`), its acknowledgement included.
            if (sn.data.length > 0) holder.log?.gate();
            rs.applySnapshot(sn);
          },
          compact: (sn) => rs.compact(sn),
          sync: () =>
            rs.sync().catch((err: unknown) => {
              const code = isPlexusError(err) ? err.code : String(err);
              throw (holder.log as Replica).fail(
                replicationError(
                  ReplicationErrorCode.STOPPED,
                  `persisting the Raft log failed (${code}); remove the cause and restart the member`,
                  { cause: code },
                  err,
                ),
              );
            }),
        },
        send: (ms) => holder.log?.sendRaft(ms),
        flushSends: () => holder.log?.flushRaft(),
        applier: {
          apply: (es) => (holder.log as Replica).applyEntries(es),
          restore: (s) => (holder.log as Replica).restore(s),
        },
        tickMs: opts.tickMs ?? 100,
        timeoutMs: opts.timeoutMs ?? 10_000,
        onSoftState: (s) => holder.log?.softState(s),
        beforeReady: () => holder.log?.flushGroup(),
        onStop: (err) => {
          const code = isPlexusError(err) ? err.code : String(err);
          holder.log?.fail(
            isPlexusError(err, ReplicationErrorCode.STOPPED)
              ? err
              : replicationError(
                  ReplicationErrorCode.STOPPED,
                  `persisting the Raft state failed (${code}); remove the cause and restart the member`,
                  { cause: code },
                  err,
                ),
          );
        },
        ...(opts.logger ? { logger: opts.logger } : {}),
      });
      const log = new Replica(opts, deps, node, raftStorage, local, transport, driver, catchUp, members, descriptor);
      holder.log = log;
      log.syncedTo = syncedAtOpen;
      // Closed segments need no second fsync from the write-back.
      for (const name of segmentsSyncedAtOpen) log.syncedSegments.add(name);
      for (const m of log.members.values()) if (m.id !== id) log.dialPeer(m);
      // A local log behind the stored snapshot (a crash during an install, or a tail lost with
      // localFsync 'never'): pull the missing records before applying anything after it.
      if (descriptor) {
        if (local.last < BigInt(descriptor.lastPosition)) log.gate();
        log.startInstall(descriptor);
      }
      driver.start();
      log.startWriteback();
      return log;
    } catch (e) {
      await transport?.close();
      await local?.close();
      await raftStorage.close();
      throw e;
    }
  }

  // ---- LogStorage ----

  get first(): bigint {
    return this.local.first;
  }
  get last(): bigint {
    return this.local.last;
  }
  get highestEpoch(): bigint {
    return this.local.highestEpoch;
  }

  /** The Raft transport's port (tests put proxies in front of it). */
  get raftPort(): number {
    return this.transport.port;
  }

  /** This member's Raft role now (`status().role`, without building the status). */
  get role(): Role {
    return this.node.role;
  }

  /** This member leads and accepts appends now (`status().acceptingWrites`, without building the status). */
  get acceptingWrites(): boolean {
    return this.node.role === 'leader' && this.readyTerm === this.node.term && !this.failure && !this.closed;
  }

  /**
   * Resolves at the next change that may flip `acceptingWrites` (this member winning or losing
   * leadership, applying the entries of earlier terms, failing or closing): `true`, or `false`
   * once `timeoutMs` passed first; rejects when `signal` aborts. Callers re-test what they wait for.
   */
  readinessChanged(opts: WaitOptions): Promise<boolean> {
    return this.readiness.wait(opts);
  }

  async append(payloads: readonly Uint8Array[], opts: AppendOptions = {}): Promise<AppendResult> {
    this.checkOpen();
    if (!Array.isArray(payloads) || payloads.length === 0) {
      throw new PlexusError('PLX_STORAGE_BAD_INPUT', 'append needs at least one payload');
    }
    const batchId = opts.batchId ?? this.deps.randomBytes(16);
    if (!(batchId instanceof Uint8Array) || batchId.length !== 16) {
      throw new PlexusError('PLX_STORAGE_BAD_INPUT', 'batchId must be 16 bytes');
    }
    // Appends pass the leadership check one at a time, in call order, so positions follow call
    // order. With none waiting and this member accepting writes, the check passes at once.
    if (this.admitting > 0 || !this.acceptingWrites) {
      const deadline = this.deps.clock.now() + (this.opts.timeoutMs ?? 10_000);
      this.admitting++;
      const turn = this.admission.then(() => this.whenAcceptingWrites(deadline));
      this.admission = turn.then(
        () => {
          this.admitting--;
        },
        () => {
          this.admitting--;
        },
      );
      // `admission` (and the counter) settles before this continuation, and this continuation
      // (the proposal) runs before the next waiting append's check.
      await turn;
    }
    // From here to the proposal nothing awaits: the compare-and-set and the positions hold.
    const term = this.node.term;
    if (opts.epoch !== undefined) {
      if (opts.epoch < this.local.highestEpoch) throw fencedError(opts.epoch, this.local.highestEpoch);
      if (opts.epoch > BigInt(term)) {
        throw this.notLeader(`this leader's term ${term} is older than the caller's epoch ${opts.epoch}`);
      }
    }
    const expected = BigInt(this.projectedLast);
    if (opts.expectedLast !== undefined && opts.expectedLast !== expected) {
      throw conflictError(opts.expectedLast, expected);
    }
    const first = this.projectedLast + 1;
    const frame = encodeEvfr({ batchId, first, epoch: BigInt(term), records: payloads });
    // The frame joins the group proposed as one Raft entry before the driver takes its next
    // Ready; its positions are taken now (the next append's compare-and-set sees them).
    const done = this.gather(frame, term, first, first + payloads.length - 1, batchId);
    // A leader that steps down (check-quorum, a newer term) fails it at once, not after timeoutMs.
    await this.untilStepDown(
      done,
      (why) =>
        `${why}; the append's outcome is unknown (it may still commit under the next leader): retry it with the same idempotency key`,
      { outcomeUnknown: true },
    );
    return { first: BigInt(first), last: BigInt(first + payloads.length - 1), batchId };
  }

  /**
   * Adds an append's frame to the group proposed as one Raft entry when the driver next looks
   * for a Ready: appends that arrive while a Ready is written (or in the same turn) share an
   * entry, a journal record and a wire entry. Resolves once that entry is committed and applied.
   */
  private gather(frame: Uint8Array, term: number, first: number, last: number, batchId: Uint8Array): Promise<number> {
    let g = this.group;
    const solo = frame.length >= SOLO_FRAME_BYTES;
    if (g && (solo || g.solo || g.term !== term || g.bytes + frame.length > (this.opts.groupCommitBytes ?? 0))) {
      this.flushGroup();
      g = undefined;
    }
    if (!g) {
      let resolve!: (index: number) => void;
      let reject!: (err: unknown) => void;
      const done = new Promise<number>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      g = { term, first, last, batchId, frames: [], bytes: 0, solo, done, resolve, reject };
      this.group = g;
      if (!this.driver.wake()) this.flushGroup();
    }
    if (this.group === g) {
      g.frames.push(frame);
      g.bytes += frame.length;
      g.last = last;
      g.batchId = batchId;
      this.projectedLast = last;
    }
    return g.done;
  }

  /** Proposes the gathered frames as one entry (the driver's `beforeReady`). Never throws. */
  private flushGroup(): void {
    const g = this.group;
    if (!g) return;
    this.group = undefined;
    if (g.frames.length === 0) {
      // Gathered on a stopped driver: nothing was added; fail like a proposal there.
      g.reject(new PlexusError('PLX_RAFT_PROPOSAL_LOST', 'the node is stopped'));
      return;
    }
    if (this.closed || this.failure) {
      g.reject(new PlexusError('PLX_RAFT_PROPOSAL_LOST', 'the member stopped before the append was proposed'));
      return;
    }
    if (this.node.term !== g.term || !this.acceptingWrites) {
      // Leadership changed since these appends passed their checks: their positions are void.
      if (this.node.term === g.term && this.projectedLast === g.last) this.projectedLast = g.first - 1;
      g.reject(this.notLeader(`it stopped leading term ${g.term} before the append was proposed`));
      return;
    }
    const data = g.frames.length === 1 ? (g.frames[0] as Uint8Array) : concatFrames(g.frames, g.bytes);
    const before = this.node.lastIndex;
    const done = this.driver.propose(data);
    const index = this.node.lastIndex;
    if (index > before) {
      // The entry is in this leader's log: its positions are taken until leadership changes.
      this.groupsProposed++;
      this.framesGrouped += g.frames.length;
      this.remember(index, g.last, g.batchId, BigInt(g.term));
    } else if (this.projectedLast === g.last) {
      // Refused (a leadership transfer in progress): the positions are free again.
      this.projectedLast = g.first - 1;
    }
    done.then(g.resolve, g.reject);
  }

  read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.local.read(from, opts);
  }

  readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.local.readBackward(from, opts);
  }

  /** Only a no-op is possible: committed records are never removed from a replicated log. */
  async truncateAfter(position: bigint): Promise<void> {
    if (position >= this.local.last) return;
    throw replicationError(
      ReplicationErrorCode.UNSUPPORTED,
      `cannot remove committed records after ${position}: the replicated log holds ${this.local.last} committed positions`,
      { position, last: this.local.last },
    );
  }

  /**
   * Compacts this member's local log below `position`, but never below the position the
   * members agreed on through Raft (`agreeCompaction`): records a member may still need to
   * catch up stay.
   */
  async compactBefore(position: bigint): Promise<void> {
    const below = BigInt(this.compactBelow);
    // The records that stay must not depend on the compacted ones' Raft entries: make them durable first.
    await this.syncLocal();
    return this.local.compactBefore(position < below ? position : below);
  }

  /** The local log's segment files (the event store's compaction works on closed segments). */
  get segmentFiles(): readonly string[] {
    return this.local.segmentFiles;
  }

  /** Positions below this one may be compacted away on this member (`compactBefore` stops there). */
  get compactionLimit(): bigint {
    return BigInt(this.compactBelow);
  }

  /**
   * Leader only: agrees, through Raft, that every member may drop its records below
   * min(`wanted`, the position every member of the configuration has applied + 1), and
   * resolves with the agreed position once committed. A member that is down or far behind
   * holds the agreement back (it still needs those records from the others).
   */
  async agreeCompaction(wanted: bigint): Promise<bigint> {
    await this.whenAcceptingWrites();
    const held = await this.holdingLimit();
    const safe = Math.min(this.safeCompactionPosition(), held);
    const below = Math.min(Number(wanted), safe);
    if (below <= this.compactBelow) return BigInt(this.compactBelow);
    await this.driver.propose(encodeCompactMarker(below));
    return BigInt(this.compactBelow);
  }

  /**
   * The last local position this member keeps through a crash or a power loss: everything
   * written with localFsync 'always' or 'batch', what the last sync covered with 'never' (all
   * of it when the background write-back is off: such a member promises nothing more).
   */
  get durableLocalLast(): bigint {
    const last = this.local.last;
    if ((this.opts.localFsync ?? 'never') !== 'never' || (this.opts.localWritebackMs ?? 1000) === 0) return last;
    // biome-ignore lint/complexity/useMathMinMax: bigint operands, which Math.min does not take
    return this.syncedTo < last ? this.syncedTo : last;
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
    const s = this.node.status();
    if (s.role !== 'leader' || !s.progress) return this.compactBelow;
    const ids = [...s.progress.keys()].filter((id) => id !== s.id);
    const timeoutMs = Math.min(this.opts.catchUpTimeoutMs ?? 5000, 2000);
    await Promise.all(
      ids.map(async (id) => {
        let socket: Socket | undefined;
        try {
          socket = await this.transport.openStream(id, timeoutMs);
          const h = await queryHolding(socket, timeoutMs);
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
      if (d === undefined) return this.compactBelow;
      low = Math.min(low, Number(d) + 1);
    }
    return low;
  }

  /** One past the lowest position any member of the configuration (this one included) has. */
  private safeCompactionPosition(): number {
    const s = this.node.status();
    if (s.role !== 'leader' || !s.progress) return this.compactBelow;
    let low = Number.POSITIVE_INFINITY;
    for (const [id, p] of s.progress) {
      const mark = this.markAt(id === s.id ? this.raftApplied : Math.min(p.match, this.raftApplied));
      // Unknown (behind the window, or a new member with nothing yet): hold the agreement.
      if (!mark) return this.compactBelow;
      low = Math.min(low, mark[1]);
    }
    return Number.isFinite(low) ? low + 1 : this.compactBelow;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.readiness.notify();
    this.catchUpStream?.destroy();
    this.catchUp.close();
    await this.driver.stop();
    this.flushGroup();
    if (this.writebackTimer !== undefined) this.deps.clock.clearTimeout(this.writebackTimer);
    await this.installing?.catch(() => undefined);
    await this.snapshotting;
    await this.writingBack;
    this.membership.close();
    await this.transport.close();
    await this.raftStorage.close().catch(() => undefined);
    const files = [...this.local.segmentFiles];
    await this.local.close();
    // localFsync 'never': a clean close makes the local log durable, so the next open need not check it all.
    if ((this.opts.localFsync ?? 'never') === 'never') {
      await markCleanClose(this.opts.dir, files).catch((err: unknown) => {
        this.opts.logger?.warn(
          'replicated log: could not mark the local log closed cleanly; the next open checks it all',
          { id: this.opts.id, error: String(err) },
        );
      });
    }
  }

  // ---- cluster API ----

  /** Called on every replica after a committed batch is in its local log. Returns an unsubscribe function. */
  onApply(listener: (batch: AppliedBatch) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Called on every member when a compaction cutoff agreed through Raft is applied (with the
   * position below which records may now be dropped). Returns an unsubscribe function.
   */
  onCompactionAgreed(listener: (below: bigint) => void): () => void {
    this.compactionListeners.add(listener);
    return () => this.compactionListeners.delete(listener);
  }

  private notifyCompaction(below: bigint): void {
    for (const l of this.compactionListeners) {
      try {
        l(below);
      } catch (err) {
        this.opts.logger?.warn('replicated log: an onCompactionAgreed listener threw', { error: String(err) });
      }
    }
  }

  status(): ReplicatedLogStatus {
    const s = this.node.status();
    const leader = s.lead;
    let followers: FollowerStatus[] | undefined;
    if (s.role === 'leader' && s.progress) {
      followers = [];
      const top = this.positionAt(s.lastIndex);
      for (const [id, p] of s.progress) {
        if (id === s.id) continue;
        followers.push({
          id,
          match: p.match,
          next: p.next,
          state: p.state,
          learner: p.learner,
          lagEntries: Math.max(0, s.lastIndex - p.match),
          lagPositions: Math.max(0, top - this.positionAt(p.match)),
        });
      }
    }
    return {
      id: s.id,
      role: s.role,
      leader,
      leaderAddress: this.members.get(leader)?.advertise,
      term: s.term,
      commit: s.commit,
      applied: this.raftApplied,
      lastPosition: this.local.last,
      highestEpoch: this.local.highestEpoch,
      acceptingWrites: this.acceptingWrites,
      voters: s.confState.voters,
      learners: s.confState.learners,
      members: [...this.members.values()],
      appendEntriesApplied: this.appliedFrames,
      duplicatesSkipped: this.duplicates,
      appendGroupsProposed: this.groupsProposed,
      appendsGrouped: this.framesGrouped,
      failure: this.failure?.message,
      ...(followers ? { followers } : {}),
      snapshotIndex: this.raftStorage.snapshot().metadata.index,
      snapshotPosition: BigInt(this.snapshotPosition),
      snapshotsTaken: this.snapshotsTaken,
      snapshotsInstalled: this.snapshotsInstalled,
      catchUpTarget: this.catchUpTarget,
      recordsCaughtUp: this.recordsCaughtUp,
      recordsServed: this.catchUp.stats.recordsSent,
    };
  }

  /**
   * Adds a member (leader only): replicates its addresses, adds it as a learner, waits until
   * it has caught up, then makes it a voter. Start the new member with `join: true` first.
   */
  addMember(member: HaMember, opts: { voter?: boolean; catchUpMs?: number } = {}): Promise<void> {
    return this.membership.add(member, opts);
  }

  /** Removes a member (leader only); a leader removing itself steps down once the change commits. */
  removeMember(id: number): Promise<void> {
    return this.membership.remove(id);
  }

  /** Hands leadership to `to` (rolling upgrades: move it off a member before stopping it). Resolves once `to` leads. */
  transferLeadership(to: number, waitMs = 10_000): Promise<void> {
    return this.membership.transfer(to, waitMs);
  }

  /**
   * A linearizable read point (leader only): resolves with the local log's last position once
   * a ReadIndex round (the Raft core confirms with a majority of voters, by a heartbeat round,
   * that this member still leads, at a commit index no older than the read's arrival) is
   * applied here. Everything acknowledged anywhere before the call is then in the local log
   * and in the store. No clock is involved. Concurrent calls share rounds: a call joins the
   * round that has not started yet, so one round serves every read that arrived before it
   * began. A member that is not the leader, or steps down before the round completes (a
   * deposed leader that had not noticed), refuses with PLX_REPLICATION_NOT_LEADER.
   */
  readBarrier(): Promise<bigint> {
    return this.barrier.wait();
  }

  /** ReadIndex rounds run so far (each one serves every read barrier that joined it). */
  get readBarrierRounds(): number {
    return this.barrier.rounds;
  }

  /** Makes learner `id` a voter once it has caught up (MembershipChanges.promote). */
  promoteMember(id: number, opts: { catchUpMs?: number } = {}): Promise<void> {
    return this.membership.promote(id, opts);
  }

  /** Changes the address peers are dialled at (tests put proxies in front of members). */
  setDialAddress(id: number, address: string): void {
    checkAddress('dial address', address);
    this.dialOverride.set(id, address);
    this.transport.setPeer(id, address);
  }

  // ---- internals ----

  private gate(): void {
    this.gated = true;
  }

  private sendRaft(ms: Parameters<ReplicaTransport['send']>[0]): void {
    if (!this.gated) this.transport.send(ms);
  }

  private flushRaft(): void {
    this.transport.flush();
  }

  private receive(m: Parameters<ReplicaDriver['receive']>[0]): void {
    this.driver.receive(m);
  }

  private dialPeer(m: HaMember): void {
    if (m.id === this.opts.id) return;
    const address = this.dialOverride.get(m.id) ?? this.opts.dial?.get(m.id) ?? m.raftAddress;
    // Port 0: the address is not known yet (set later with setDialAddress).
    if (splitAddress(address).port === 0) return;
    this.transport.setPeer(m.id, address);
  }

  private checkOpen(): void {
    if (this.failure) {
      throw replicationError(
        ReplicationErrorCode.STOPPED,
        `member ${this.opts.id} stopped: ${this.failure.message}`,
        {},
        this.failure,
      );
    }
    if (this.closed) throw replicationError(ReplicationErrorCode.STOPPED, `member ${this.opts.id} is closed`);
  }

  private notLeader(why: string): PlexusError {
    const s = this.node.status();
    const leader = s.role === 'leader' ? 0 : s.lead;
    const addr = this.members.get(leader)?.advertise;
    const where =
      leader === 0 ? 'no leader is known yet; retry shortly' : `send it to the leader, member ${leader} at ${addr}`;
    return replicationError(
      ReplicationErrorCode.NOT_LEADER,
      `member ${this.opts.id} does not take writes (${why}): ${where}`,
      {
        leader,
        leaderAddress: addr,
        term: s.term,
      },
    );
  }

  /** Resolves once this member is a leader that has applied every entry of earlier terms. */
  private async whenAcceptingWrites(end = this.deps.clock.now() + (this.opts.timeoutMs ?? 10_000)): Promise<void> {
    if (this.acceptingWrites) return;
    for (;;) {
      this.checkOpen();
      const s = this.node.status();
      if (s.role !== 'leader') throw this.notLeader(`it is a ${s.role}`);
      if (this.readyTerm === s.term) return;
      this.observeLeadership();
      if (this.readyTerm === s.term) return;
      if (this.deps.clock.now() > end) {
        throw replicationError(
          ReplicationErrorCode.NOT_READY,
          `leader ${s.id} has not applied the entries of earlier terms yet (applied ${this.raftApplied}, needs ${this.barrierIndex}); retry`,
          { applied: this.raftApplied, needs: this.barrierIndex },
        );
      }
      await this.readiness.wait({ timeoutMs: end - this.deps.clock.now() + 1 });
    }
  }

  /** A leader of a new term waits until it has applied its whole log as of winning the election. */
  private observeLeadership(): void {
    const s = this.node.status();
    if (s.role !== 'leader') return;
    if (this.barrierTerm !== s.term) {
      this.barrierTerm = s.term;
      this.barrierIndex = s.lastIndex;
    }
    if (this.readyTerm !== s.term && this.raftApplied >= this.barrierIndex) {
      this.readyTerm = s.term;
      this.projectedLast = Number(this.local.last);
      this.readiness.notify();
    }
  }

  private softState(s: SoftState): void {
    // A follower writes its journal on the main thread (its reply waits for the write anyway);
    // a leader through the thread pool, so that it takes requests and acknowledgements while
    // its write is pending rather than after it.
    this.raftStorage.setInlineSyncWrites(s.role !== 'leader');
    this.readiness.notify();
    if (s.role === 'leader') this.observeLeadership();
    else {
      this.readyTerm = 0;
      if (this.onStepDown.size > 0) {
        const why = `it stepped down in term ${this.node.status().term} (it lost its majority, or a newer term began)`;
        for (const abort of [...this.onStepDown]) abort(why);
        this.onStepDown.clear();
      }
    }
  }

  /**
   * Settles with `p`, or rejects with PLX_REPLICATION_NOT_LEADER (`message(why)`) as soon as
   * this member stops leading, whichever comes first.
   */
  private untilStepDown<T>(
    p: Promise<T>,
    message: (why: string) => string,
    details: Record<string, unknown> = {},
  ): Promise<T> {
    // Callers check leadership just before, with no await since: a step-down after that
    // reaches softState (and the abort below) with the Ready that reports it.
    const refuse = (why: string) => {
      const e = this.notLeader(message(why));
      return replicationError(e.code as ReplicationCode, e.message, { ...e.details, ...details });
    };
    return new Promise<T>((resolve, reject) => {
      const abort = (why: string) => reject(refuse(why));
      this.onStepDown.add(abort);
      p.then(
        (v) => {
          this.onStepDown.delete(abort);
          resolve(v);
        },
        (e: unknown) => {
          this.onStepDown.delete(abort);
          reject(e);
        },
      );
    });
  }

  private remember(index: number, lastPosition: number, batchId: Uint8Array, epoch: bigint): void {
    const p = this.positions;
    while (p.length > 0 && (p[p.length - 1] as Mark)[0] >= index) p.pop();
    p.push([index, lastPosition, batchId, epoch, this.framesSeen]);
    // Trimmed in steps of 4,096, not one mark per entry (a shift of the whole window each time).
    if (p.length > POSITION_WINDOW + 4096) p.splice(0, p.length - POSITION_WINDOW);
  }

  /** The last frame at or below Raft index `index`, when the window still holds one. */
  private markAt(index: number): Mark | undefined {
    return this.lastMarkWith(0, index);
  }

  /** The newest mark with at most `frames` frames counted up to it, when the window still holds one. */
  private markByFrames(frames: number): Mark | undefined {
    return this.lastMarkWith(4, frames);
  }

  /** The newest mark whose field `field` (ascending along the window) is at most `bound`. */
  private lastMarkWith(field: 0 | 4, bound: number): Mark | undefined {
    const p = this.positions;
    let lo = 0;
    let hi = p.length - 1;
    let best = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (((p[mid] as Mark)[field] as number) <= bound) {
        best = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return best >= 0 ? p[best] : undefined;
  }

  /** The last position of the frames up to Raft index `index` (as far as the window knows). */
  private positionAt(index: number): number {
    const m = this.markAt(index);
    if (m) return m[1];
    const oldest = this.positions[0];
    return oldest ? oldest[1] - 1 : 0;
  }

  /**
   * Installs a received snapshot: the founding one (index 1, no data) needs nothing; a
   * descriptor needs the local log to reach its last position (pulled from other members)
   * before the entries after it are applied. The driver has already made the snapshot durable
   * in the Raft log, so a crash in here resumes the install on restart (see `open`).
   */
  private async restore(s: Snapshot): Promise<void> {
    let d: SnapshotDescriptor | undefined;
    try {
      d = decodeDescriptor(s.data);
    } catch (err) {
      throw this.fail(err as PlexusError);
    }
    if (!d) {
      this.raftApplied = Math.max(this.raftApplied, s.metadata.index);
      return;
    }
    if (d.index !== s.metadata.index || d.term !== s.metadata.term) {
      throw this.fail(
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
  private startInstall(d: SnapshotDescriptor, received = false): Promise<void> {
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
    for (const m of d.members) {
      if (!this.members.has(m.id)) {
        this.members.set(m.id, m);
        this.dialPeer(m);
      }
    }
    const target = BigInt(d.lastPosition);
    if (this.local.last < target) {
      this.catchUpTarget = target;
      let wait = 20;
      while (this.local.last < target) {
        this.checkOpen();
        const before = this.local.last;
        await this.catchUpRound(d.lastPosition);
        if (this.local.last > before) wait = 20;
        else if (this.local.last < target) {
          await this.sleep(wait);
          wait = Math.min(wait * 2, 1000);
        }
      }
      this.catchUpTarget = undefined;
    }
    // The record at the snapshot's last position must be the one the snapshot names.
    if (d.lastPosition > 0 && target >= this.local.first && this.local.first > 0n) {
      const [rec] = await this.local.read(target, { maxCount: 1, maxBytes: 1 });
      if (!rec || rec.position !== target || hex(rec.batchId) !== d.lastBatchId) {
        throw this.fail(
          replicationError(
            ReplicationErrorCode.DIVERGED,
            `the local log holds batch ${rec ? hex(rec.batchId) : 'none'} at position ${target} where the snapshot at Raft index ${d.index} has ${d.lastBatchId}: the replicas diverged; the member stops`,
            { index: d.index, position: d.lastPosition },
          ),
        );
      }
    }
    this.localTail = Number(this.local.last);
    if (this.raftApplied < d.index) this.raftApplied = d.index;
    this.positions.length = 0;
    this.remember(d.index, d.lastPosition, hexBytes(d.lastBatchId), BigInt(d.lastEpoch));
    this.gated = false;
    if (received) this.snapshotsInstalled++;
    if ((d.compactBelow ?? 1) > this.compactBelow) this.compactBelow = d.compactBelow ?? 1;
    if (d.index >= this.raftStorage.snapshot().metadata.index) this.snapshotPosition = d.lastPosition;
  }

  /** Tries each source once (the leader first): resolves when one of them is done or all failed. */
  private async catchUpRound(to: number): Promise<void> {
    const s = this.node.status();
    const ids = [...this.members.keys()].filter((id) => id !== this.opts.id).sort((a, b) => a - b);
    const order = s.lead && s.lead !== this.opts.id ? [s.lead, ...ids.filter((id) => id !== s.lead)] : ids;
    const timeoutMs = this.opts.catchUpTimeoutMs ?? 5000;
    let compacted = 0;
    for (const id of order) {
      this.checkOpen();
      let socket: Socket | undefined;
      try {
        socket = await this.transport.openStream(id, timeoutMs);
        this.catchUpStream = socket;
        if (this.closed) return;
        await fetchRecords(socket, {
          local: this.local,
          to,
          chunkBytes: this.opts.catchUpChunkBytes ?? 1024 * 1024,
          timeoutMs,
          stopped: () => this.closed || this.failure !== undefined,
          onChunk: (runs) => {
            // The records are in the local log now: listeners see them as applied batches.
            for (const run of runs) {
              const a = run[0] as LogRecord;
              const b = run[run.length - 1] as LogRecord;
              this.recordsCaughtUp += run.length;
              this.notify({
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
        if (this.deps.clock.now() - this.lastCatchUpWarning > 1000) {
          this.lastCatchUpWarning = this.deps.clock.now();
          this.opts.logger?.warn('replicated log: catch-up from a member failed; trying again', {
            id: this.opts.id,
            source: id,
            last: this.local.last,
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
      throw this.fail(
        replicationError(
          ReplicationErrorCode.CATCH_UP_UNAVAILABLE,
          `member ${this.opts.id} needs positions ${this.local.last + 1n}..${to}, which every other member compacted away; stop it, copy log/ (and the store's archive/) of a stopped member into its data directory, leave raft/ empty and start it with join again`,
          { from: this.local.last + 1n, to },
        ),
      );
    }
  }

  /** localFsync 'never': makes the local log durable as far as it is written (see local-tail.ts). */
  private async syncLocal(): Promise<void> {
    if ((this.opts.localFsync ?? 'never') !== 'never') return;
    const upTo = this.local.last;
    await syncLocalLog(join(this.opts.dir, 'log'), this.local.segmentFiles, this.syncedSegments);
    if (upTo > this.syncedTo) this.syncedTo = upTo;
  }

  /**
   * Takes a Raft snapshot `snapshotRetain` entries behind the applied index once
   * `snapshotEvery` entries were applied since the last one, and compacts the Raft log
   * before it. Started at the end of an apply (after the local appends it made are done)
   * and not awaited there: applying goes on while the local log is made durable.
   */
  private async maybeSnapshot(): Promise<void> {
    const every = this.opts.snapshotEvery ?? 10_000;
    if (every <= 0) return;
    const retain = this.opts.snapshotRetain ?? 5_000;
    const current = this.raftStorage.snapshot().metadata.index;
    // The core's applied index (entries of earlier Readies): a snapshot may not go past it.
    const applied = Math.min(this.raftApplied, this.node.status().applied);
    // Counted in appends, not entries: an entry may carry many appends (group commit), and
    // what the Raft log holds in memory grows with the appends.
    const top = this.markAt(applied);
    if (!top) return;
    let mark = this.markByFrames(top[4] - retain);
    const everyBytes = this.opts.snapshotEveryBytes ?? 64 * 1024 * 1024;
    const byBytes = everyBytes > 0 && this.appliedBytes - this.appliedBytesAtSnapshot >= everyBytes;
    if (!byBytes) {
      if (!mark || mark[0] <= current) return;
      if (mark[4] - (this.markAt(current)?.[4] ?? 0) < every) return;
    }
    // Keep at most snapshotRetainBytes of entries: a later snapshot point when the retained
    // appends are large.
    const retainBytes = this.opts.snapshotRetainBytes ?? 8 * 1024 * 1024;
    const lo = Math.max(mark?.[0] ?? current, current);
    const kept = this.raftStorage.entries(lo + 1, top[0] + 1);
    let bytes = 0;
    let from = top[0];
    for (let i = kept.length - 1; i >= 0; i--) {
      const e = kept[i] as Entry;
      bytes += e.data.length;
      if (bytes > retainBytes) break;
      from = e.index - 1;
    }
    if (from > lo) {
      const later = this.markAt(from);
      if (later && later[0] > lo) mark = later;
    }
    if (!mark || mark[0] <= current) return;
    const at = mark[0];
    const bytesThen = this.appliedBytes;
    try {
      // The Raft entries up to `at` go away: the local records derived from them must be durable.
      await this.syncLocal();
      // Meanwhile an installed snapshot may have covered `at` already.
      if (this.closed || this.raftStorage.snapshot().metadata.index >= at) return;
      const meta = this.node.compact(at, new Uint8Array(0)).metadata;
      const data = encodeDescriptor({
        index: at,
        term: meta.term,
        lastPosition: mark[1],
        lastBatchId: mark[1] > 0 ? hex(mark[2]) : '',
        lastEpoch: String(mark[1] > 0 ? mark[3] : 0n),
        members: [...this.members.values()],
        compactBelow: this.compactBelow,
      });
      this.raftStorage.compact({ metadata: meta, data });
      this.snapshotsTaken++;
      this.appliedBytesAtSnapshot = bytesThen;
      this.snapshotPosition = mark[1];
    } catch (err) {
      this.opts.logger?.warn('replicated log: taking a Raft snapshot failed; the log stays as it is', {
        id: this.opts.id,
        index: at,
        error: String(err),
      });
    }
  }

  /**
   * Applies committed entries in order. The local appends of one call are issued without
   * waiting for each other (the log keeps call order and shares one fsync among them) and
   * awaited together before the driver acknowledges anything of this batch.
   */
  private async applyEntries(entries: readonly Entry[]): Promise<void> {
    if (this.installing) await this.installing;
    const pending: Promise<AppliedBatch>[] = [];
    const settle = async () => {
      const done = await Promise.all(pending.splice(0));
      for (const b of done) this.notify(b);
    };
    try {
      for (const e of entries) {
        if (e.type === 'conf-change') this.membership.applied(e);
        else if (e.data.length === 0) {
          // a new leader's first entry
        } else if (isCompactMarker(e.data)) {
          const below = Number(new DataView(e.data.buffer, e.data.byteOffset, 12).getBigUint64(4, true));
          if (Number.isSafeInteger(below) && below > this.compactBelow) {
            this.compactBelow = below;
            this.notifyCompaction(BigInt(below));
          }
        } else if (isMeta(e.data)) {
          let m: HaMember;
          try {
            m = decodeMeta(e.data);
          } catch (err) {
            throw this.fail(
              replicationError(
                ReplicationErrorCode.DIVERGED,
                `committed entry ${e.index} is a membership record that does not decode`,
                {
                  index: e.index,
                  reason: String(err),
                },
              ),
            );
          }
          this.members.set(m.id, m);
          this.dialPeer(m);
        } else {
          for (const frame of this.decodeFrames(e)) {
            if (frame.first === this.localTail + 1) pending.push(this.appendLocal(e, frame));
            else {
              await settle();
              await this.skipDuplicate(e, frame);
            }
          }
        }
      }
      await settle();
    } catch (err) {
      // Let every issued append finish (or fail) before the driver stops the member.
      await Promise.allSettled(pending);
      throw err;
    }
    const lastEntry = entries[entries.length - 1];
    if (lastEntry) this.raftApplied = lastEntry.index;
    for (const e of entries) this.appliedBytes += e.data.length;
    this.observeLeadership();
    this.startSnapshot();
  }

  /**
   * Starts `maybeSnapshot` unless one runs: the snapshot waits for the local log to be durable
   * (an fsync of everything written since the last one), and applying goes on meanwhile.
   */
  private startSnapshot(): void {
    if (this.snapshotting !== undefined || this.closed) return;
    const p = this.maybeSnapshot()
      .catch((err: unknown) => {
        this.opts.logger?.warn('replicated log: taking a Raft snapshot failed; the log stays as it is', {
          id: this.opts.id,
          error: String(err),
        });
      })
      .finally(() => {
        if (this.snapshotting === p) this.snapshotting = undefined;
      });
    this.snapshotting = p;
  }

  /** localFsync 'never' and localWritebackMs > 0: writes the local log back every localWritebackMs. */
  private startWriteback(): void {
    const ms = this.opts.localWritebackMs ?? 1000;
    if ((this.opts.localFsync ?? 'never') !== 'never' || ms === 0) return;
    const round = () => {
      if (this.closed) return;
      this.writebackTimer = this.deps.clock.setTimeout(round, ms);
      const tail = this.localTail;
      if (this.writingBack !== undefined || tail === this.writtenBackTo) return;
      const p = this.syncLocal()
        .then(
          () => {
            this.writtenBackTo = tail;
          },
          (err: unknown) => {
            // A segment removed by a compaction meanwhile: the next round writes back what is there.
            if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
            this.opts.logger?.warn('replicated log: background write-back of the local log failed', {
              id: this.opts.id,
              error: String(err),
            });
          },
        )
        .finally(() => {
          if (this.writingBack === p) this.writingBack = undefined;
        });
      this.writingBack = p;
    };
    this.writebackTimer = this.deps.clock.setTimeout(round, ms);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((r) => this.deps.clock.setTimeout(r, ms));
  }

  /** The EVFR frames of a committed entry (one per append it carries, laid end to end). */
  private decodeFrames(e: Entry): EvfrFrame[] {
    try {
      // The body checksums are not recomputed: an entry's bytes were checked on the way in,
      // by the Raft message's checksum (received) or the journal record's (read back from
      // disk), or this leader encoded them and still holds them. Headers are still checked.
      const frames: EvfrFrame[] = [];
      const data = e.data;
      let at = 0;
      while (at < data.length) {
        const d = decodeEvfr(at === 0 ? data : data.subarray(at), { bodyChecked: true });
        if (d.kind !== 'frame')
          throw new PlexusError('PLX_EVFR_BAD_FRAME', 'the frame is incomplete', { reason: 'length' });
        frames.push(d.frame);
        at += d.consumed;
      }
      return frames;
    } catch (err) {
      throw this.fail(
        replicationError(
          ReplicationErrorCode.DIVERGED,
          `committed entry ${e.index} is not a valid EVFR frame: ${String(err)}`,
          {
            index: e.index,
          },
        ),
      );
    }
  }

  /** Appends a frame that continues the local log, with its batch id and its epoch as fencing epoch. */
  private appendLocal(e: Entry, frame: EvfrFrame): Promise<AppliedBatch> {
    const expectedLast = BigInt(this.localTail);
    this.localTail = frame.last;
    const p = this.local.append(frame.records, { batchId: frame.batchId, expectedLast, epoch: frame.epoch }).then(
      (r): AppliedBatch => {
        this.appliedFrames++;
        this.framesSeen++;
        this.remember(e.index, frame.last, frame.batchId, frame.epoch);
        return new FrameBatch(e.index, r.first, r.last, frame.batchId, frame.epoch, frame.records);
      },
      (err: unknown) => {
        // A failed local write (disk full, I/O error, fencing): stop replicating here.
        const code = isPlexusError(err) ? err.code : String(err);
        throw this.fail(
          replicationError(
            ReplicationErrorCode.STOPPED,
            `applying entry ${e.index} (positions ${frame.first}..${frame.last}) to the local log failed: ${code}; remove the cause and restart the member`,
            { index: e.index, cause: code },
            err,
          ),
        );
      },
    );
    p.catch(() => undefined); // observed by applyEntries; never unhandled
    return p;
  }

  private notify(batch: AppliedBatch): void {
    for (const l of this.listeners) {
      try {
        l(batch);
      } catch (err) {
        this.opts.logger?.warn('replicated log: an onApply listener threw', { error: String(err) });
      }
    }
  }

  /** A frame that does not continue the local log: a replay of a batch already there, or a divergence. */
  private async skipDuplicate(e: Entry, frame: EvfrFrame): Promise<void> {
    const last = this.localTail;
    if (frame.last <= last && (await this.isDuplicate(frame))) {
      this.duplicates++;
      this.framesSeen++;
      this.remember(e.index, frame.last, frame.batchId, frame.epoch);
      return;
    }
    throw this.fail(
      replicationError(
        ReplicationErrorCode.DIVERGED,
        `committed entry ${e.index} carries positions ${frame.first}..${frame.last} (batch ${hex(frame.batchId)}) but the local log ends at ${last}${frame.first > last + 1 ? ' (a gap)' : ' with other records there'}: the replicas diverged; the member stops`,
        { index: e.index, first: frame.first, last: frame.last, localLast: last, batchId: hex(frame.batchId) },
      ),
    );
  }

  /** The frame's batch is already in the local log at its positions (or compacted away below it). */
  private async isDuplicate(frame: EvfrFrame): Promise<boolean> {
    const localFirst = Number(this.local.first);
    if (localFirst === 0 || frame.last < localFirst) return true; // compacted: applied long ago
    for (const p of [frame.first, frame.last]) {
      if (p < localFirst) continue;
      const [rec] = await this.local.read(BigInt(p), { maxCount: 1, maxBytes: 1 });
      if (!rec || rec.position !== BigInt(p) || !sameBytes(rec.batchId, frame.batchId)) return false;
    }
    return true;
  }

  private fail(err: PlexusError): PlexusError {
    if (!this.failure) {
      this.failure = err;
      this.readiness.notify();
      const log = this.opts.logger;
      const shown = translateError(err, this.opts.errorCodes) as PlexusError;
      const details = { id: this.opts.id, code: shown.code, ...err.details };
      if (log?.error) log.error(`replicated log: member stops: ${err.message}`, details);
      else if (log) log.warn(`replicated log: member stops: ${err.message}`, details);
      else process.stderr.write(`plexus replicated log: member ${this.opts.id} stops: ${err.message}\n`);
      if (this.opts.onFatal) {
        const f = this.opts.onFatal;
        queueMicrotask(() => f(err));
      }
    }
    return err;
  }
}
