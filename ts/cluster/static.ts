/**
 * StaticMembership: members from configuration (StaticConfig), leases from a MemoryAuthority
 * reached through `call` (in the hosting process a direct call, elsewhere the cluster wire).
 * The driver side of the seam: it owns a timer that heartbeats the authority and renews the
 * leases this node holds, counting each lease from the moment the request was sent on this
 * node's monotonic clock.
 */
import {
  type Clock,
  type ClockTimers,
  every,
  monotonicClock,
  type Repeating,
  type Timers,
  timersOf,
} from '../core/clock.js';
import { type LeaseConfig, leaseConfig } from './config.js';
import { ClusterCode, clusterError } from './errors.js';
import type { AuthorityCall, AuthorityReply, AuthorityRequest } from './lease-authority.js';
import { type ClusterMeta, clusterMeta } from './meta.js';
import {
  EMPTY_VIEW,
  isNewer,
  type Lease,
  type MemberInfo,
  type Membership,
  type View,
  type ViewListener,
} from './types.js';

export interface StaticConfig {
  readonly meta: ClusterMeta;
  readonly self: MemberInfo;
  /** Every member of the fleet (the authority refuses others). */
  readonly members: readonly MemberInfo[];
  /** The id of the member hosting the MemoryAuthority. */
  readonly authority: string;
}

export type { AuthorityCall };

export interface StaticMembershipOptions {
  readonly config: StaticConfig;
  readonly call: AuthorityCall;
  readonly lease?: Partial<LeaseConfig>;
  /**
   * Monotonic milliseconds (default `monotonicClock`); a `ClockTimers` also runs the heartbeat
   * timer (else the process's timers, unreferenced).
   */
  readonly clock?: Clock | ClockTimers;
  /** Heartbeat period (default 1/3 of the lease's renewal period, at most 1 s). */
  readonly heartbeatEveryMs?: number;
  /** Called when a heartbeat fails (the authority is unreachable). */
  readonly onError?: (e: unknown) => void;
}

/** Whether a lease still lets its owner start a macrostep at `now` (LeaseConfig's margin). */
export function canStart(lease: Lease, now: number, safetyMarginMs: number): boolean {
  return now < lease.from + lease.ttlMs - safetyMarginMs;
}

/** Whether a lease has not yet ended at `now` by its owner's clock. */
export function unexpired(lease: Lease, now: number): boolean {
  return now < lease.from + lease.ttlMs;
}

export class StaticMembership implements Membership {
  readonly self: string;
  readonly meta: ClusterMeta;
  readonly lease: LeaseConfig;
  private readonly call: AuthorityCall;
  private readonly clock: Clock;
  private readonly heartbeatEveryMs: number;
  private readonly onError: (e: unknown) => void;
  private current: View = EMPTY_VIEW;
  private readonly listeners = new Set<ViewListener>();
  private readonly leases = new Map<number, Lease>();
  private timer: Repeating | undefined;
  private readonly timers: Timers;
  private beating = false;
  private again = false;
  private closed = false;

  constructor(opts: StaticMembershipOptions) {
    this.meta = clusterMeta(opts.config.meta);
    this.self = opts.config.self.id;
    this.config = opts.config;
    this.call = opts.call;
    this.lease = leaseConfig(opts.lease);
    this.clock = opts.clock ?? monotonicClock;
    this.timers = timersOf(opts.clock, monotonicClock);
    this.heartbeatEveryMs =
      opts.heartbeatEveryMs ?? Math.min(1000, Math.max(1, Math.floor(this.lease.renewEveryMs / 3)));
    this.onError = opts.onError ?? (() => {});
  }

  private readonly config: StaticConfig;

  view(): View {
    return this.current;
  }

  subscribe(listener: ViewListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The leases this node holds and that have not ended by its own clock. */
  held(): readonly Lease[] {
    const now = this.clock.now();
    return [...this.leases.values()].filter((l) => unexpired(l, now));
  }

  /** The lease of `shard` if this node holds it and it lets a macrostep start now. */
  leaseFor(shard: number): Lease | undefined {
    const l = this.leases.get(shard);
    return l && canStart(l, this.clock.now(), this.lease.safetyMarginMs) ? l : undefined;
  }

  async join(): Promise<View> {
    const r = await this.request({
      type: 'join',
      node: this.self,
      address: this.config.self.address,
      meta: this.meta,
    });
    if (!this.timer && !this.closed) {
      this.timer = every(this.timers, this.heartbeatEveryMs, () => void this.beat());
    }
    void this.beat();
    return r.view;
  }

  async grant(shard: number): Promise<Lease> {
    const from = this.clock.now();
    const r = await this.request({ type: 'grant', node: this.self, shard });
    return this.keep(r, from);
  }

  async renew(shard: number, epoch: bigint): Promise<Lease> {
    const from = this.clock.now();
    try {
      const r = await this.request({ type: 'renew', node: this.self, shard, epoch });
      return this.keep(r, from);
    } catch (e) {
      if ((e as { code?: string }).code === ClusterCode.LEASE_LOST) this.leases.delete(shard);
      throw e;
    }
  }

  async release(shard: number, epoch: bigint): Promise<void> {
    this.leases.delete(shard);
    await this.request({ type: 'release', node: this.self, shard, epoch });
  }

  async revoke(shard: number): Promise<void> {
    await this.request({ type: 'revoke', shard });
  }

  /** Tells the authority this node is draining: it gets no new leases. */
  async drain(): Promise<void> {
    await this.request({ type: 'drain', node: this.self });
  }

  async leave(): Promise<void> {
    await this.request({ type: 'leave', node: this.self });
    this.leases.clear();
    await this.close();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.timer?.stop();
    this.timer = undefined;
  }

  /** One heartbeat now: renews held leases and claims leases the authority assigned to this node. */
  async beat(): Promise<void> {
    if (this.closed) return;
    if (this.beating) {
      this.again = true;
      return;
    }
    this.beating = true;
    try {
      do {
        this.again = false;
        const from = this.clock.now();
        const held = new Map<number, bigint>();
        for (const l of this.leases.values()) held.set(l.shard, l.epoch);
        for (const l of this.current.leases) if (l.owner === this.self) held.set(l.shard, l.epoch);
        const r = await this.call({
          type: 'heartbeat',
          node: this.self,
          held: [...held].map(([shard, epoch]) => ({ shard, epoch })),
        });
        if (!r.ok && r.code === ClusterCode.UNKNOWN_NODE && !this.closed) {
          // The authority does not know this node: its host restarted (or this node was
          // removed, and joining again is refused). Join again; the held leases are gone.
          this.leases.clear();
          await this.request({
            type: 'join',
            node: this.self,
            address: this.config.self.address,
            meta: this.meta,
          });
          this.again = true;
          continue;
        }
        if (!r.ok) throw clusterError(r.code, r.message, { ...r.details });
        const renewed = new Set(r.renewed ?? []);
        const ttlMs = r.ttlMs ?? this.lease.ttlMs;
        for (const [shard, epoch] of held) {
          if (renewed.has(shard)) this.leases.set(shard, { shard, epoch, ttlMs, from });
          else this.leases.delete(shard);
        }
        this.apply(r.view);
      } while (this.again && !this.closed);
    } catch (e) {
      this.onError(e);
    } finally {
      this.beating = false;
    }
  }

  private keep(r: AuthorityReply, from: number): Lease {
    if (!r.ok || !r.lease) throw clusterError(ClusterCode.UNAVAILABLE, 'the authority answered without a lease');
    const l: Lease = { shard: r.lease.shard, epoch: r.lease.epoch, ttlMs: r.lease.ttlMs, from };
    this.leases.set(l.shard, l);
    return l;
  }

  private async request(req: AuthorityRequest): Promise<AuthorityReply & { ok: true }> {
    let r: AuthorityReply;
    try {
      r = await this.call(req);
    } catch (e) {
      if ((e as { code?: string }).code?.startsWith('PLX_CLUSTER_')) throw e;
      throw clusterError(
        ClusterCode.UNAVAILABLE,
        `the lease authority on ${this.config.authority} cannot be reached: ${(e as Error).message}`,
        {},
        e,
      );
    }
    this.apply(r.view);
    if (!r.ok) throw clusterError(r.code, r.message, { ...r.details });
    return r;
  }

  private apply(view: View): void {
    if (!isNewer(this.current, view)) return;
    this.current = view;
    let claim = false;
    for (const l of view.leases) {
      const mine = this.leases.get(l.shard);
      if (l.owner === this.self && mine?.epoch !== l.epoch) claim = true;
      if (mine && (l.owner !== this.self || l.epoch !== mine.epoch)) this.leases.delete(l.shard);
    }
    for (const fn of this.listeners) fn(view);
    if (claim && !this.closed && this.timer) queueMicrotask(() => void this.beat());
  }
}
