/**
 * MemoryAuthority: the lease authority of static membership, as a pure state machine. It
 * never reads a clock or a socket: `tick(now)` moves its time, `step(request)` answers one
 * request, `ready()` tells what changed (a new view, grants, freed leases, health changes)
 * and `advance()` acknowledges that. A driver (AuthorityHost, ts/cluster/host.ts) runs it on
 * real time and the cluster wire, as the in-memory implementation of the LeaseAuthority seam
 * (ts/cluster/lease-authority.ts, whose request and reply types it answers); tests run it on
 * any clock.
 *
 * Rules (docs/cluster.md, "Leases and fencing"):
 * - a free shard goes to the alive member ranked first by rendezvous hashing of
 *   `<member>/<shard>` (FNV-1a 64), so assignment is deterministic;
 * - every new grant of a shard has a strictly greater epoch; a renewal keeps it;
 * - a failed member's leases free only when they expire; its renewals after expiry fail;
 * - epochs start above `epochBase` and above the ceiling of a restored state;
 * - what safety needs across a restart of the host (the epoch ceiling and, with per-node
 *   journals, the member whose store holds each shard's journal) is reported by `ready()` as
 *   `durable`; the driver persists it before it sends any reply (AuthorityHost,
 *   ts/cluster/authority-state.ts) and gives it back as `restored`.
 */
import { fnv1a64 } from '../core/index.js';
import { type DetectorConfig, type LeaseConfig, leaseConfig } from './config.js';
import { FailureDetector, type HealthChange } from './detector.js';
import { ClusterCode, type ClusterCodeValue } from './errors.js';
import type { AuthorityReply, AuthorityRequest } from './lease-authority.js';
import { type ClusterMeta, checkJoinMeta, clusterMeta } from './meta.js';
import type { LeaseEntry, MemberInfo, MemberState, MemberStatus, View } from './types.js';

export type { AuthorityReply, AuthorityRequest } from './lease-authority.js';

export interface AuthorityOptions {
  readonly meta: ClusterMeta;
  /** The members the configuration lists; only they (and those `admit` names) may join. */
  readonly members: readonly MemberInfo[];
  /**
   * Members admitted besides `members`, asked at each join and admission check: with gossip
   * membership, whoever the gossip table holds live (ts/cluster/gossip/membership.ts). Gives
   * the member's id and address, or undefined when `node` is not admitted.
   */
  readonly admit?: (node: string) => MemberInfo | undefined;
  readonly lease?: Partial<LeaseConfig>;
  readonly detector?: Partial<DetectorConfig>;
  /** Grant free shards to their ranked member on every tick (default true). */
  readonly autoAssign?: boolean;
  /** Epochs start above this (default 0). */
  readonly epochBase?: bigint;
  /**
   * Where shard journals live. `shared` (default): every node reaches the same shard stores,
   * so a shard may go to any member (a move is a lease transfer; fencing stops a stale owner).
   * `per-node`: each node has its own stores; with replication factor 1 a shard is granted
   * only to the member whose store holds its journal (its last owner), so a failed owner's
   * shards stay free (messages are held) until it returns, and no member ever takes a shard
   * with an empty journal. A release (a hand-over after shipping) lets the next grant go to
   * any member.
   */
  readonly journals?: 'shared' | 'per-node';
  /** The state a previous run persisted (from `ready().durable`). */
  readonly restored?: AuthorityDurable;
  /**
   * No lease is granted before this time on the authority's clock: after a restart, leases
   * the previous run granted may still run for one lease length, by their owners' clocks.
   */
  readonly grantsFrom?: number;
  /** What a refusal before `grantsFrom` says (default: the lease authority restarted, reason `restart`). */
  readonly grantsFromReason?: { readonly text: string; readonly reason: string };
  /**
   * Members, their health and new epochs from elsewhere than `members`, the failure detector
   * and a per-shard counter: the gossip lease leader (ts/cluster/gossip/leader.ts).
   */
  readonly source?: AuthoritySource;
}

/** Where an authority without a static member list learns members, health and epochs. */
export interface AuthoritySource {
  /** A node that may join, with where it listens; undefined when it may not (replaces `members`). */
  admit(node: string): MemberInfo | undefined;
  /** A joined member's health (replaces the failure detector's word); undefined reads as failed. */
  status(node: string): MemberStatus | undefined;
  /** The epoch of a new grant of `shard`: strictly above `last`, the greatest epoch known for it. */
  nextEpoch(shard: number, last: bigint): bigint;
  /** Ends the refusal of an unknown node: `node id "x" is not <unlisted> of cluster c`. */
  readonly unlisted: string;
}

/** What a restarted authority must know to stay safe. */
export interface AuthorityDurable {
  /** Every epoch granted so far is at or below this; new grants are above it. */
  readonly epochCeiling: bigint;
  /** Every view version so far is at or below this; new views are above it (holders ignore older versions). */
  readonly viewCeiling: number;
  /** per-node journals: the member whose store holds each shard's journal. */
  readonly homes: ReadonlyMap<number, string>;
}

/** Epochs are reserved in blocks, so that the ceiling is persisted once per block, not per grant. */
export const EPOCH_BLOCK = 1n << 16n;
/** View versions are reserved in blocks too. */
export const VIEW_BLOCK = 1 << 16;

export interface AuthorityReady {
  /** The view, when it changed since the last advance(). */
  readonly view?: View;
  readonly grants: readonly LeaseEntry[];
  readonly freed: readonly LeaseEntry[];
  readonly health: readonly HealthChange[];
  /** The state to persist before any reply is sent, when it changed since the last advance(). */
  readonly durable?: AuthorityDurable;
}

interface Held {
  owner: string;
  epoch: bigint;
  expiresAt: number;
}

const M64 = (1n << 64n) - 1n;

/**
 * The rendezvous score of a member for a shard: FNV-1a 64 of `<member>/<shard>`, then the
 * SplitMix64 finalizer, so that names differing in one byte do not rank in a fixed order.
 */
export function rendezvousScore(member: string, shard: number): bigint {
  let z = fnv1a64(`${member}/${shard}`);
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}

/** The alive member ranked first for `shard` by rendezvous hashing, or undefined. */
export function rankedOwner(members: readonly string[], shard: number): string | undefined {
  let best: string | undefined;
  let bestScore = -1n;
  for (const m of members) {
    const score = rendezvousScore(m, shard);
    if (score > bestScore || (score === bestScore && best !== undefined && m < best)) {
      best = m;
      bestScore = score;
    }
  }
  return best;
}

export class MemoryAuthority {
  readonly meta: ClusterMeta;
  readonly lease: LeaseConfig;
  private readonly allowed = new Map<string, MemberInfo>();
  private readonly admit: ((node: string) => MemberInfo | undefined) | undefined;
  private readonly joined = new Map<string, { info: MemberInfo; leaving: boolean }>();
  private readonly removed = new Set<string>();
  private readonly leases = new Map<number, Held>();
  private readonly epochs = new Map<number, bigint>();
  /** per-node journals: the member whose store holds each shard's journal. */
  private readonly home = new Map<number, string>();
  private readonly pinned: boolean;
  private readonly detector: FailureDetector;
  private readonly autoAssign: boolean;
  private readonly epochBase: bigint;
  /** Epochs up to this are reserved (persisted); a grant above it raises it by EPOCH_BLOCK first. */
  private ceiling: bigint;
  private viewCeiling: number;
  private durableChanged = false;
  private readonly grantsFrom: number;
  private readonly grantsFromReason: { readonly text: string; readonly reason: string };
  private readonly source: AuthoritySource | undefined;
  /** The members' health as `source` last told it (a change is a new view). */
  private sourced = '';
  private now = 0;
  private version = 0;
  private changed = false;
  private viewPending = false;
  private cached: View | undefined;
  private grants: LeaseEntry[] = [];
  private freed: LeaseEntry[] = [];

  constructor(opts: AuthorityOptions) {
    this.meta = clusterMeta(opts.meta);
    this.lease = leaseConfig(opts.lease);
    for (const m of opts.members) this.allowed.set(m.id, m);
    this.admit = opts.admit;
    this.detector = new FailureDetector(opts.detector);
    this.autoAssign = opts.autoAssign !== false;
    const restoredCeiling = opts.restored?.epochCeiling ?? 0n;
    const base = opts.epochBase ?? 0n;
    this.epochBase = base > restoredCeiling ? base : restoredCeiling;
    this.ceiling = this.epochBase;
    this.version = opts.restored?.viewCeiling ?? 0;
    this.viewCeiling = this.version;
    // Replication factors above 1 are refused by clusterMeta, so a shard's journal is in one
    // store: with per-node stores every shard is pinned to the member whose store holds it.
    this.pinned = opts.journals === 'per-node';
    if (this.pinned) for (const [shard, home] of opts.restored?.homes ?? []) this.home.set(shard, home);
    this.grantsFrom = opts.grantsFrom ?? Number.NEGATIVE_INFINITY;
    this.grantsFromReason = opts.grantsFromReason ?? { text: 'the lease authority restarted', reason: 'restart' };
    this.source = opts.source;
  }

  /** The state a restarted authority needs (what `ready().durable` reports when it changes). */
  durable(): AuthorityDurable {
    return { epochCeiling: this.ceiling, viewCeiling: this.viewCeiling, homes: new Map(this.home) };
  }

  /** Moves time to `now` (ms, never backwards): judges health, frees expired leases, assigns free shards. */
  tick(now: number): void {
    if (now > this.now) this.now = now;
    this.detector.tick(this.now);
    if (this.detector.ready().length > 0) this.changed = true;
    if (this.source) {
      const health = [...this.joined.keys()].map((id) => `${id}=${this.health(id)}`).join(' ');
      if (health !== this.sourced) {
        this.sourced = health;
        this.changed = true;
      }
    }
    for (const [shard, h] of this.leases) {
      if (h.expiresAt <= this.now) this.free(shard, h);
    }
    if (this.autoAssign) this.assign();
  }

  /** Answers one request at the current time. */
  step(req: AuthorityRequest): AuthorityReply {
    switch (req.type) {
      case 'view':
        return this.ok();
      case 'join':
        return this.join(req.node, req.address, req.meta);
      case 'remove': {
        this.removed.add(req.node);
        if (this.joined.delete(req.node)) this.changed = true;
        this.detector.forget(req.node);
        return this.ok();
      }
      case 'revoke': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        const h = this.leases.get(req.shard);
        if (h) this.free(req.shard, h);
        return this.ok();
      }
      default:
        break;
    }
    const member = this.joined.get(req.node);
    if (!member) {
      return this.fail(ClusterCode.UNKNOWN_NODE, `${req.node} is not a member of cluster ${this.meta.id}: join first`, {
        node: req.node,
      });
    }
    this.detector.heard(req.node, this.now);
    if (this.detector.ready().length > 0) this.changed = true;
    switch (req.type) {
      case 'heartbeat': {
        const renewed: number[] = [];
        for (const { shard, epoch } of req.held ?? []) {
          const h = this.leases.get(shard);
          if (h && h.owner === req.node && h.epoch === epoch) {
            h.expiresAt = this.now + this.lease.ttlMs;
            renewed.push(shard);
          }
        }
        if (this.autoAssign) this.assign();
        return { ok: true, view: this.view(), renewed, ttlMs: this.lease.ttlMs };
      }
      case 'leave': {
        this.joined.delete(req.node);
        this.detector.forget(req.node);
        for (const [shard, h] of this.leases) if (h.owner === req.node) this.free(shard, h);
        this.changed = true;
        return this.ok();
      }
      case 'drain': {
        if (!member.leaving) {
          member.leaving = true;
          this.changed = true;
        }
        return this.ok();
      }
      case 'grant': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        if (member.leaving) return this.fail(ClusterCode.LEAVING, `${req.node} is leaving: it takes no new leases`);
        const h = this.leases.get(req.shard);
        if (h && h.owner !== req.node) {
          return this.fail(ClusterCode.LEASE_HELD, `shard ${req.shard} is held by ${h.owner} until its lease ends`, {
            shard: req.shard,
            owner: h.owner,
          });
        }
        if (h) {
          h.expiresAt = this.now + this.lease.ttlMs;
          return this.ok(req.shard, h.epoch);
        }
        if (this.now < this.grantsFrom) {
          const { text, reason } = this.grantsFromReason;
          return this.fail(
            ClusterCode.LEASE_HELD,
            `${text}: leases granted before may still run for ${Math.ceil(this.grantsFrom - this.now)} ms, so shard ${req.shard} is granted after that`,
            { shard: req.shard, reason, retryAfterMs: Math.ceil(this.grantsFrom - this.now) },
          );
        }
        const home = this.pinned ? this.home.get(req.shard) : undefined;
        if (home !== undefined && home !== req.node) {
          return this.fail(
            ClusterCode.LEASE_HELD,
            `shard ${req.shard}'s journal is in ${home}'s store: it waits for ${home} (or a hand-over)`,
            { shard: req.shard, home },
          );
        }
        const g = this.newGrant(req.shard, req.node);
        return this.ok(req.shard, g.epoch);
      }
      case 'renew': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        const h = this.leases.get(req.shard);
        if (!h || h.owner !== req.node || h.epoch !== req.epoch) {
          return this.fail(
            ClusterCode.LEASE_LOST,
            `${req.node} no longer holds shard ${req.shard} at epoch ${req.epoch}: stop using it and ask for a new grant`,
            { shard: req.shard, epoch: String(req.epoch), current: h ? String(h.epoch) : null },
          );
        }
        h.expiresAt = this.now + this.lease.ttlMs;
        return this.ok(req.shard, h.epoch);
      }
      case 'release': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        const h = this.leases.get(req.shard);
        if (h && h.owner === req.node && h.epoch === req.epoch) {
          this.free(req.shard, h);
          if (this.home.delete(req.shard)) this.durableChanged = true;
        } else
          return this.fail(
            ClusterCode.LEASE_LOST,
            `${req.node} does not hold shard ${req.shard} at epoch ${req.epoch}`,
            { shard: req.shard },
          );
        return this.ok();
      }
    }
  }

  /** The current view (cached until something changes). */
  view(): View {
    if (this.changed || !this.cached) {
      this.version++;
      if (this.version > this.viewCeiling) {
        this.viewCeiling = this.version + VIEW_BLOCK;
        this.durableChanged = true;
      }
      this.changed = false;
      this.viewPending = true;
      const members: MemberState[] = [...this.joined.values()]
        .map(({ info, leaving }) => ({
          id: info.id,
          address: info.address,
          status: leaving ? 'leaving' : this.health(info.id),
        }))
        .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
      const leases = [...this.leases.entries()]
        .map(([shard, h]) => ({ shard, owner: h.owner, epoch: h.epoch }))
        .sort((a, b) => a.shard - b.shard);
      this.cached = Object.freeze({ version: this.version, members, leases });
    }
    return this.cached;
  }

  /** Whether `node` is a current member (joined, not removed). The wire's admission check. */
  isMember(node: string): boolean {
    return this.joined.has(node);
  }

  /**
   * Whether `node` may connect at all: listed in the configuration and not removed. The
   * authority's own wire admits these (a node connects before it has joined).
   */
  isAdmitted(node: string): boolean {
    return (
      (this.source
        ? this.source.admit(node) !== undefined
        : this.allowed.has(node) || this.admit?.(node) !== undefined) && !this.removed.has(node)
    );
  }

  /**
   * Takes over a lease an earlier authority granted, as its holder reports it (the gossip lease
   * leader after a leader change): when the shard is free and `epoch` is above every epoch this
   * authority granted or took for it, or when it is held at a lower epoch (an older grant,
   * fenced by this one). The lease ends one lease length from now unless renewed. Returns
   * whether `owner` holds the shard at `epoch` now.
   */
  adopt(shard: number, owner: string, epoch: bigint): boolean {
    if (!this.shardOk(shard) || !this.joined.has(owner)) return false;
    const h = this.leases.get(shard);
    if (h?.owner === owner && h.epoch === epoch) return true;
    if (epoch <= (h?.epoch ?? this.epochs.get(shard) ?? this.epochBase)) return false;
    if (h) this.free(shard, h);
    this.epochs.set(shard, epoch);
    this.leases.set(shard, { owner, epoch, expiresAt: this.now + this.lease.ttlMs });
    this.grants.push({ shard, owner, epoch });
    this.changed = true;
    return true;
  }

  /** When the lease of `shard` ends on the authority's clock (undefined when free). */
  expiresAt(shard: number): number | undefined {
    return this.leases.get(shard)?.expiresAt;
  }

  ready(): AuthorityReady {
    const current = this.view();
    const view = this.viewPending ? current : undefined;
    return {
      ...(view ? { view } : {}),
      grants: this.grants,
      freed: this.freed,
      health: this.detector.ready(),
      ...(this.durableChanged ? { durable: this.durable() } : {}),
    };
  }

  advance(): void {
    this.durableChanged = false;
    this.viewPending = false;
    this.grants = [];
    this.freed = [];
    this.detector.advance();
  }

  private join(node: string, address: string, meta: ClusterMeta): AuthorityReply {
    try {
      checkJoinMeta(this.meta, meta, node);
    } catch (e) {
      const pe = e as { code: ClusterCodeValue; message: string; details: Record<string, unknown> };
      return this.fail(pe.code, pe.message, pe.details);
    }
    const info = this.source ? this.source.admit(node) : (this.allowed.get(node) ?? this.admit?.(node));
    if (!info || this.removed.has(node)) {
      return this.fail(
        ClusterCode.UNKNOWN_NODE,
        `node id ${JSON.stringify(node)} is not ${this.removed.has(node) ? 'a member any more (it was removed)' : (this.source?.unlisted ?? (this.admit ? 'listed in the configuration or known to gossip' : 'listed in the static configuration'))} of cluster ${this.meta.id}`,
        { field: 'node', node },
      );
    }
    if (!this.joined.has(node)) {
      this.joined.set(node, { info: { id: node, address: address || info.address }, leaving: false });
      this.changed = true;
    }
    this.detector.heard(node, this.now);
    if (this.autoAssign) this.assign();
    return this.ok();
  }

  private assign(): void {
    const alive = [...this.joined.entries()]
      .filter(([id, m]) => !m.leaving && this.health(id) === 'alive')
      .map(([id]) => id);
    if (alive.length === 0 || this.now < this.grantsFrom) return;
    for (let s = 0; s < this.meta.shardCount; s++) {
      if (this.leases.has(s)) continue;
      const home = this.pinned ? this.home.get(s) : undefined;
      if (home !== undefined) {
        if (alive.includes(home)) this.newGrant(s, home);
        continue;
      }
      this.newGrant(s, rankedOwner(alive, s) as string);
    }
  }

  private newGrant(shard: number, owner: string): Held {
    const last = this.epochs.get(shard) ?? this.epochBase;
    const epoch = this.source ? this.source.nextEpoch(shard, last) : last + 1n;
    if (epoch <= last) throw new RangeError(`epoch ${epoch} of shard ${shard} is not above ${last}`);
    this.epochs.set(shard, epoch);
    if (epoch > this.ceiling) {
      this.ceiling = epoch + EPOCH_BLOCK;
      this.durableChanged = true;
    }
    const h = { owner, epoch, expiresAt: this.now + this.lease.ttlMs };
    this.leases.set(shard, h);
    if (this.pinned && this.home.get(shard) !== owner) {
      this.home.set(shard, owner);
      this.durableChanged = true;
    }
    this.grants.push({ shard, owner, epoch });
    this.changed = true;
    return h;
  }

  /** A joined member's health: from `source` when given, else from the failure detector. */
  private health(id: string): MemberStatus {
    if (this.source) return this.source.status(id) ?? 'failed';
    return this.detector.status(id) ?? 'alive';
  }

  private free(shard: number, h: Held): void {
    this.leases.delete(shard);
    this.freed.push({ shard, owner: h.owner, epoch: h.epoch });
    this.changed = true;
  }

  private shardOk(shard: number): boolean {
    return Number.isInteger(shard) && shard >= 0 && shard < this.meta.shardCount;
  }

  private badShard(shard: number): AuthorityReply {
    return this.fail(ClusterCode.BAD_SHARD, `shard ${shard} is outside 0..${this.meta.shardCount - 1}`, { shard });
  }

  private ok(shard?: number, epoch?: bigint): AuthorityReply {
    const view = this.view();
    if (shard === undefined || epoch === undefined) return { ok: true, view };
    return { ok: true, view, lease: { shard, epoch, ttlMs: this.lease.ttlMs } };
  }

  private fail(code: ClusterCodeValue, message: string, details: Record<string, unknown> = {}): AuthorityReply {
    return { ok: false, code, message, details, view: this.view() };
  }
}
