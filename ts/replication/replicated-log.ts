/**
 * ReplicatedLog: a LogStorage replicated over Raft (docs/replication.md). This class is the
 * layer's public face: it opens a `Replica` (ts/replication/replica.ts) with its
 * dependencies, and gives every refusal under the codes the caller asked for
 * (`errorCodes`, docs/errors.md). Chronacta's cluster mode runs on it (docs/chronacta-ha.md).
 */
import type { WaitOptions } from '../core/watermark.js';
import type { Role } from '../raft/types.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from '../storage/types.js';
import type { HaMember } from './config.js';
import { translateError } from './errors.js';
import { type ReplicaDeps, realReplicaDeps } from './raft-edge.js';
import { type AppliedBatch, Replica, type ReplicatedLogOptions, type ReplicatedLogStatus } from './replica.js';

export {
  type AppliedBatch,
  type FollowerStatus,
  type ReplicatedLogOptions,
  type ReplicatedLogStatus,
  SOLO_FRAME_BYTES,
} from './replica.js';

/**
 * Opens (or creates) a member's data directory and starts it. `deps` replaces what the log
 * takes from outside (clock and timers, randomness, Raft storage, transport and driver);
 * by default wall time, node:crypto and Raft on files and TCP/TLS (`realReplicaDeps`).
 */
export function openReplicatedLog(opts: ReplicatedLogOptions, deps: Partial<ReplicaDeps> = {}): Promise<ReplicatedLog> {
  return ReplicatedLog.open(opts, deps);
}

export class ReplicatedLog implements LogStorage {
  private constructor(
    private readonly replica: Replica,
    private readonly opts: ReplicatedLogOptions,
  ) {}

  /** Opens (or creates) the member's data directory, starts its transport and Raft driver. */
  static async open(opts: ReplicatedLogOptions, deps: Partial<ReplicaDeps> = {}): Promise<ReplicatedLog> {
    const aliases = opts.errorCodes;
    const onFatal = opts.onFatal;
    const inner: ReplicatedLogOptions =
      onFatal === undefined ? opts : { ...opts, onFatal: (e) => onFatal(translateError(e, aliases)) };
    const all = realReplicaDeps(
      opts.random !== undefined && deps.random === undefined ? { ...deps, random: opts.random } : deps,
    );
    try {
      return new ReplicatedLog(await Replica.open(inner, all), opts);
    } catch (e) {
      throw translateError(e, aliases);
    }
  }

  private translate(e: unknown): unknown {
    return translateError(e, this.opts.errorCodes);
  }

  private async call<T>(p: () => Promise<T>): Promise<T> {
    try {
      return await p();
    } catch (e) {
      throw this.translate(e);
    }
  }

  private sync<T>(f: () => T): T {
    try {
      return f();
    } catch (e) {
      throw this.translate(e);
    }
  }

  /** The Raft driver's `propose`, refusing under the caller's codes (tests commit raw entries through it). */
  private get driver(): { propose(data: Uint8Array): Promise<number> } {
    const d = (this.replica as unknown as { driver: { propose(data: Uint8Array): Promise<number> } }).driver;
    return { propose: (data) => this.call(() => d.propose(data)) };
  }

  // ---- LogStorage ----

  get first(): bigint {
    return this.replica.first;
  }
  get last(): bigint {
    return this.replica.last;
  }
  get highestEpoch(): bigint {
    return this.replica.highestEpoch;
  }
  append(payloads: readonly Uint8Array[], opts?: AppendOptions): Promise<AppendResult> {
    return this.call(() => this.replica.append(payloads, opts));
  }
  read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.call(() => this.replica.read(from, opts));
  }
  readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.call(() => this.replica.readBackward(from, opts));
  }
  /** Refused: committed records are never truncated (UNSUPPORTED). */
  truncateAfter(position: bigint): Promise<void> {
    return this.call(() => this.replica.truncateAfter(position));
  }
  compactBefore(position: bigint): Promise<void> {
    return this.call(() => this.replica.compactBefore(position));
  }
  get segmentFiles(): readonly string[] {
    return this.replica.segmentFiles;
  }
  close(): Promise<void> {
    return this.call(() => this.replica.close());
  }

  // ---- Raft and state ----

  /** The Raft transport's port (tests put proxies in front of it). */
  get raftPort(): number {
    return this.replica.raftPort;
  }
  /** This member's Raft role now (`status().role`, without building the status). */
  get role(): Role {
    return this.replica.role;
  }
  /** This member leads and accepts appends now (`status().acceptingWrites`, without building the status). */
  get acceptingWrites(): boolean {
    return this.replica.acceptingWrites;
  }
  /** Resolves true when `acceptingWrites` may have changed, false after `opts.timeoutMs`. */
  readinessChanged(opts: WaitOptions): Promise<boolean> {
    return this.call(() => this.replica.readinessChanged(opts));
  }
  status(): ReplicatedLogStatus {
    return this.sync(() => this.replica.status());
  }
  /** Every applied batch, in order, from now on; returns the unsubscribe. */
  onApply(listener: (batch: AppliedBatch) => void): () => void {
    return this.replica.onApply(listener);
  }

  // ---- compaction ----

  /** The highest position below which every member may compact (the agreed cutoff). */
  get compactionLimit(): bigint {
    return this.replica.compactionLimit;
  }
  /** Proposes a compaction cutoff through Raft; resolves with the cutoff agreed. */
  agreeCompaction(wanted: bigint): Promise<bigint> {
    return this.call(() => this.replica.agreeCompaction(wanted));
  }
  onCompactionAgreed(listener: (below: bigint) => void): () => void {
    return this.replica.onCompactionAgreed(listener);
  }
  /** The last local position known to be on disk. */
  get durableLocalLast(): bigint {
    return this.replica.durableLocalLast;
  }

  // ---- membership ----

  addMember(member: HaMember, opts?: { voter?: boolean; catchUpMs?: number }): Promise<void> {
    return this.call(() => this.replica.addMember(member, opts));
  }
  removeMember(id: number): Promise<void> {
    return this.call(() => this.replica.removeMember(id));
  }
  promoteMember(id: number, opts?: { catchUpMs?: number }): Promise<void> {
    return this.call(() => this.replica.promoteMember(id, opts));
  }
  transferLeadership(to: number, waitMs?: number): Promise<void> {
    return this.call(() => this.replica.transferLeadership(to, waitMs));
  }
  setDialAddress(id: number, address: string): void {
    this.sync(() => this.replica.setDialAddress(id, address));
  }

  // ---- reads ----

  /** A linearizable read point (ReadIndex): resolves with the last position a read must see. */
  readBarrier(): Promise<bigint> {
    return this.call(() => this.replica.readBarrier());
  }
  get readBarrierRounds(): number {
    return this.replica.readBarrierRounds;
  }
}
