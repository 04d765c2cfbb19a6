/**
 * Replica: one member of a replicated log, a LogStorage replicated over Raft
 * (docs/replication.md); Chronacta's cluster mode runs on it (docs/chronacta-ha.md).
 *
 * Each member runs a Raft node (ts/raft) whose log is a FileRaftStorage under `<dir>/raft/`
 * (durable: fsynced before any message of the same Ready leaves), and keeps the committed
 * records in a local FileLog under `<dir>/log/` at their global positions: the state
 * machine. Appends are accepted only on the leader: a compare-and-set passes against its
 * projected last position (applied + its own pending proposals) and is refused only against
 * committed positions (`refuseCas`), it wraps the batch in an EVFR
 * frame (first position, the Raft term as epoch, the batch id), and hands it to group commit;
 * it answers once the entry is committed by a majority of voters and applied to its own local
 * log. This file holds the lifecycle (open, close), the append path and the wiring of
 * the units, each with its dependencies passed in and the shared `ReplicaState`
 * (replica-state.ts):
 * - group-commit.ts: appends gathered into one Raft entry and proposed;
 * - apply.ts: committed entries into the local log, replays skipped, divergence stops the
 *   member, the applied watermark;
 * - snapshots.ts: when to take a Raft snapshot, installing one (catch-up from other members
 *   over snapshot.ts's streams), compaction cutoffs;
 * - local-tail.ts (`LocalDurability`): the local log's syncs and write-back without fsyncs;
 * - leadership.ts: when a new leader may serve (its earlier terms applied, then group commit
 *   starts from its exact last position), appends admitted in call order, what fails when it
 *   steps down;
 * - membership.ts, read-barrier.ts: membership changes and linearizable reads.
 */
import { join } from 'node:path';
import { encodeEvfr } from '../codec/evfr.js';
import { encodeCompactMarker } from '../codec/replication-entries.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import type { WaitOptions } from '../core/watermark.js';
import { RaftNode } from '../raft/node.js';
import type { Role, SoftState } from '../raft/types.js';
import { conflictError, fencedError } from '../storage/errors.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from '../storage/types.js';
import { ApplyPath } from './apply.js';
import { checkAddress, checkMember, type HaMember } from './config.js';
import { hexBytes, splitAddress } from './entries.js';
import { ReplicationErrorCode, replicationError, translateError } from './errors.js';
import { GroupCommit } from './group-commit.js';
import { Leadership } from './leadership.js';
import { LocalDurability, type SyncedSegments } from './local-tail.js';
import { MembershipChanges } from './membership.js';
import type { ReplicaDeps, ReplicaDriver, ReplicaLocalLog, ReplicaRaftStorage, ReplicaTransport } from './raft-edge.js';
import { ReadBarrier } from './read-barrier.js';
import { ReplicaState } from './replica-state.js';
import { CatchUpServer, decodeDescriptor, type SnapshotDescriptor } from './snapshot.js';
import { Snapshots } from './snapshots.js';
import type { AppliedBatch, FollowerStatus, ReplicatedLogOptions, ReplicatedLogStatus } from './types.js';

export { SOLO_FRAME_BYTES } from './entries.js';
export type { AppliedBatch, FollowerStatus, ReplicatedLogOptions, ReplicatedLogStatus } from './types.js';

const MAX_RETAIN = 50_000;
const defaultPromoteHint = (id: number): string => `promote it with promoteMember(${id})`;
const _noop = () => undefined;

export class Replica implements LogStorage {
  /** What the units below share: members, the applied watermark, positions, failure. */
  private readonly state = new ReplicaState();
  private readonly dialOverride = new Map<number, string>();
  private readonly listeners = new Set<(b: AppliedBatch) => void>();
  private readonly compactionListeners = new Set<(below: bigint) => void>();
  /** When this member may serve as leader, and what waits on its leadership (leadership.ts). */
  private readonly leadership: Leadership;
  private readonly membership: MembershipChanges;
  /** Appends gathered into Raft entries (group-commit.ts). */
  private readonly groups: GroupCommit;
  /** Committed entries into the local log (apply.ts). */
  private readonly applier: ApplyPath;
  /** Snapshots, catch-up and compaction cutoffs (snapshots.ts). */
  private readonly snapshots: Snapshots;
  /** The local log's syncs and background write-back with localFsync 'never' (local-tail.ts). */
  private readonly durability: LocalDurability;
  /** Read barriers: the ReadIndex round in flight, and the one gathering the reads that arrive meanwhile. */
  private readonly barrier = new ReadBarrier({
    checkLeader: () => {
      this.checkOpen();
      const role = this.node.status().role;
      if (role !== 'leader') throw this.notLeader(`it is a ${role} and cannot confirm a leader read`);
    },
    confirmLeadership: () =>
      this.leadership.untilStepDown(
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
    private readonly local: ReplicaLocalLog,
    private readonly transport: ReplicaTransport,
    private readonly driver: ReplicaDriver,
    private readonly catchUp: CatchUpServer,
    members: readonly HaMember[],
    descriptor: SnapshotDescriptor | undefined,
  ) {
    const state = this.state;
    const signals = { fail: (err: PlexusError) => this.fail(err), checkOpen: () => this.checkOpen() };
    this.leadership = new Leadership({
      state,
      node,
      clock: deps.clock,
      timeoutMs: opts.timeoutMs ?? 10_000,
      localLast: () => local.last,
      checkOpen: signals.checkOpen,
      notLeader: (why) => this.notLeader(why),
    });
    this.membership = new MembershipChanges({
      clock: deps.clock,
      node: () => this.node,
      propose: (data) => this.driver.propose(data),
      whenAcceptingWrites: () => this.leadership.whenAcceptingWrites(),
      checkOpen: signals.checkOpen,
      notLeader: (why) => this.notLeader(why),
      timeoutMs: opts.timeoutMs ?? 10_000,
      promoteHint: opts.promoteHint ?? defaultPromoteHint,
      removed: (id) => {
        if (id !== this.opts.id) this.transport.removePeer(id);
        state.members.delete(id);
      },
      added: (id) => {
        const m = state.members.get(id);
        if (m) this.dialPeer(m);
      },
    });
    this.groups = new GroupCommit({
      state,
      node,
      driver,
      groupCommitBytes: opts.groupCommitBytes ?? 0,
      acceptingWrites: () => this.acceptingWrites,
      notLeader: (why) => this.notLeader(why),
    });
    this.durability = new LocalDurability(
      {
        dir: opts.dir,
        localFsync: opts.localFsync ?? 'never',
        writebackMs: opts.localWritebackMs ?? 1000,
        id: opts.id,
        ...(opts.logger ? { logger: opts.logger } : {}),
      },
      { clock: deps.clock, local, sync: deps.local.sync, localTail: () => state.localTail, closed: () => state.closed },
    );
    this.snapshots = new Snapshots({
      ...signals,
      opts,
      clock: deps.clock,
      state,
      node,
      local,
      raftStorage,
      transport,
      notify: (b) => this.notify(b),
      dialPeer: (m) => this.dialPeer(m),
      syncLocal: () => this.durability.sync(),
      appliedBytes: () => this.applier.appliedBytes,
    });
    this.applier = new ApplyPath({
      ...signals,
      state,
      local,
      installing: () => this.snapshots.installing,
      confChange: (e) => this.membership.applied(e),
      memberRecord: (m) => {
        state.members.set(m.id, m);
        this.dialPeer(m);
      },
      compactionAgreed: (below) => this.notifyCompaction(below),
      notify: (b) => this.notify(b),
      applied: () => {
        this.leadership.observe();
        this.snapshots.start();
      },
    });
    for (const m of members) state.members.set(m.id, m);
    // Members known only from the snapshot (their membership records were compacted away).
    for (const m of descriptor?.members ?? []) if (!state.members.has(m.id)) state.members.set(m.id, m);
    state.projectedLast = Number(local.last);
    state.localTail = Number(local.last);
    const snap = raftStorage.snapshot().metadata;
    state.raftApplied = snap.index;
    state.snapshotPosition = descriptor?.lastPosition ?? 0;
    state.compactBelow = descriptor?.compactBelow ?? 1;
    state.remember(
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
    let local: ReplicaLocalLog | undefined;
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
      local = await deps.local.open(opts.dir, { ...logOpts, ...quiet }, opts.localFsync ?? 'never', opts.logger);
      // What the local log holds at open is on disk from here on (durableLocalLast). Synced
      // before anything runs: nothing may be applied before the caller's listeners are on.
      const syncedAtOpen = local.last;
      const segmentsSyncedAtOpen: SyncedSegments = new Set();
      if ((opts.localFsync ?? 'never') === 'never')
        await deps.local.sync(join(opts.dir, 'log'), local.segmentFiles, segmentsSyncedAtOpen);
      const holder: { log?: Replica } = {};
      const localLog = local;
      const catchUp = new CatchUpServer(
        local,
        opts.catchUpChunkBytes ?? 1024 * 1024,
        opts.logger,
        () => holder.log?.durableLocalLast ?? localLog.last,
        deps.clock,
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
          apply: (es) => (holder.log as Replica).applier.apply(es),
          restore: (s) => (holder.log as Replica).snapshots.restore(s),
        },
        clock: deps.clock,
        tickMs: opts.tickMs ?? 100,
        timeoutMs: opts.timeoutMs ?? 10_000,
        onSoftState: (s) => holder.log?.softState(s),
        beforeReady: () => holder.log?.groups.flush(),
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
      log.durability.syncedTo = syncedAtOpen;
      // Closed segments need no second fsync from the write-back.
      for (const name of segmentsSyncedAtOpen) log.durability.syncedSegments.add(name);
      for (const m of log.state.members.values()) if (m.id !== id) log.dialPeer(m);
      // A local log behind the stored snapshot (a crash during an install, or a tail lost with
      // localFsync 'never'): pull the missing records before applying anything after it.
      if (descriptor) {
        if (local.last < BigInt(descriptor.lastPosition)) log.gate();
        log.snapshots.startInstall(descriptor);
      }
      driver.start();
      log.durability.startWriteback();
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
    return this.leadership.acceptingWrites;
  }

  /**
   * Resolves at the next change that may flip `acceptingWrites` (this member winning or losing
   * leadership, applying the entries of earlier terms, failing or closing): `true`, or `false`
   * once `timeoutMs` passed first; rejects when `signal` aborts. Callers re-test what they wait for.
   */
  readinessChanged(opts: WaitOptions): Promise<boolean> {
    return this.leadership.changed(opts);
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
    const deadline = this.deps.clock.now() + (this.opts.timeoutMs ?? 10_000);
    let term: number;
    for (;;) {
      await this.leadership.admit(deadline);
      // From here to the proposal nothing awaits: the compare-and-set and the positions hold.
      term = this.node.term;
      if (opts.epoch !== undefined) {
        if (opts.epoch < this.local.highestEpoch) throw fencedError(opts.epoch, this.local.highestEpoch);
        if (opts.epoch > BigInt(term)) {
          throw this.notLeader(`this leader's term ${term} is older than the caller's epoch ${opts.epoch}`);
        }
      }
      if (opts.expectedLast === undefined || opts.expectedLast === BigInt(this.state.projectedLast)) break;
      // Refused only against committed positions (refuseCas); returns when the check is to be made again.
      await this.refuseCas(opts.expectedLast);
    }
    const first = this.state.projectedLast + 1;
    const frame = encodeEvfr({ batchId, first, epoch: BigInt(term), records: payloads });
    // The frame joins the group proposed as one Raft entry before the driver takes its next
    // Ready; its positions are taken now (the next append's compare-and-set sees them).
    const done = this.groups.gather(frame, term, first, first + payloads.length - 1, batchId);
    // A leader that steps down (check-quorum, a newer term) fails it at once, not after timeoutMs.
    await this.leadership.untilStepDown(
      done,
      (why) =>
        `${why}; the append's outcome is unknown (it may still commit under the next leader): retry it with the same idempotency key`,
      { outcomeUnknown: true },
    );
    return { first: BigInt(first), last: BigInt(first + payloads.length - 1), batchId };
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
    const below = BigInt(this.state.compactBelow);
    // The records that stay must not depend on the compacted ones' Raft entries: make them durable first.
    await this.durability.sync();
    return this.local.compactBefore(position < below ? position : below);
  }

  /** The local log's segment files (the event store's compaction works on closed segments). */
  get segmentFiles(): readonly string[] {
    return this.local.segmentFiles;
  }

  /** Positions below this one may be compacted away on this member (`compactBefore` stops there). */
  get compactionLimit(): bigint {
    return BigInt(this.state.compactBelow);
  }

  /**
   * Leader only: agrees, through Raft, that every member may drop its records below
   * min(`wanted`, the position every member of the configuration has applied + 1), and
   * resolves with the agreed position once committed. A member that is down or far behind
   * holds the agreement back (it still needs those records from the others).
   */
  async agreeCompaction(wanted: bigint): Promise<bigint> {
    await this.leadership.whenAcceptingWrites();
    const safe = await this.snapshots.compactionCutoff();
    const below = Math.min(Number(wanted), safe);
    if (below <= this.state.compactBelow) return BigInt(this.state.compactBelow);
    await this.driver.propose(encodeCompactMarker(below));
    return BigInt(this.state.compactBelow);
  }

  /**
   * The last local position this member keeps through a crash or a power loss: everything
   * written with localFsync 'always' or 'batch', what the last sync covered with 'never' (all
   * of it when the background write-back is off: such a member promises nothing more).
   */
  get durableLocalLast(): bigint {
    return this.durability.durableLast;
  }

  async close(): Promise<void> {
    if (this.state.closed) return;
    this.state.closed = true;
    this.leadership.notify();
    this.snapshots.closeStream();
    this.catchUp.close();
    await this.driver.stop();
    this.groups.flush();
    this.durability.stopWriteback();
    await this.snapshots.installing?.catch(() => undefined);
    await this.snapshots.snapshotting;
    await this.durability.running();
    this.membership.close();
    await this.transport.close();
    await this.raftStorage.close().catch(() => undefined);
    const files = [...this.local.segmentFiles];
    await this.local.close();
    // localFsync 'never': a clean close makes the local log durable, so the next open need not check it all.
    if ((this.opts.localFsync ?? 'never') === 'never') {
      await this.deps.local.markClean(this.opts.dir, files).catch((err: unknown) => {
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
      leaderAddress: this.state.members.get(leader)?.advertise,
      term: s.term,
      commit: s.commit,
      applied: this.state.raftApplied,
      lastPosition: this.local.last,
      highestEpoch: this.local.highestEpoch,
      acceptingWrites: this.acceptingWrites,
      voters: s.confState.voters,
      learners: s.confState.learners,
      members: [...this.state.members.values()],
      appendEntriesApplied: this.applier.appliedFrames,
      duplicatesSkipped: this.applier.duplicates,
      appendGroupsProposed: this.groups.groupsProposed,
      appendsGrouped: this.groups.framesGrouped,
      failure: this.state.failure?.message,
      ...(followers ? { followers } : {}),
      snapshotIndex: this.raftStorage.snapshot().metadata.index,
      snapshotPosition: BigInt(this.state.snapshotPosition),
      snapshotsTaken: this.snapshots.snapshotsTaken,
      snapshotsInstalled: this.snapshots.snapshotsInstalled,
      catchUpTarget: this.snapshots.catchUpTarget,
      recordsCaughtUp: this.snapshots.recordsCaughtUp,
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
    this.state.gated = true;
  }

  private sendRaft(ms: Parameters<ReplicaTransport['send']>[0]): void {
    if (!this.state.gated) this.transport.send(ms);
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
    if (this.state.failure) {
      throw replicationError(
        ReplicationErrorCode.STOPPED,
        `member ${this.opts.id} stopped: ${this.state.failure.message}`,
        {},
        this.state.failure,
      );
    }
    if (this.state.closed) throw replicationError(ReplicationErrorCode.STOPPED, `member ${this.opts.id} is closed`);
  }

  private notLeader(why: string): PlexusError {
    const s = this.node.status();
    const leader = s.role === 'leader' ? 0 : s.lead;
    const addr = this.state.members.get(leader)?.advertise;
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

  private softState(s: SoftState): void {
    // A follower writes its journal on the main thread (its reply waits for the write anyway);
    // a leader through the thread pool, so that it takes requests and acknowledgements while
    // its write is pending rather than after it.
    this.raftStorage.setInlineSyncWrites(s.role !== 'leader');
    this.leadership.roleChanged(s.role);
  }

  /**
   * A compare-and-set whose `expected` is not the last position this leader projects
   * (docs/replication.md, "Compare-and-set"). It is refused with PLX_STORAGE_CONFLICT only
   * against positions that are committed, at a moment inside the call: committed positions
   * only grow, so a local log already past `expected` refuses at once; with this leader's own
   * appends still pending ahead of `expected`, the refusal waits until they are applied (or
   * fail); beyond everything projected, a read barrier confirms this member still leads and
   * what it has applied. Returns when the check is to be made again (the appends ahead failed
   * and gave their positions back, or the confirmed log ends at `expected` after all).
   */
  private async refuseCas(expected: bigint): Promise<void> {
    const last = this.local.last;
    if (last > expected) throw conflictError(expected, last);
    const ahead = this.groups.newest;
    if (expected < BigInt(this.state.projectedLast) && ahead) {
      await this.leadership.untilStepDown(
        ahead.then(_noop, _noop),
        (why) => `${why} before the appends ahead of this compare-and-set committed; nothing was appended: retry`,
      );
      const now = this.local.last;
      if (now > expected) throw conflictError(expected, now);
      if (this.groups.newest === ahead && expected < BigInt(this.state.projectedLast)) {
        // They failed and still hold their positions: nothing new to decide on.
        throw this.notLeader('the appends ahead of this compare-and-set failed; nothing was appended: retry');
      }
      return;
    }
    const confirmed = await this.barrier.wait();
    if (confirmed !== expected) throw conflictError(expected, confirmed);
  }

  /** The last position of the frames up to Raft index `index` (as far as the window knows). */
  private positionAt(index: number): number {
    return this.state.positions.positionAt(index);
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

  private fail(err: PlexusError): PlexusError {
    if (!this.state.failure) {
      this.state.failure = err;
      this.leadership.notify();
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
