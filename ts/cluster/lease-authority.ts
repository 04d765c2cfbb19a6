/**
 * The LeaseAuthority seam: the service that admits members, grants, renews and releases
 * shards' leases with fencing epochs, and publishes versioned views. Types only; a node
 * depends on this file, never on an implementation. The in-memory authority (MemoryAuthority,
 * ts/cluster/authority.ts, driven on real time by AuthorityHost, ts/cluster/host.ts) implements
 * it; test/compliance/lease-authority.suite.ts is the suite every implementation passes
 * (docs/cluster.md, "Seams").
 *
 * Rules every implementation keeps (each is a case of the suite):
 * - views carry strictly increasing versions, across restarts of the authority's host too;
 *   a holder ignores a view not newer than its own (`isNewer`, ts/cluster/types.ts);
 * - a renewal keeps the epoch; every new grant of a shard carries a strictly greater epoch,
 *   across restarts of the authority's host;
 * - a failed member's leases become free only when they expire, never earlier on suspicion
 *   or on a failure report.
 */
import type { ClusterCodeValue } from './errors.js';
import type { ClusterMeta } from './meta.js';
import type { View } from './types.js';

/** One request to the authority (the cluster wire carries it as bytes: ts/cluster/codec.ts). */
export type AuthorityRequest =
  | { readonly type: 'join'; readonly node: string; readonly address: string; readonly meta: ClusterMeta }
  | {
      readonly type: 'heartbeat';
      readonly node: string;
      /** Leases to renew (or claim, when the authority assigned them), each keeping its epoch. */
      readonly held?: readonly { readonly shard: number; readonly epoch: bigint }[];
      /** Gossip: the nodes this member knows were removed (a leader that did not know takes them). */
      readonly removed?: readonly string[];
    }
  | { readonly type: 'grant'; readonly node: string; readonly shard: number }
  | { readonly type: 'renew'; readonly node: string; readonly shard: number; readonly epoch: bigint }
  | { readonly type: 'release'; readonly node: string; readonly shard: number; readonly epoch: bigint }
  | { readonly type: 'revoke'; readonly shard: number }
  | { readonly type: 'leave'; readonly node: string }
  | { readonly type: 'drain'; readonly node: string }
  | { readonly type: 'remove'; readonly node: string }
  | { readonly type: 'view' };

/** The authority's answer: the view after the request, and the lease or the refusal. */
export type AuthorityReply =
  | {
      readonly ok: true;
      readonly view: View;
      readonly lease?: { readonly shard: number; readonly epoch: bigint; readonly ttlMs: number };
      /** heartbeat: the shards of `held` renewed (the others are lost). */
      readonly renewed?: readonly number[];
      readonly ttlMs?: number;
      /** Gossip leader: every node removed from the cluster (members keep the list durably). */
      readonly removed?: readonly string[];
    }
  | {
      readonly ok: false;
      readonly code: ClusterCodeValue;
      readonly message: string;
      readonly details: Readonly<Record<string, unknown>>;
      readonly view: View;
      /** Gossip leader: every node removed from the cluster (members keep the list durably). */
      readonly removed?: readonly string[];
    };

/** How a member reaches the authority: one request, one reply (in process or over the wire). */
export type AuthorityCall = (req: AuthorityRequest) => Promise<AuthorityReply>;

/** The seam. */
export interface LeaseAuthority {
  /**
   * Answers one request at the authority's current time. The reply is sent only once what
   * the request changed that safety needs (epochs, view versions, journal homes) is durable.
   * Rejects (PLX_CLUSTER_AUTHORITY_STATE) when the authority can no longer keep that promise.
   */
  readonly call: AuthorityCall;
  /** Whether `node` is a current member (joined, not removed, not left): the wire's admission check. */
  isMember(node: string): boolean;
  /** Whether `node` may connect at all (listed and not removed): a node connects before it joins. */
  isAdmitted(node: string): boolean;
  /** Stops the authority's timers; it answers nothing after. */
  close(): void;
}
