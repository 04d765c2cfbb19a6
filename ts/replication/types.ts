/**
 * The options, status and applied batches of the replicated log (docs/replication.md).
 */
import type { PlexusError } from '../core/errors.js';
import type { Role } from '../raft/types.js';
import type { RaftTlsOptions } from '../raft-io/tcp-transport.js';
import type { LogRecord, StorageLogger } from '../storage/types.js';
import type { HaMember } from './config.js';
import type { ReplicationErrorAliases } from './errors.js';

export interface ReplicatedLogOptions {
  /** This member's Raft id. */
  readonly id: number;
  /** Data directory: `raft/` (the Raft log) and `log/` (the committed records) go under it. */
  readonly dir: string;
  /**
   * Every member known at start (this one included): the founding voters of a new cluster,
   * or, with `join`, the members of the cluster being joined.
   */
  readonly members: readonly HaMember[];
  /** Start as a new, empty member that the leader adds with `addMember` (no bootstrap). */
  readonly join?: boolean;
  /** Where the Raft transport listens. Default: host and port of this member's raftAddress. */
  readonly listen?: { readonly host?: string; readonly port?: number };
  /**
   * Addresses to dial peers at, when they differ from their raftAddress (a proxy, a
   * NAT). Default: each member's raftAddress.
   */
  readonly dial?: ReadonlyMap<number, string>;
  /**
   * Mutual TLS 1.3 between members (PEM key and certificate of this member, the CA that
   * signs every member's certificate, and `peerId`, the member id a certificate names:
   * `memberOfCertificate` of member-tls.ts); plain TCP when absent (docs/raft-wire.md).
   * `plexus chronacta serve --cluster` always gives it (docs/chronacta-ha.md).
   */
  readonly tls?: RaftTlsOptions;
  /**
   * Called once when the member stops for good (a divergence, a failed write, a Raft state
   * that cannot be persisted): `serve --cluster` exits with the error's code rather than
   * run on as a member that does nothing.
   */
  readonly onFatal?: (err: PlexusError) => void;
  /** Milliseconds per Raft tick. Default 100. */
  readonly tickMs?: number;
  /** Ticks before a follower campaigns (randomised up to twice this). Default 10. */
  readonly electionTick?: number;
  /** Ticks between heartbeats. Default 1. */
  readonly heartbeatTick?: number;
  /** How long an append waits for commitment before PLX_RAFT_TIMEOUT (outcome unknown). Default 10,000 ms. */
  readonly timeoutMs?: number;
  /**
   * fsync mode of the local log of committed records. Default `never`: the Raft log is
   * durable before anything is applied, so the local log is written without an fsync on the
   * acknowledgement path and fsynced only before a Raft snapshot or a local compaction drops
   * what it was derived from; after a power loss its lost or damaged tail is cut and re-applied
   * from the Raft log on open. `batch` fsyncs every applied Ready as well. See
   * docs/chronacta-ha.md, "Durability of the local log".
   */
  readonly localFsync?: 'batch' | 'never';
  /**
   * With localFsync `never`: how often (ms) the member writes its local log back to the disk
   * in the background (one fsync through the thread pool, never on the acknowledgement path),
   * so that a Raft snapshot, which needs the log durable, finds little left to write. Default
   * 1000; 0 leaves write-back to the kernel.
   */
  readonly localWritebackMs?: number;
  /** Segment size of both logs (tests use small ones). */
  readonly segmentBytes?: number;
  /**
   * Take a Raft snapshot and compact the Raft log once this many appends were applied since
   * the last snapshot (not counting the retained tail). Counted in appends, not Raft entries:
   * one entry may carry several (group commit). Default 10,000; 0 never compacts.
   */
  readonly snapshotEvery?: number;
  /**
   * Group commit: appends that arrive while a Ready is written share one Raft entry of up to
   * this many bytes of frames. Default 0 (off): one append per entry, the form every earlier
   * version reads. Turn it on (131,072 is a good size) only once every member runs a version
   * that applies several frames per entry (docs/evfr.md, "Several frames in one entry").
   */
  readonly groupCommitBytes?: number;
  /**
   * Appends kept in the Raft log below the applied index when compacting (the entries that
   * carry them), so a follower a little behind gets entries rather than a snapshot. Default
   * 5,000; at most 50,000.
   */
  readonly snapshotRetain?: number;
  /**
   * At most this many bytes of entries kept below the applied index when compacting, whatever
   * `snapshotRetain` says: a snapshot rewrites the entries it keeps into the Raft journal, and
   * they stay in memory. Default 8 MiB.
   */
  readonly snapshotRetainBytes?: number;
  /**
   * Also take a snapshot once this many bytes of entries were applied since the last one,
   * before `snapshotEvery` appends (large batches). Default 64 MiB; 0: appends only.
   */
  readonly snapshotEveryBytes?: number;
  /** Payload bytes per chunk of a catch-up transfer (a chunk always holds one record at least). Default 1 MiB, at most 32 MiB. */
  readonly catchUpChunkBytes?: number;
  /** How long a catch-up request waits for its chunk before the member tries again (elsewhere). Default 5,000 ms. */
  readonly catchUpTimeoutMs?: number;
  /** Source of uniform integers in [0, n) for election timeouts. Default: node:crypto randomInt. */
  readonly random?: (n: number) => number;
  /** How the refusal of a learner that did not catch up says to promote it (a product names its command). */
  readonly promoteHint?: (id: number) => string;
  /** The codes clients see for the layer's refusals, when a product keeps its own (docs/errors.md). */
  readonly errorCodes?: ReplicationErrorAliases;
  readonly logger?: StorageLogger & { error?(message: string, details?: Record<string, unknown>): void };
}

/** What an `onApply` listener receives: one committed batch, now in the local log. */
export interface AppliedBatch {
  /** The Raft entry it came in; 0 for records pulled below a snapshot (a batch may then arrive in parts). */
  readonly raftIndex: number;
  readonly first: bigint;
  readonly last: bigint;
  readonly batchId: Uint8Array;
  readonly epoch: bigint;
  /** The records' payloads in position order: `payloads[i]` is at `first + i`. */
  readonly payloads: readonly Uint8Array[];
  /** The same records with their positions, batch id and epoch (built when first read). */
  readonly records: readonly LogRecord[];
}

/**
 * A batch applied from a committed entry's frame. Its `records` are made only when read: the
 * store applies from `payloads`, so a batch of 100 events costs no record object or position
 * per event on the apply path.
 */
export class FrameBatch implements AppliedBatch {
  private built: LogRecord[] | undefined;
  constructor(
    readonly raftIndex: number,
    readonly first: bigint,
    readonly last: bigint,
    readonly batchId: Uint8Array,
    readonly epoch: bigint,
    readonly payloads: readonly Uint8Array[],
  ) {}

  get records(): readonly LogRecord[] {
    this.built ??= this.payloads.map((payload, i) => ({
      position: this.first + BigInt(i),
      batchId: this.batchId,
      epoch: this.epoch,
      payload,
    }));
    return this.built;
  }
}

export interface FollowerStatus {
  readonly id: number;
  readonly match: number;
  readonly next: number;
  readonly state: string;
  readonly learner: boolean;
  /** Raft entries the follower lacks. */
  readonly lagEntries: number;
  /** Global positions the follower lacks (estimated from recent entries; exact in steady state). */
  readonly lagPositions: number;
}

export interface ReplicatedLogStatus {
  readonly id: number;
  readonly role: Role;
  /** The leader this member knows (0: none). */
  readonly leader: number;
  readonly leaderAddress: string | undefined;
  readonly term: number;
  /** Raft commit and applied indexes. */
  readonly commit: number;
  readonly applied: number;
  /** The local log's last position (every committed batch applied here). */
  readonly lastPosition: bigint;
  readonly highestEpoch: bigint;
  /** The leader accepts appends (it has applied every entry of earlier terms). */
  readonly acceptingWrites: boolean;
  readonly voters: readonly number[];
  readonly learners: readonly number[];
  readonly members: readonly HaMember[];
  /** Frames applied to the local log, and frames skipped as already present. */
  readonly appendEntriesApplied: number;
  readonly duplicatesSkipped: number;
  /** Raft entries this member proposed carrying appends, and the appends (frames) they carried: group commit. */
  readonly appendGroupsProposed: number;
  readonly appendsGrouped: number;
  /** Set once the member stopped (divergence, failed local write). */
  readonly failure: string | undefined;
  /** Only on the leader: every other member's replication progress. */
  readonly followers?: readonly FollowerStatus[];
  /** The Raft index of the latest snapshot (1: the founding one; the Raft log starts after it). */
  readonly snapshotIndex: number;
  /** The local log's last position as of that snapshot (what a member installing it must hold first). */
  readonly snapshotPosition: bigint;
  /** Snapshots this member took (compactions of its Raft log) and installed since it started. */
  readonly snapshotsTaken: number;
  readonly snapshotsInstalled: number;
  /** While a snapshot is being installed: the position the local log must reach first. */
  readonly catchUpTarget: bigint | undefined;
  /** Records this member pulled over catch-up streams, and records it sent to others. */
  readonly recordsCaughtUp: number;
  readonly recordsServed: number;
}
