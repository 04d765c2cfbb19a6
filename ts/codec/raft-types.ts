/**
 * The records Raft members exchange and persist (as etcd's raftpb): log entries, the hard state,
 * the configuration, snapshots and messages. The Raft wire (raft-wire.ts) and the Raft journal
 * (raft-journal.ts) encode them; the core (ts/raft/) re-exports them from ts/raft/types.ts.
 * Indexes, terms and node ids are non-negative safe integers; node id 0 means "none".
 */

/** `normal` carries the application's opaque payload; `conf-change` a ConfChange (ts/codec/raft-confchange.ts). */
export type EntryType = 'normal' | 'conf-change';

export interface Entry {
  readonly index: number;
  readonly term: number;
  readonly type: EntryType;
  /** Opaque bytes: the application's payload, or an encoded ConfChange. Empty for a new leader's first entry. */
  readonly data: Uint8Array;
}

/** What must be on stable storage before any message of the same `Ready` is sent. */
export interface HardState {
  readonly term: number;
  /** The candidate this node voted for in `term`, 0 for none. */
  readonly vote: number;
  readonly commit: number;
}

/** The cluster's configuration: voters count for elections and commitment, learners only receive the log. */
export interface ConfState {
  readonly voters: readonly number[];
  readonly learners: readonly number[];
}

export interface SnapshotMetadata {
  /** The last entry the snapshot covers, and its term. */
  readonly index: number;
  readonly term: number;
  /** The configuration as of `index`. */
  readonly confState: ConfState;
}

export interface Snapshot {
  readonly metadata: SnapshotMetadata;
  /** The application's state as of `metadata.index`, opaque to the core. */
  readonly data: Uint8Array;
}

export type MessageType =
  | 'MsgHup' // local: start an election
  | 'MsgBeat' // local: leader sends heartbeats
  | 'MsgProp' // local: a proposal
  | 'MsgApp'
  | 'MsgAppResp'
  | 'MsgVote'
  | 'MsgVoteResp'
  | 'MsgPreVote'
  | 'MsgPreVoteResp'
  | 'MsgSnap'
  | 'MsgHeartbeat'
  | 'MsgHeartbeatResp'
  | 'MsgTransferLeader'
  | 'MsgTimeoutNow'
  | 'MsgReadIndex'
  | 'MsgReadIndexResp';

/** One message between nodes. Fields a type does not use are 0, empty or absent. */
export interface Message {
  readonly type: MessageType;
  readonly from: number;
  readonly to: number;
  /** The sender's term; 0 only for local messages. */
  readonly term: number;
  /** MsgApp: term of the entry at `index` (the entry before `entries`). Votes: term of the candidate's last entry. Rejections: term at `rejectHint`. */
  readonly logTerm: number;
  /** MsgApp: index before `entries`. MsgAppResp: last index accepted, or the rejected index. Votes: candidate's last index. MsgReadIndexResp: the read index. */
  readonly index: number;
  readonly entries: readonly Entry[];
  readonly commit: number;
  readonly reject: boolean;
  /** MsgAppResp with reject: the follower's guess of where the logs may match. */
  readonly rejectHint: number;
  readonly snapshot?: Snapshot;
  /** ReadIndex and heartbeats: the read request's context. */
  readonly context?: Uint8Array;
  /** Votes: the election was started by a leadership transfer (skips the lease check). */
  readonly transfer?: boolean;
}
