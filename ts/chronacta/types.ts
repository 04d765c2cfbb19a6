/**
 * The public shapes of Chronacta, shared by the store (in process) and the gRPC client.
 * Positions and versions are bigints, as in ts/storage: a global position is the event's
 * position in the log (from 1, strictly increasing across the store); a stream version is
 * 0 for a stream's first event. docs/chronacta.md describes the behaviour.
 */

/** An event to append. */
export interface EventData {
  /** A UUID (any version, lower or upper case hex with dashes); a random one when absent. */
  readonly id?: string;
  /** The event's type, 1 to 256 bytes of UTF-8. */
  readonly type: string;
  /** The body; a string is stored as its UTF-8 bytes. */
  readonly data?: Uint8Array | string;
  readonly metadata?: Uint8Array | string;
}

/** An event as stored. */
export interface RecordedEvent {
  readonly stream: string;
  /** 0-based version in its stream. */
  readonly version: bigint;
  /** Global position: strictly increasing across the store. */
  readonly position: bigint;
  readonly id: string;
  readonly type: string;
  readonly data: Uint8Array;
  readonly metadata: Uint8Array;
  /** When the store recorded it (milliseconds since the Unix epoch, from the store's clock). */
  readonly recordedMs: number;
  /** The UUID of the append (batch) that wrote it. */
  readonly batchId: string;
}

/**
 * What the stream must look like for an append or delete to go ahead:
 * `any` (no check), `no_stream` (never written, or soft deleted), `exists` (has been written
 * and is not soft deleted), or the exact version of its last event.
 */
export type ExpectedVersion = 'any' | 'no_stream' | 'exists' | bigint;

export interface AppendOptions {
  /** Default `any`. */
  readonly expectedVersion?: ExpectedVersion;
  /**
   * A retried append with the same key and the same stream and events returns the first
   * append's result and writes nothing; the same key with anything else is refused with
   * `PLX_CHRONACTA_IDEMPOTENCY_CONFLICT`. 1 to 256 bytes of UTF-8.
   */
  readonly idempotencyKey?: string;
}

export interface AppendResult {
  readonly stream: string;
  readonly firstVersion: bigint;
  readonly lastVersion: bigint;
  readonly firstPosition: bigint;
  readonly lastPosition: bigint;
  /** The batch UUID of the append. */
  readonly batchId: string;
  /** True when this is the result of an earlier append with the same idempotency key. */
  readonly duplicate: boolean;
}

export type Direction = 'forwards' | 'backwards';

export interface ReadStreamOptions {
  readonly direction?: Direction;
  /** First version to return (inclusive); default: the start (forwards) or the end (backwards). */
  readonly fromVersion?: bigint;
  /** At most this many events (default 1000, at most 10000). */
  readonly maxCount?: number;
  /** Only events of these types (none: every type). */
  readonly types?: readonly string[];
}

export interface ReadStreamResult {
  readonly stream: string;
  readonly events: RecordedEvent[];
  /** The stream's last version (-1n: never written). */
  readonly lastVersion: bigint;
  /** Where the next read in the same direction continues, when `end` is false. */
  readonly nextVersion: bigint | undefined;
  /** No more events in this direction (at the time of the read). */
  readonly end: boolean;
  /** The stream was deleted (soft); its events are gone and an append brings it back. */
  readonly deleted: boolean;
}

export interface ReadAllOptions {
  readonly direction?: Direction;
  /** First position to look at (inclusive); default: the start (forwards) or the end (backwards). */
  readonly fromPosition?: bigint;
  /** At most this many events (default 1000, at most 10000). */
  readonly maxCount?: number;
  /** Only events of streams whose name starts with this. */
  readonly streamPrefix?: string;
  /** Only events of these types (none: every type). */
  readonly types?: readonly string[];
}

export interface ReadAllResult {
  readonly events: RecordedEvent[];
  /**
   * Where the next read in the same direction continues. A filtered read looks at a
   * bounded number of records per call, so it can return fewer than `maxCount` events
   * (even none) before the end: continue from `nextPosition` until `end`.
   */
  readonly nextPosition: bigint;
  readonly end: boolean;
  /** The store's last position when the read ran. */
  readonly lastPosition: bigint;
}

export interface DeleteOptions {
  readonly expectedVersion?: ExpectedVersion;
  /**
   * `false` (default): soft delete, the events are gone and a later append brings the
   * stream back with the next version. `true`: a tombstone; the stream refuses every later
   * append and read.
   */
  readonly hard?: boolean;
}

export interface DeleteResult {
  /** Position of the log record that deleted the stream. */
  readonly position: bigint;
  /** The stream's last version at the delete (-1n: never written). */
  readonly lastVersion: bigint;
}

export interface TruncateOptions {
  /** Keep at most this many of the newest events. */
  readonly maxCount?: number;
  /** Drop events recorded more than this many milliseconds ago. */
  readonly maxAgeMs?: number;
  /** Drop every version below this one. */
  readonly beforeVersion?: bigint;
  readonly expectedVersion?: ExpectedVersion;
}

export interface TruncateResult {
  readonly position: bigint;
  /** Versions below this are gone. */
  readonly truncateBefore: bigint;
}

/** Where a subscription reads: one stream from a version, or `$all` from a position. */
export type SubscriptionTarget =
  | { readonly stream: string; readonly fromVersion?: bigint | 'start' | 'end' }
  | {
      readonly all: true;
      readonly fromPosition?: bigint | 'start' | 'end';
      readonly streamPrefix?: string;
      readonly types?: readonly string[];
    };

/** What a subscription delivers, in order. */
export type SubscriptionMessage =
  | { readonly kind: 'event'; readonly event: RecordedEvent }
  /** Every event up to the store's end was delivered; from here on, events arrive live. */
  | { readonly kind: 'caughtUp'; readonly position: bigint }
  /** The subscriber was too slow for live delivery; the server reads from the log again (no gap, no duplicate). */
  | { readonly kind: 'fellBehind'; readonly position: bigint };

export interface CompactionReport {
  /** Records below this position now live in the compacted archive. */
  readonly cutoff: bigint;
  /** Records of the compacted range kept (visible events, metadata, idempotency stubs). */
  readonly kept: number;
  /** Records dropped (deleted or truncated events). */
  readonly dropped: number;
  /** Bytes the compacted range took before: the closed segments moved and the previous archive. */
  readonly bytesBefore: number;
  /** Bytes it takes now: the new archive. */
  readonly bytesAfter: number;
}

export interface ClusterMemberStatus {
  readonly id: string;
  readonly address: string;
  /** Cluster mode: the member's Raft address. */
  readonly raftAddress?: string;
  /** Cluster mode, as the leader sees it: positions the member is behind. */
  readonly lagPositions?: bigint;
}

export interface ClusterStatus {
  readonly mode: 'standalone' | 'cluster';
  readonly clusterId: string;
  readonly nodeId: string;
  /** The leader's id ('' when none is known). */
  readonly leaderId: string;
  /** Standalone: 0. Cluster: the Raft term. */
  readonly epoch: bigint;
  readonly members: readonly ClusterMemberStatus[];
  /** Cluster mode only (standalone: undefined). */
  readonly role?: string;
  readonly leaderAddress?: string;
  readonly term?: bigint;
  readonly commitIndex?: bigint;
  readonly appliedIndex?: bigint;
  readonly lastPosition?: bigint;
  readonly replicationLagPositions?: bigint;
  readonly acceptingWrites?: boolean;
}
