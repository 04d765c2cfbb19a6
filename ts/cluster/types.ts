/**
 * The Membership seam: who is in the cluster, and who holds which shard's lease. The runtime
 * depends on this interface only; `StaticMembership` (ts/cluster/static.ts) implements it
 * with members from configuration and a `MemoryAuthority` hosted by one process.
 * test/compliance/membership.suite.ts is the suite every implementation passes.
 */

/** A member as the configuration names it. */
export interface MemberInfo {
  /** The node id: a DNS label, unique in the cluster. */
  readonly id: string;
  /** Where its wire listens: `host:port`. */
  readonly address: string;
}

/** The health of a member as the failure detector sees it. */
export type MemberStatus = 'alive' | 'suspect' | 'failed' | 'leaving';

export interface MemberState extends MemberInfo {
  readonly status: MemberStatus;
}

/** One shard's lease in a view. */
export interface LeaseEntry {
  readonly shard: number;
  readonly owner: string;
  /** The fencing epoch of the grant: strictly greater on every new grant of this shard. */
  readonly epoch: bigint;
}

/** A view of the cluster. Versions strictly increase; a holder ignores views not newer than its own. */
export interface View {
  readonly version: number;
  /** Joined members that have not left, sorted by id, with their status. */
  readonly members: readonly MemberState[];
  /** Current leases, by shard (free shards are absent). */
  readonly leases: readonly LeaseEntry[];
}

/** A lease as its owner holds it. */
export interface Lease {
  readonly shard: number;
  readonly epoch: bigint;
  readonly ttlMs: number;
  /**
   * The owner's monotonic time (ms) when it sent the request that obtained or renewed the
   * lease: the lease is counted from there, never from the reply, so the owner's view of
   * expiry is never later than the authority's.
   */
  readonly from: number;
}

export type ViewListener = (view: View) => void;

/** The membership seam. */
export interface Membership {
  /** This node's id. */
  readonly self: string;
  /** The newest view held. */
  view(): View;
  /** The leases this node holds that have not ended by its own monotonic clock. */
  held(): readonly Lease[];
  /**
   * The lease of `shard` when this node holds it and may still start a macrostep under it
   * (before expiry less LeaseConfig's safety margin, by its own clock); else undefined.
   */
  leaseFor(shard: number): Lease | undefined;
  /** Calls `listener` with every newer view; returns the unsubscribe function. */
  subscribe(listener: ViewListener): () => void;
  /** Joins the cluster (checks cluster id, shard count, node id and the rest of ClusterMeta). */
  join(): Promise<View>;
  /** Asks for a shard's lease. Refused with PLX_CLUSTER_LEASE_HELD while another member holds it. */
  grant(shard: number): Promise<Lease>;
  /** Renews a held lease, keeping its epoch. PLX_CLUSTER_LEASE_LOST when it was lost. */
  renew(shard: number, epoch: bigint): Promise<Lease>;
  /** Gives a held lease back; the shard is free at once. */
  release(shard: number, epoch: bigint): Promise<void>;
  /** Takes a shard's lease from whoever holds it (an operator action); the next grant has a greater epoch. */
  revoke(shard: number): Promise<void>;
  /**
   * Tells the authority this node is draining: it takes no new leases (grants are refused
   * with PLX_CLUSTER_LEAVING) and keeps the ones it holds until it releases them. The first
   * step of `drainAndLeave` (ts/cluster/drain.ts).
   */
  drain(): Promise<void>;
  /** Leaves the cluster (after the caller drained: see `drainAndLeave` in ts/cluster/drain.ts). */
  leave(): Promise<void>;
  /** Stops timers and connections; the node stays a member until the detector fails it. */
  close(): Promise<void>;
}

/** Compares views: whether `next` is newer than `current`. */
export function isNewer(current: View | undefined, next: View): boolean {
  return current === undefined || next.version > current.version;
}

/** The owner of a shard in a view, or undefined when free. */
export function ownerOf(view: View, shard: number): LeaseEntry | undefined {
  return view.leases.find((l) => l.shard === shard);
}

export const EMPTY_VIEW: View = Object.freeze({ version: 0, members: [], leases: [] });
