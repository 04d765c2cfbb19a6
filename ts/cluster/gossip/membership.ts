/**
 * GossipMembership: the Membership seam (ts/cluster/types.ts) on SWIM with Lifeguard. The
 * members are the gossip table's (a `Swim` run by `driveSwim` on the node's `GossipTransport`);
 * the leases come from a lease authority hosted by the leader, the live member with the lowest
 * node id, and reached through an injected `call` (the cluster wire's call between nodes, a
 * direct call in one process).
 *
 * The member side is a StaticMembership whose AuthorityCall goes to whoever leads now: it
 * joins, heartbeats, renews from the request's send time, claims and handles refusals exactly
 * as with static membership. When the leader changes, the next request goes to the new one
 * (which answers a member it does not know with PLX_CLUSTER_UNKNOWN_NODE: the member joins it
 * again); a leader that does not answer fails the request with PLX_CLUSTER_UNAVAILABLE, as an
 * unreachable static authority does.
 *
 * The member that leads hosts a `LeaseAuthority` made by the `leader` factory and answers the
 * others' requests (`serve`) only while it leads; `defaultGossipLeader` is the one factory a
 * node uses. Views: the leader's, each member's status made worse by what gossip says
 * (suspect, dead -> failed; a member that left gossip is gone), live gossip members the
 * leader has not admitted yet added; a subscriber gets a view only when its version is
 * greater than the last one it got (views of a former leader are ignored).
 *
 * Removals: the leader's replies list the nodes removed from the cluster; this member takes
 * them (saved through `saveRemoved` before the reply is used), refuses them in `admits` (the
 * wire's handshake check), never counts them as leader, leaves them out of views, hands them to
 * the leader it hosts and lists them in its heartbeats (for a leader that did not know).
 * docs/cluster.md, "Gossip membership".
 */
import type { GossipMessage } from '../../codec/gossip.js';
import { type Clock, type ClockTimers, monotonicClock, type TimerHandle } from '../../core/clock.js';
import { decodeReply, decodeRequest, encodeReply, encodeRequest } from '../codec.js';
import type { DetectorConfig, LeaseConfig } from '../config.js';
import { ClusterCode, clusterError } from '../errors.js';
import type { AuthorityReply, AuthorityRequest, LeaseAuthority } from '../lease-authority.js';
import type { ClusterMeta } from '../meta.js';
import { StaticMembership } from '../static.js';
import {
  EMPTY_VIEW,
  type Lease,
  type MemberInfo,
  type MemberState,
  type MemberStatus,
  type Membership,
  type View,
  type ViewListener,
} from '../types.js';
import type { GossipConfig } from './config.js';
import { driveSwim, type SwimDriver } from './driver.js';
import { GossipLeaseLeader } from './leader.js';
import { type GossipRandom, Swim } from './swim.js';
import { type GossipTransport, gossipName, parseGossipName } from './transport.js';

/** What the leader factory is given: the leader's id and the gossip table's word on members. */
export interface GossipLeaderContext {
  readonly self: string;
  /** The gossip table's status of a member; undefined when gossip does not know it (or it left). */
  status(node: string): MemberStatus | undefined;
  /** Where a gossip-known member's wire listens, or undefined. */
  address(node: string): string | undefined;
  /** The newest view this member held (from an earlier leader), when it held one. */
  readonly previous?: View;
  /** Every node this member knows was removed from the cluster (the new leader keeps refusing them). */
  readonly removed: readonly string[];
}

/** Makes the lease authority a member hosts while it leads. */
export type GossipLeaderFactory = (ctx: GossipLeaderContext) => LeaseAuthority;

export interface DefaultGossipLeaderOptions {
  readonly meta: ClusterMeta;
  readonly lease?: Partial<LeaseConfig>;
  readonly detector?: Partial<DetectorConfig>;
  /** Grant free shards to their ranked member (default true; nodes claim their own: false). */
  readonly autoAssign?: boolean;
  /** Monotonic time and timers of the authority (default `monotonicClock`). */
  readonly clock?: ClockTimers;
  /** Wall time (ms since the epoch) read when a member starts to lead (default `Date.now`). */
  readonly wallClock?: () => number;
}

/**
 * The leader every node hosts: a GossipLeaseLeader (ts/cluster/gossip/leader.ts) that admits
 * whoever gossip knows, grants epochs tagged with its id and start, publishes views above any
 * an earlier leader published, and grants nothing during its first lease length (a lease the
 * previous leader granted just before it went has ended by then, or its holder reported it).
 */
export function defaultGossipLeader(opts: DefaultGossipLeaderOptions): GossipLeaderFactory {
  return (ctx) =>
    new GossipLeaseLeader({
      meta: opts.meta,
      self: ctx.self,
      ...(opts.lease ? { lease: opts.lease } : {}),
      ...(opts.detector ? { detector: opts.detector } : {}),
      ...(opts.autoAssign === undefined ? {} : { autoAssign: opts.autoAssign }),
      clock: opts.clock ?? monotonicClock,
      ...(opts.wallClock ? { wallClock: { now: opts.wallClock } } : {}),
      status: (node) => ctx.status(node),
      address: (node) => ctx.address(node),
      ...(ctx.previous ? { previous: ctx.previous } : {}),
      removed: ctx.removed,
      tickEveryMs: 20,
    });
}

export interface GossipMembershipOptions {
  readonly meta: ClusterMeta;
  /** This node: its id and where its wire listens (its gossip name is `<id>@<address>`). */
  readonly self: MemberInfo;
  /**
   * Gossip names (`<id>@<host:port>`) to join through. A member whose seeds name no other
   * member starts a cluster; one whose seeds name others waits until one of them answers.
   */
  readonly seeds: readonly string[];
  readonly transport: GossipTransport;
  /** Sends an authority request (bytes) to member `peer` and gives its reply (the wire's call). */
  readonly call: (peer: string, bytes: Uint8Array) => Promise<Uint8Array>;
  /** Makes the lease authority this member hosts while it leads. */
  readonly leader: GossipLeaderFactory;
  readonly gossip?: Partial<GossipConfig>;
  readonly lease?: Partial<LeaseConfig>;
  /** Heartbeat period to the leader (default as StaticMembership's). */
  readonly heartbeatEveryMs?: number;
  /** Monotonic time and every timer: SWIM's, heartbeats, the join wait (default `monotonicClock`). */
  readonly clock?: ClockTimers;
  /**
   * The time this member counts its own leases on (default `clock`'s). A clock that runs slow
   * models a skewed owner: it believes its leases last longer than they do (fencing keeps that
   * safe; the node config's `leaseClockRate`).
   */
  readonly leaseClock?: Clock;
  /** Randomness of SWIM's probe order and helpers (default Math.random). */
  readonly random?: GossipRandom;
  /** How long `join` waits for a seed to answer (default 20 probe intervals, at least 3 s). */
  readonly joinTimeoutMs?: number;
  /** Called when a heartbeat to the leader fails. */
  readonly onError?: (e: unknown) => void;
  /** Nodes removed from the cluster, as this member kept them (a node: `<dataDir>/gossip-removed.json`). */
  readonly removed?: readonly string[];
  /**
   * Keeps the removed set durably when it grows (a node writes its file with fsync and an
   * atomic rename); the reply that taught it is used only once this resolved.
   */
  readonly saveRemoved?: (removed: readonly string[]) => Promise<void>;
}

/** How bad a status is: a view shows the worse of the leader's and gossip's word. */
const SEVERITY: Readonly<Record<MemberStatus, number>> = { alive: 0, suspect: 1, leaving: 2, failed: 3 };
const GOSSIP_RANK = { alive: 3, suspect: 2, dead: 1, left: 0 } as const;

const mathRandom: GossipRandom = { int: (n) => Math.floor(Math.random() * n) };

export class GossipMembership implements Membership {
  readonly self: string;
  /** This member's gossip name. */
  readonly name: string;
  private readonly opts: GossipMembershipOptions;
  private readonly clock: ClockTimers;
  private readonly inner: StaticMembership;
  private readonly swim: Swim;
  private driver: SwimDriver | undefined;
  private readonly seeds: readonly string[];
  private readonly joinTimeoutMs: number;
  private hosted: LeaseAuthority | undefined;
  private stamp = 0;
  private cache: { base: View; stamp: number; view: View } | undefined;
  private delivered = 0;
  /** The leader whose views `stampOffset` applies to, the offset, and the newest version handed on. */
  private stampLeader: string | undefined;
  private stampOffset = 0;
  private stampHeld = 0;
  private readonly listeners = new Set<ViewListener>();
  private readonly waiters = new Set<() => void>();
  private left = false;
  private closed = false;
  /** Whether the leader's authority has admitted this member once (heartbeats run from then). */
  private joined = false;
  /** Nodes removed from the cluster: never admitted at the wire, never leader, never in views. */
  private readonly removedSet: Set<string>;
  /** The last save of the removed set (saves run one after another). */
  private saving: Promise<void> = Promise.resolve();

  constructor(opts: GossipMembershipOptions) {
    this.opts = opts;
    this.self = opts.self.id;
    this.name = gossipName(opts.self.id, opts.self.address);
    this.clock = opts.clock ?? monotonicClock;
    this.seeds = opts.seeds.filter((s) => s !== this.name);
    this.removedSet = new Set(opts.removed ?? []);
    this.swim = new Swim({
      name: this.name,
      ...(opts.gossip ? { config: opts.gossip } : {}),
      random: opts.random ?? mathRandom,
      now: this.clock.now(),
      send: (to, m) => opts.transport.send(to, m),
      onChange: () => this.changed(),
    });
    this.joinTimeoutMs = opts.joinTimeoutMs ?? Math.max(3000, 20 * this.swim.config.probeIntervalMs);
    const self = this;
    this.inner = new StaticMembership({
      config: {
        meta: opts.meta,
        self: opts.self,
        members: [],
        // Named in the refusal when the leader cannot be reached.
        get authority() {
          return `the gossip leader ${self.leader() ?? '(none)'}`;
        },
      },
      call: (req) => this.route(req),
      ...(opts.lease ? { lease: opts.lease } : {}),
      ...(opts.heartbeatEveryMs ? { heartbeatEveryMs: opts.heartbeatEveryMs } : {}),
      clock: opts.leaseClock
        ? {
            now: () => (opts.leaseClock as Clock).now(),
            setTimeout: (fn, ms) => this.clock.setTimeout(fn, ms),
            clearTimeout: (h) => this.clock.clearTimeout(h),
          }
        : this.clock,
      ...(opts.onError ? { onError: opts.onError } : {}),
    });
    this.inner.subscribe((v) => this.deliver(v));
  }

  // --- the gossip table ----------------------------------------------------------------

  /** The gossip table's word on node `id` (the best state among its names), or undefined. */
  gossipState(id: string): { state: 'alive' | 'suspect' | 'dead' | 'left'; address: string } | undefined {
    let best: { state: 'alive' | 'suspect' | 'dead' | 'left'; address: string } | undefined;
    for (const m of this.swim.members()) {
      const p = parseGossipName(m.name);
      if (p?.id !== id) continue;
      if (!best || GOSSIP_RANK[m.state] > GOSSIP_RANK[best.state]) best = { state: m.state, address: p.address };
    }
    return best;
  }

  /** A member's status as gossip holds it: dead is failed; a member that left is unknown. */
  gossipStatus(id: string): MemberStatus | undefined {
    const s = this.gossipState(id)?.state;
    return s === 'alive' || s === 'suspect' ? s : s === 'dead' ? 'failed' : undefined;
  }

  /**
   * The leader: the lowest node id among the members gossip holds alive or suspect (a suspect
   * still leads until it is declared dead: a slow leader that refutes keeps leading, instead
   * of every suspicion moving the authority and its grace period). Undefined when none is.
   */
  leader(): string | undefined {
    let low: string | undefined;
    for (const m of this.swim.members()) {
      if (m.state !== 'alive' && m.state !== 'suspect') continue;
      const id = parseGossipName(m.name)?.id;
      if (id === undefined || this.removedSet.has(id)) continue;
      if (low === undefined || id < low) low = id;
    }
    return low;
  }

  /**
   * Whether the wire lets `node` connect: every node with a certificate of the cluster's CA
   * (the wire checks that), except one removed from the cluster: one this member learned was
   * removed (from the leader's replies, or its data directory), or one the hosted authority
   * does not admit though gossip holds it live. A node gossip does not know, or holds dead,
   * may connect: it joins, or comes back and refutes.
   */
  admits(node: string): boolean {
    if (node !== this.self && this.removedSet.has(node)) return false;
    const a = this.hosted;
    if (a === undefined || node === this.self) return true;
    const s = this.gossipStatus(node);
    return (s !== 'alive' && s !== 'suspect') || a.isAdmitted(node);
  }

  /** Every node this member knows was removed from the cluster, sorted. */
  removed(): readonly string[] {
    return [...this.removedSet].sort();
  }

  /** Whether `close` (or `leave`) ended this membership. */
  isClosed(): boolean {
    return this.closed;
  }

  /** The authority this member hosts while it leads, else undefined. */
  authority(): LeaseAuthority | undefined {
    return this.hosted;
  }

  // --- the seam ------------------------------------------------------------------------

  view(): View {
    return this.merged(this.inner.view());
  }

  held(): readonly Lease[] {
    return this.inner.held();
  }

  leaseFor(shard: number): Lease | undefined {
    return this.inner.leaseFor(shard);
  }

  subscribe(listener: ViewListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Joins gossip through the seeds, waits until a seed answered (when they name another
   * member; PLX_CLUSTER_UNAVAILABLE after `joinTimeoutMs`, gossip keeps trying), then joins
   * the leader's authority (which checks the ClusterMeta, naming the field).
   */
  async join(): Promise<View> {
    if (this.closed) throw clusterError(ClusterCode.LEAVING, `${this.self} has closed its membership`);
    if (this.driver === undefined) {
      this.opts.transport.onMessage((m: GossipMessage) => this.driver?.deliver(m));
      this.driver = driveSwim(this.swim, this.clock);
      this.swim.join(this.seeds, this.clock.now());
      this.driver.poke();
    }
    if (this.seeds.length > 0) await this.seedAnswered();
    this.reconcile();
    const v = await this.inner.join();
    this.joined = true;
    return this.merged(v);
  }

  grant(shard: number): Promise<Lease> {
    return this.inner.grant(shard);
  }

  renew(shard: number, epoch: bigint): Promise<Lease> {
    return this.inner.renew(shard, epoch);
  }

  release(shard: number, epoch: bigint): Promise<void> {
    return this.inner.release(shard, epoch);
  }

  revoke(shard: number): Promise<void> {
    return this.inner.revoke(shard);
  }

  drain(): Promise<void> {
    return this.inner.drain();
  }

  /** Leaves the authority (its leases are freed), then gossip (a `left` update goes out), then closes. */
  async leave(): Promise<void> {
    try {
      await this.inner.leave();
    } finally {
      this.left = true;
      if (this.driver && !this.driver.stopped) this.swim.leave(this.clock.now());
      await this.close();
    }
  }

  /** Stops the gossip driver, the heartbeats and the hosted authority; the node fails by gossip's detector. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.driver?.stop();
    await this.inner.close();
    this.hosted?.close();
    this.hosted = undefined;
    for (const w of this.waiters) w();
    this.opts.transport.close();
  }

  /**
   * Answers an authority request (bytes) from the authenticated member `from`: the hosted
   * authority's reply while this member leads, else PLX_CLUSTER_UNAVAILABLE naming the leader.
   * A request that speaks for another node than `from` is refused (PLX_CLUSTER_BAD_REQUEST).
   */
  serve = async (from: string, body: Uint8Array): Promise<Uint8Array> => {
    if (this.closed) throw clusterError(ClusterCode.UNAVAILABLE, `${this.self} has closed its membership`);
    const req = decodeRequest(body);
    if ('node' in req && req.type !== 'remove' && req.node !== from) {
      throw clusterError(ClusterCode.BAD_REQUEST, `an authority request from ${from} speaks for ${req.node}`, {
        peer: from,
        node: req.node,
      });
    }
    this.reconcile();
    const a = this.hosted;
    if (a === undefined) {
      const leader = this.leader();
      const r: AuthorityReply = {
        ok: false,
        code: ClusterCode.UNAVAILABLE,
        message: `${this.self} does not lead the gossip cluster: ${leader ?? 'no member'} does`,
        details: { leader: leader ?? null },
        view: this.inner.view(),
      };
      return encodeReply(r);
    }
    const reply = await a.call(req);
    await this.learn(reply);
    return encodeReply(reply);
  };

  // --- inside --------------------------------------------------------------------------

  private async route(request: AuthorityRequest): Promise<AuthorityReply> {
    // Heartbeats list the removals this member knows, for a leader that did not know them.
    const req: AuthorityRequest =
      request.type === 'heartbeat' && this.removedSet.size > 0 ? { ...request, removed: this.removed() } : request;
    this.reconcile();
    const leader = this.leader();
    if (leader === undefined) throw new Error('gossip holds no member alive');
    const reply =
      leader === this.self && this.hosted
        ? await this.hosted.call(req)
        : decodeReply(await this.opts.call(leader, encodeRequest(req)));
    await this.learn(reply);
    return this.restamp(leader, reply);
  }

  /**
   * Puts a leader's view on this member's version line. A leader numbers its views from its
   * start (tagged, ms x 1000), but a member may have held a view of another leader that started
   * later (two members led for a moment while the cluster formed): the views of the leader it
   * follows now would then all look older and be ignored. So the first reply of each new leader
   * fixes an offset that puts its views just above the newest one held, and its later views keep
   * their order. A reply from a member that no longer leads by this member's table is made
   * older than anything held, so it changes nothing.
   */
  private restamp(from: string, reply: AuthorityReply): AuthorityReply {
    const v = reply.view;
    if (this.leader() !== from) return { ...reply, view: { ...v, version: 0 } };
    if (this.stampLeader !== from) {
      this.stampLeader = from;
      this.stampOffset = v.version <= this.stampHeld ? this.stampHeld + 1 - v.version : 0;
    }
    const version = v.version + this.stampOffset;
    if (version > this.stampHeld) this.stampHeld = version;
    return this.stampOffset === 0 ? reply : { ...reply, view: { ...v, version } };
  }

  /**
   * Takes the removed nodes a leader's reply lists: from then on this member's wire refuses
   * them, and they are saved (`saveRemoved`) before the reply is used.
   */
  private async learn(reply: AuthorityReply): Promise<void> {
    const fresh = (reply.removed ?? []).filter((n) => n !== this.self && !this.removedSet.has(n));
    if (fresh.length === 0) return;
    for (const n of fresh) this.removedSet.add(n);
    this.stamp++;
    const save = this.opts.saveRemoved;
    if (save === undefined) return;
    const list = this.removed();
    this.saving = this.saving.catch(() => {}).then(() => save(list));
    return this.saving;
  }

  /** Hosts the authority while this member leads, and only then. */
  private reconcile(): void {
    const leads = !this.closed && !this.left && this.driver !== undefined && this.leader() === this.self;
    if (leads && this.hosted === undefined) {
      this.hosted = this.opts.leader({
        self: this.self,
        status: (node) => this.gossipStatus(node),
        address: (node) => {
          const g = this.gossipState(node);
          return g && g.state !== 'left' ? g.address : undefined;
        },
        ...(this.inner.view().version > 0 ? { previous: this.inner.view() } : {}),
        removed: this.removed(),
      });
    } else if (!leads && this.hosted !== undefined) {
      this.hosted.close();
      this.hosted = undefined;
    }
  }

  private changed(): void {
    this.stamp++;
    for (const w of this.waiters) w();
    this.reconcile();
    // A member's health changed: ask the leader for its view now.
    if (this.joined && !this.closed) queueMicrotask(() => void this.inner.beat());
  }

  /** Resolves once gossip holds another member live; PLX_CLUSTER_UNAVAILABLE after joinTimeoutMs. */
  private seedAnswered(): Promise<void> {
    const others = () => this.swim.members().some((m) => m.name !== this.name && m.state === 'alive');
    if (others()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      let timer: TimerHandle | undefined;
      const check = () => {
        if (this.closed || others()) {
          done();
          if (this.closed) reject(clusterError(ClusterCode.LEAVING, `${this.self} closed while joining`));
          else resolve();
        }
      };
      const done = () => {
        this.waiters.delete(check);
        if (timer !== undefined) this.clock.clearTimeout(timer);
      };
      this.waiters.add(check);
      timer = this.clock.setTimeout(() => {
        done();
        reject(
          clusterError(
            ClusterCode.UNAVAILABLE,
            `${this.self} heard from no gossip seed (${this.seeds.join(', ')}) within ${this.joinTimeoutMs} ms`,
            { field: 'seeds', seeds: [...this.seeds] },
          ),
        );
      }, this.joinTimeoutMs);
    });
  }

  private deliver(v: View): void {
    if (v.version <= this.delivered) return;
    this.delivered = v.version;
    const m = this.merged(v);
    for (const fn of this.listeners) fn(m);
  }

  private merged(base: View): View {
    const c = this.cache;
    if (c && c.base === base && c.stamp === this.stamp) return c.view;
    if (base === EMPTY_VIEW && this.driver === undefined) return base;
    const members: MemberState[] = [];
    const seen = new Set<string>();
    for (const m of base.members) {
      seen.add(m.id);
      if (this.removedSet.has(m.id)) continue;
      const g = this.gossipState(m.id);
      if (g?.state === 'left') continue;
      const gs: MemberStatus | undefined = g === undefined ? undefined : g.state === 'dead' ? 'failed' : g.state;
      const status = gs !== undefined && SEVERITY[gs] > SEVERITY[m.status] ? gs : m.status;
      members.push(status === m.status ? m : { ...m, status });
    }
    for (const m of this.swim.members()) {
      if (m.state !== 'alive' && m.state !== 'suspect') continue;
      const p = parseGossipName(m.name);
      if (p === undefined || seen.has(p.id) || this.removedSet.has(p.id)) continue;
      seen.add(p.id);
      members.push({ id: p.id, address: p.address, status: m.state });
    }
    members.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const view: View = Object.freeze({ version: base.version, members, leases: base.leases });
    this.cache = { base, stamp: this.stamp, view };
    return view;
  }
}
