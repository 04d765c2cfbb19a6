/**
 * GossipLeaseLeader: the lease authority of gossip membership. There is no consensus service:
 * the live member with the lowest node id, as the gossip table says, hosts one of these and the
 * others send it their AuthorityRequests over the cluster wire (GossipMembership,
 * ts/cluster/gossip/membership.ts). It implements the LeaseAuthority seam
 * (ts/cluster/lease-authority.ts) as a MemoryAuthority run by an AuthorityHost
 * (ts/cluster/authority.ts, ts/cluster/host.ts), with members, health and epochs from here.
 *
 * A leader keeps nothing on disk (its members keep the removed set); a new one (after a leader
 * change, or the same node started again) starts with empty memory but for that set. What keeps it safe (docs/cluster.md, "The gossip lease leader"):
 *
 * Tagged epochs. An epoch is a u64:
 *
 *     bits 63..20  round: 44 bits, milliseconds since the Unix epoch (good until the year 2527)
 *     bits 19..0   tag:   20 bits of FNV-1a 64 of `<self>/<start wall ms>/<16 random hex digits>`
 *
 * A new grant of a shard takes round = max(the leader's start wall time in ms, 1 + the round of
 * the greatest epoch it knows for the shard) and the leader's own tag, so within one leader every
 * grant of a shard is strictly greater than all it knows (granted, adopted from heartbeats, or
 * seen in the last view its host held), and two leader incarnations never grant the same epoch
 * unless they draw the same round and the same tag (one chance in 2^20 for one overlapping
 * round, and only when a wall clock went backwards or one leader granted a shard more than once
 * per millisecond of the other's head start). A plain counter from 1 would repeat epoch 1 on
 * every restart: two owners with one epoch both pass the fence (the fault-matrix bug).
 *
 * Taking over. A new leader learns the leases the previous one granted from heartbeats (a member
 * reports `held` shards with their epochs; the leader adopts one when no newer lease of the shard
 * is known, counting it from the adoption; a reporting member gossip admits is joined on that
 * heartbeat, as it joined an earlier leader) and grants no lease at all for one whole lease length
 * from its start (the grace period: any lease the previous leader granted has ended by then, or
 * its holder has reported it). Refusals during the grace period are PLX_CLUSTER_LEASE_HELD with
 * `details.reason` `takeover` and `retryAfterMs`. View versions start at the start wall time in
 * ms times 1000 (and above the version of `previous`), so they exceed any version an earlier
 * leader published unless it published more than 1000 views per millisecond it led.
 *
 * Removals last. A `remove` request (the operator's) is kept in a removed set that every reply
 * carries (`removed`), so that each member learns it, keeps it in its data directory and turns
 * the removed node away at its own wire's handshake; a new leader starts with the removed set
 * its host held (`removed`) and takes the removals its members' heartbeats list, so a removed
 * node never joins or gets a lease again, across leader changes and restarts of every process.
 *
 * Members come from gossip: a node may join when the gossip table knows it and it was not
 * removed; a member's status in views is the gossip table's word (`status`); a lease is freed
 * only by expiry on this leader's clock, a release, a revocation or the holder leaving, never on
 * suspicion or failure.
 */
import { randomBytes } from 'node:crypto';
import type { Clock, ClockTimers } from '../../core/clock.js';
import { fnv1a64 } from '../../core/index.js';
import type { MemoryAuthority } from '../authority.js';
import { serveAuthority } from '../codec.js';
import { type DetectorConfig, detectorConfig, type LeaseConfig, leaseConfig } from '../config.js';
import { AuthorityHost } from '../host.js';
import type { AuthorityReply, AuthorityRequest, LeaseAuthority } from '../lease-authority.js';
import { type ClusterMeta, clusterMeta } from '../meta.js';
import type { MemberStatus, View } from '../types.js';

/** Bits of the tag in the low end of an epoch. */
export const EPOCH_TAG_BITS = 20n;
/** Bits of the round above the tag. */
export const EPOCH_ROUND_BITS = 44n;
const TAG_MASK = (1n << EPOCH_TAG_BITS) - 1n;
const MAX_ROUND = (1n << EPOCH_ROUND_BITS) - 1n;
/** View versions per millisecond of the start wall time. */
export const VIEWS_PER_MS = 1000;

/** The epoch of `round` and `tag`. */
export function taggedEpoch(round: bigint, tag: bigint): bigint {
  if (round < 0n || round > MAX_ROUND) throw new RangeError(`epoch round ${round} is outside 0..2^44-1`);
  return (round << EPOCH_TAG_BITS) | (tag & TAG_MASK);
}

/** The round of an epoch (its high 44 bits). */
export function epochRound(epoch: bigint): bigint {
  return epoch >> EPOCH_TAG_BITS;
}

/** The tag of an epoch (its low 20 bits). */
export function epochTag(epoch: bigint): bigint {
  return epoch & TAG_MASK;
}

/** A leader incarnation's tag: FNV-1a 64 of `<self>/<start wall ms>/<nonce hex>`, low 20 bits. */
export function leaderTag(self: string, startWallMs: number, nonce: Uint8Array): bigint {
  return fnv1a64(`${self}/${startWallMs}/${Buffer.from(nonce).toString('hex')}`) & TAG_MASK;
}

/** The epoch a leader of `tag` started at `startRound` grants after `last`: strictly above it. */
export function nextTaggedEpoch(last: bigint, startRound: bigint, tag: bigint): bigint {
  const after = epochRound(last) + 1n;
  return taggedEpoch(after > startRound ? after : startRound, tag);
}

export interface GossipLeaderOptions {
  readonly meta: ClusterMeta;
  /** The leader's node id. */
  readonly self: string;
  readonly lease?: Partial<LeaseConfig>;
  /** The failure detector timings gossip is tuned to (checked; health comes from `status`). */
  readonly detector?: Partial<DetectorConfig>;
  /** Grant free shards to their ranked alive member (default true), as MemoryAuthority. */
  readonly autoAssign?: boolean;
  /** Monotonic time (ms) leases end on; a ClockTimers also runs the tick timer. */
  readonly clock: Clock | ClockTimers;
  /** Wall-clock time (ms since the epoch), read once at start for the epoch tag (default Date.now). */
  readonly wallClock?: Clock;
  /** Random bytes for the tag (default node:crypto randomBytes). */
  readonly random?: (n: number) => Uint8Array;
  /** The gossip table's word on a member: undefined when gossip does not know it. */
  readonly status: (node: string) => MemberStatus | undefined;
  /** Where a gossip-known member listens (for views), or undefined. */
  readonly address: (node: string) => string | undefined;
  /**
   * The newest view the hosting member held (from an earlier leader): this leader's view
   * versions start above its version, and its grants of a shard above the epoch listed there.
   */
  readonly previous?: View;
  /** Nodes removed from the cluster before this leader started (its host's removed set). */
  readonly removed?: readonly string[];
  /** Tick period (default 50 ms): expiry and automatic assignment between requests. */
  readonly tickEveryMs?: number;
}

const wallNow: Clock = { now: () => Date.now() };

export class GossipLeaseLeader implements LeaseAuthority {
  readonly self: string;
  /** The leader's start, monotonic ms; it grants nothing new before `grantsFrom`. */
  readonly startedAt: number;
  readonly grantsFrom: number;
  /** The start wall time (ms) read for the round and the tag. */
  readonly startWallMs: number;
  /** This incarnation's tag (the low bits of every epoch it grants). */
  readonly tag: bigint;
  private readonly host: AuthorityHost;
  private readonly clock: Clock;
  private readonly meta: ClusterMeta;
  private readonly address: (node: string) => string | undefined;
  /** Epochs seen in `previous`: new grants go above them. */
  private readonly floors = new Map<number, bigint>();
  /** Every node removed: `removed` at the start and each `remove` answered since. */
  private readonly removedSet = new Set<string>();

  constructor(opts: GossipLeaderOptions) {
    const meta = clusterMeta(opts.meta);
    const lease = leaseConfig(opts.lease);
    detectorConfig(opts.detector);
    this.self = opts.self;
    this.clock = opts.clock;
    this.meta = meta;
    this.address = opts.address;
    const wall = Math.floor((opts.wallClock ?? wallNow).now());
    if (!Number.isSafeInteger(wall) || wall < 0) throw new RangeError(`wall clock reads ${wall}: not ms since 1970`);
    this.startWallMs = wall;
    this.tag = leaderTag(opts.self, wall, (opts.random ?? randomBytes)(8));
    const startRound = BigInt(wall);
    for (const l of opts.previous?.leases ?? []) this.floors.set(l.shard, l.epoch);
    this.startedAt = opts.clock.now();
    this.grantsFrom = this.startedAt + lease.ttlMs;
    const viewBase = Math.max(wall * VIEWS_PER_MS, opts.previous?.version ?? 0);
    this.host = new AuthorityHost({
      meta,
      members: [],
      lease,
      ...(opts.detector ? { detector: opts.detector } : {}),
      ...(opts.autoAssign === undefined ? {} : { autoAssign: opts.autoAssign }),
      restored: { epochCeiling: 0n, viewCeiling: viewBase, homes: new Map() },
      grantsFrom: this.grantsFrom,
      grantsFromReason: { text: `${opts.self} took over as the gossip lease leader`, reason: 'takeover' },
      source: {
        admit: (node) => {
          if (opts.status(node) === undefined) return undefined;
          return { id: node, address: opts.address(node) ?? '' };
        },
        status: opts.status,
        nextEpoch: (shard, last) => {
          const floor = this.floors.get(shard) ?? 0n;
          return nextTaggedEpoch(floor > last ? floor : last, startRound, this.tag);
        },
        unlisted: 'a member the gossip table knows',
      },
      clock: opts.clock,
      ...(opts.tickEveryMs === undefined ? {} : { tickEveryMs: opts.tickEveryMs }),
    });
    for (const node of opts.removed ?? []) {
      this.removedSet.add(node);
      this.host.authority.step({ type: 'remove', node });
    }
  }

  /** Every node removed from the cluster, sorted. */
  removed(): readonly string[] {
    return [...this.removedSet].sort();
  }

  /** The state machine the leader runs (for inspection). */
  get authority(): MemoryAuthority {
    return this.host.authority;
  }

  /** Whether the grace period after the leader's start is over. */
  graceOver(): boolean {
    return this.clock.now() >= this.grantsFrom;
  }

  /**
   * Answers one request. A heartbeat's `held` leases that this leader does not know yet are
   * adopted first (when no newer lease of the shard is known), then renewed as any other. A
   * member that reports leases joined an earlier leader (its ClusterMeta was checked there):
   * when gossip admits it, it is joined here on that heartbeat, so that it keeps its leases
   * across the leader change instead of joining again without them.
   */
  call = async (req: AuthorityRequest): Promise<AuthorityReply> => {
    if (req.type === 'heartbeat' && req.removed !== undefined) {
      // A member that knew of removals this leader did not (it was down when they happened).
      const a = this.host.authority;
      if (a.isMember(req.node) || a.isAdmitted(req.node)) {
        for (const node of req.removed) {
          if (node === req.node || this.removedSet.has(node)) continue;
          this.removedSet.add(node);
          a.step({ type: 'remove', node });
        }
      }
    }
    if (req.type === 'heartbeat' && req.held !== undefined && req.held.length > 0) {
      const a = this.host.authority;
      a.tick(this.clock.now());
      if (!a.isMember(req.node) && a.isAdmitted(req.node)) {
        a.step({ type: 'join', node: req.node, address: this.address(req.node) ?? '', meta: this.meta });
      }
      if (a.isMember(req.node)) {
        for (const { shard, epoch } of req.held) {
          // Below an epoch the last view listed for the shard: an older grant, already fenced.
          if (epoch >= (this.floors.get(shard) ?? 0n)) a.adopt(shard, req.node, epoch);
        }
      }
    }
    const reply = await this.host.call(req);
    if (req.type === 'remove' && reply.ok) this.removedSet.add(req.node);
    return this.removedSet.size === 0 ? reply : { ...reply, removed: this.removed() };
  };

  /** Answers one request given as bytes (from the wire). */
  handle = serveAuthority(this);

  isMember = (node: string): boolean => this.host.isMember(node);

  isAdmitted = (node: string): boolean => this.host.isAdmitted(node);

  close(): void {
    this.host.close();
  }
}
