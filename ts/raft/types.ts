/**
 * The data types of the Raft core (ts/raft/raft.ts): log entries, the persisted hard state,
 * the configuration, snapshots, the messages nodes exchange and the `Ready` a driver
 * processes. Indexes, terms and node ids are non-negative safe integers; node id 0 means
 * "none". The core never does I/O: a driver persists, sends and applies what `Ready` holds
 * (docs/raft.md).
 */

export type {
  ConfState,
  Entry,
  EntryType,
  HardState,
  Message,
  MessageType,
  Snapshot,
  SnapshotMetadata,
} from '../codec/raft-types.js';

import type { ConfState, Entry, HardState, Message, Snapshot } from '../codec/raft-types.js';

export type Role = 'follower' | 'pre-candidate' | 'candidate' | 'leader';

/** Volatile state a driver may want to show (not persisted). */
export interface SoftState {
  readonly lead: number;
  readonly role: Role;
}

/** A ReadIndex request that is now safe to serve once the state machine has applied `index`. */
export interface ReadState {
  readonly index: number;
  readonly context: Uint8Array;
}

/**
 * What the driver must do next, in this order: persist `snapshot`, `entries` and `hardState`
 * (one atomic write where possible); send `messages`; apply `snapshot` then
 * `committedEntries` to the state machine; serve `readStates` whose index is applied; call
 * `advance()`.
 */
export interface Ready {
  readonly softState?: SoftState;
  readonly hardState?: HardState;
  /** New entries to append to stable storage; they replace any stored entries from `entries[0].index` on. */
  readonly entries: readonly Entry[];
  readonly snapshot?: Snapshot;
  readonly messages: readonly Message[];
  /** Entries to apply in order (both kinds; the core has already taken conf changes into account). */
  readonly committedEntries: readonly Entry[];
  readonly readStates: readonly ReadState[];
}

/** How far a follower is replicated, as the leader sees it. */
export type ProgressState = 'probe' | 'replicate' | 'snapshot';

export interface ProgressStatus {
  readonly match: number;
  readonly next: number;
  readonly state: ProgressState;
  readonly learner: boolean;
}

export interface Status {
  readonly id: number;
  readonly term: number;
  readonly vote: number;
  readonly commit: number;
  readonly applied: number;
  readonly lead: number;
  readonly role: Role;
  readonly leadTransferee: number;
  readonly confState: ConfState;
  readonly lastIndex: number;
  /** Only on the leader: every member's progress. */
  readonly progress?: ReadonlyMap<number, ProgressStatus>;
}

/** Options of a Raft node; see docs/raft.md for the defaults' reasoning. */
export interface RaftOptions {
  readonly id: number;
  readonly storage: import('./storage.js').RaftStorage;
  /**
   * A seeded source of uniform integers in [0, n): the only randomness (election timeouts).
   * Pass a seeded generator (`SimRandom.int` in ts/sim) so runs replay exactly.
   */
  readonly random: (n: number) => number;
  /** Ticks without hearing from a leader before a follower campaigns; the timeout is random in [electionTick, 2*electionTick). Default 10. */
  readonly electionTick?: number;
  /** Ticks between a leader's heartbeats. Default 1. Must be below electionTick. */
  readonly heartbeatTick?: number;
  /** Highest entry already applied by the state machine on restart. Default: the snapshot's index. */
  readonly applied?: number;
  /** Maximum bytes of entry data in one MsgApp (at least one entry is always sent). Default 1 MiB. */
  readonly maxSizePerMsg?: number;
  /** Maximum MsgApp batches in flight per follower in the replicate state. Default 256. */
  readonly maxInflight?: number;
  /** Maximum bytes of committed entries handed out in one Ready (at least one). Default 64 MiB. */
  readonly maxCommittedSizePerReady?: number;
  /** Run a pre-vote round before a real election, so a partitioned node never inflates terms. Default false. */
  readonly preVote?: boolean;
  /**
   * A leader steps down when it has not heard from a quorum for an election timeout, and a
   * node that heard from a leader within the election timeout ignores vote requests. Default false.
   */
  readonly checkQuorum?: boolean;
  /**
   * Deliberate protocol violations, only for showing that the simulator's checkers catch
   * bugs. Never set them in production.
   */
  readonly unsafe?: {
    /** Grant votes without checking that the candidate's log is at least as up-to-date (breaks §5.4.1). */
    readonly skipLogUpToDateCheck?: boolean;
    /** Commit entries of earlier terms by counting replicas (breaks §5.4.2). */
    readonly commitPreviousTermByCounting?: boolean;
  };
}
