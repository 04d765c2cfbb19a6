/**
 * EtcdAuthority: the LeaseAuthority seam (ts/cluster/lease-authority.ts) on a real etcd v3
 * cluster, through its JSON gateway (EtcdGateway, ts/cluster/etcd-gateway.ts). Every plexus
 * process may open one on the same etcd and key prefix; etcd's transactions order them.
 *
 * Keys under the prefix (default `/plexus/<cluster id>/`; docs/cluster.md, "The etcd authority"):
 * - `meta`: the ClusterMeta (JSON), written once by the first authority; every later one (and
 *   every join) is checked against it, the differing field named (PLX_CLUSTER_META_MISMATCH);
 * - `members/<id>`: a joined member, `{address, leaving}`; `removed/<id>`: a removed one;
 * - `epochs/<shard>`: the shard's last epoch (decimal), never deleted; a grant raises it by one
 *   in a transaction that compares its `mod_revision`, so two grants never share an epoch,
 *   whatever restarts;
 * - `leases/<shard>`: the lease, `{owner, epoch, expiresAt, holder}`, bound to an etcd lease
 *   granted for it; written in the same transaction as the epoch, and renewed by a
 *   `/v3/lease/keepalive` and a compare-and-set put;
 * - `alive/<id>`: rewritten by each heartbeat of member `id`; every authority object counts a
 *   new `mod_revision` of it as a sign of life, so that all of them judge a member's health
 *   alike (a member only one process hears would otherwise look alive, or failed, to the rest);
 * - `view`: `{version, digest}` of the last published view; a new view content (or the first
 *   view of a new authority object) raises the version by one, by compare-and-set, so views
 *   carry strictly increasing versions across every authority.
 *
 * Time: a lease ends on the authority's own clock (`clock`, the one the suite moves). A lease
 * this object wrote ends at its recorded `expiresAt`; a lease another authority object wrote
 * (another process, or a run before a restart) ends one lease length after this object first
 * saw it at its current `mod_revision`: its holder got it before that, so by then its own
 * clock has run out too. The etcd lease (TTL `gcTtlSeconds`, several lease lengths) only
 * removes keys nobody renews any more: expiry never waits for it, and etcd extending it on a
 * leader change delays only that clean-up. Member health (alive, suspect, failed) is judged by
 * this object's failure detector from the requests it answers; a failed member's leases free
 * only when they expire.
 */
import { randomBytes } from 'node:crypto';
import { type Clock, type ClockTimers, monotonicClock } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import { type DetectorConfig, type LeaseConfig, leaseConfig } from './config.js';
import { FailureDetector } from './detector.js';
import { ClusterCode, type ClusterCodeValue, clusterError } from './errors.js';
import { type EtcdCompare, EtcdGateway, type EtcdGatewayOptions, type EtcdKv, type EtcdOp } from './etcd-gateway.js';
import type { AuthorityReply, AuthorityRequest, LeaseAuthority } from './lease-authority.js';
import { type ClusterMeta, checkJoinMeta, clusterMeta } from './meta.js';
import type { LeaseEntry, MemberInfo, MemberState, MemberStatus, View } from './types.js';

export interface EtcdAuthorityOptions {
  /** The gateway client, or its options (endpoints, timeouts, retries). */
  readonly etcd: EtcdGateway | EtcdGatewayOptions;
  /** Where the cluster's keys live (default `/plexus/<meta.id>/`); ends with `/`. */
  readonly prefix?: string;
  readonly meta: ClusterMeta;
  /** The members the configuration lists; only they may join. */
  readonly members: readonly MemberInfo[];
  readonly lease?: Partial<LeaseConfig>;
  readonly detector?: Partial<DetectorConfig>;
  /** The authority's time (ms) that leases end on; default the process's monotonic clock. */
  readonly clock?: Clock;
  /** Timers of the watch's restarts (default monotonicClock's, unreferenced). */
  readonly timers?: ClockTimers;
  /** TTL (s) of the etcd lease behind each shard lease: the clean-up backstop (default max(10, 3 lease lengths)). */
  readonly gcTtlSeconds?: number;
  /** Keep `isMember`/`isAdmitted` current with a `/v3/watch` on the prefix (default true). */
  readonly watch?: boolean;
}

interface LeaseValue {
  owner: string;
  epoch: bigint;
  expiresAt: number;
  /** The authority object that wrote it. */
  holder: string;
}

interface Snapshot {
  revision: bigint;
  members: Map<string, { address: string; leaving: boolean; mod: bigint }>;
  removed: Set<string>;
  epochs: Map<number, { epoch: bigint; mod: bigint }>;
  leases: Map<number, LeaseValue & { mod: bigint; etcdLease: bigint }>;
  view: { version: number; digest: string; mod: bigint } | undefined;
  /** `alive/<id>` keys: member -> mod_revision. */
  alive: Map<string, bigint>;
}

/** A request outcome before the view is attached; `conflict`: another writer won a comparison, read again. */
type Outcome =
  | { kind: 'ok'; lease?: { shard: number; epoch: bigint }; renewed?: number[]; changed: boolean }
  | { kind: 'fail'; code: ClusterCodeValue; message: string; details: Record<string, unknown> }
  | { kind: 'conflict' };

/** Reads and writes before a request gives up on contention (each a full read, decide, compare-and-set). */
const MAX_ROUNDS = 32;
/** Pause before watching again after the watch stream ended (an etcd member died, say). */
const WATCH_AGAIN_MS = 200;

export class EtcdAuthority implements LeaseAuthority {
  readonly meta: ClusterMeta;
  readonly lease: LeaseConfig;
  readonly prefix: string;
  readonly gateway: EtcdGateway;
  /** This object's name in the lease values it writes. */
  readonly incarnation = randomBytes(8).toString('hex');
  private readonly clock: Clock;
  private readonly timers: ClockTimers;
  private readonly gcTtl: number;
  private readonly allowed = new Map<string, MemberInfo>();
  private readonly detector: FailureDetector;
  /** `<shard>@<mod_revision>` of another object's lease -> when this object first saw it. */
  private readonly firstSeen = new Map<string, number>();
  /** The `alive/<id>` revision last counted as a sign of life of each member. */
  private readonly aliveSeen = new Map<string, bigint>();
  /** Joined and removed members as last read or watched (`isMember`, `isAdmitted`). */
  private joined = new Set<string>();
  private removed = new Set<string>();
  /** The etcd revision `joined` and `removed` are current at (a watch event at or below it is old news). */
  private cacheRevision = 0n;
  private published = false;
  private closed = false;
  private queue: Promise<unknown> = Promise.resolve();
  private watcher: { close(): void } | undefined;
  private watchTimer: unknown;

  private constructor(opts: EtcdAuthorityOptions) {
    this.meta = clusterMeta(opts.meta);
    this.lease = leaseConfig(opts.lease);
    this.prefix = opts.prefix ?? `/plexus/${this.meta.id}/`;
    if (!this.prefix.endsWith('/')) {
      throw clusterError(ClusterCode.BAD_CONFIG, `the etcd key prefix ${JSON.stringify(this.prefix)} must end with /`, {
        field: 'prefix',
      });
    }
    this.gateway = opts.etcd instanceof EtcdGateway ? opts.etcd : new EtcdGateway(opts.etcd);
    this.clock = opts.clock ?? monotonicClock;
    this.timers = opts.timers ?? monotonicClock;
    this.gcTtl = opts.gcTtlSeconds ?? Math.max(10, Math.ceil((3 * this.lease.ttlMs) / 1000));
    if (!Number.isInteger(this.gcTtl) || this.gcTtl * 1000 < this.lease.ttlMs * 2) {
      throw clusterError(
        ClusterCode.BAD_CONFIG,
        `gcTtlSeconds ${this.gcTtl} must be a whole number of seconds of at least two lease lengths (${(2 * this.lease.ttlMs) / 1000} s)`,
        { field: 'gcTtlSeconds' },
      );
    }
    for (const m of opts.members) this.allowed.set(m.id, m);
    this.detector = new FailureDetector(opts.detector);
  }

  /**
   * Opens the authority on etcd: writes the cluster meta if the prefix has none, else checks
   * ours against it (PLX_CLUSTER_META_MISMATCH naming the field), and reads the members and
   * leases there (leases of other authority objects are held for one lease length from now).
   */
  static async open(opts: EtcdAuthorityOptions): Promise<EtcdAuthority> {
    const a = new EtcdAuthority(opts);
    const metaKey = `${a.prefix}meta`;
    const metaText = JSON.stringify({
      id: a.meta.id,
      shardCount: a.meta.shardCount,
      hashVersion: a.meta.hashVersion,
      replicationFactor: a.meta.replicationFactor,
    });
    const r = await a.gateway.txn(
      [{ key: metaKey, target: 'CREATE', createRevision: 0n }],
      [{ put: metaKey, value: metaText }],
      [{ range: metaKey }],
    );
    if (!r.succeeded) {
      const kv = r.ranges[0]?.kvs[0];
      let stored: ClusterMeta;
      try {
        stored = clusterMeta(JSON.parse(kv?.value.toString('utf8') ?? '') as ClusterMeta);
      } catch (e) {
        throw a.stateError(`${metaKey} does not hold a cluster meta`, 'meta', e);
      }
      checkJoinMeta(stored, a.meta, 'this authority');
    }
    const snap = await a.load();
    const now = a.clock.now();
    for (const id of snap.members.keys()) a.detector.heard(id, now);
    a.noteAlive(snap, now);
    a.detector.advance();
    for (const [shard, l] of snap.leases) a.expiry(shard, l, now);
    if (opts.watch !== false) a.watchFrom(snap.revision + 1n);
    return a;
  }

  readonly call = (req: AuthorityRequest): Promise<AuthorityReply> => {
    const run = this.queue.then(() => this.answer(req));
    this.queue = run.catch(() => undefined);
    return run;
  };

  isMember(node: string): boolean {
    return this.joined.has(node);
  }

  isAdmitted(node: string): boolean {
    return this.allowed.has(node) && !this.removed.has(node);
  }

  close(): void {
    this.closed = true;
    this.watcher?.close();
    this.watcher = undefined;
    if (this.watchTimer !== undefined) this.timers.clearTimeout(this.watchTimer);
  }

  // ---- requests ----

  private async answer(req: AuthorityRequest): Promise<AuthorityReply> {
    if (this.closed) throw clusterError(ClusterCode.UNAVAILABLE, 'the etcd authority is closed');
    const now = this.clock.now();
    this.detector.tick(now);
    let out: Outcome = { kind: 'conflict' };
    let snap: Snapshot | undefined;
    for (let round = 0; round < MAX_ROUNDS && out.kind === 'conflict'; round++) {
      snap = await this.load();
      this.noteAlive(snap, now);
      out = await this.apply(req, snap, now);
    }
    // The request is applied (or refused) once; only publishing its view may take more rounds.
    for (let round = 0; round < MAX_ROUNDS && out.kind !== 'conflict' && snap !== undefined; round++) {
      if (round > 0 || (out.kind === 'ok' && out.changed)) snap = await this.load();
      const view = await this.publish(snap, now);
      if (view === undefined) continue;
      if (out.kind === 'fail') return { ok: false, code: out.code, message: out.message, details: out.details, view };
      return {
        ok: true,
        view,
        ...(out.lease ? { lease: { ...out.lease, ttlMs: this.lease.ttlMs } } : {}),
        ...(out.renewed ? { renewed: out.renewed, ttlMs: this.lease.ttlMs } : {}),
      };
    }
    throw clusterError(
      ClusterCode.UNAVAILABLE,
      `the etcd authority lost ${MAX_ROUNDS} compare-and-set rounds in a row on ${req.type}: too much contention`,
      { request: req.type },
    );
  }

  private async apply(req: AuthorityRequest, s: Snapshot, now: number): Promise<Outcome> {
    const p = this.prefix;
    switch (req.type) {
      case 'view':
        return { kind: 'ok', changed: false };
      case 'join':
        return this.join(req.node, req.address, req.meta, s, now);
      case 'remove': {
        this.detector.forget(req.node);
        await this.gateway.txn([], [{ put: `${p}removed/${req.node}`, value: '' }, { del: `${p}members/${req.node}` }]);
        return { kind: 'ok', changed: true };
      }
      case 'revoke': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        const l = s.leases.get(req.shard);
        if (l === undefined) return { kind: 'ok', changed: false };
        return this.cas([this.modIs(`leases/${req.shard}`, l.mod)], [{ del: `${p}leases/${req.shard}` }]);
      }
      default:
        break;
    }
    const member = s.members.get(req.node);
    if (member === undefined) {
      return this.fail(ClusterCode.UNKNOWN_NODE, `${req.node} is not a member of cluster ${this.meta.id}: join first`, {
        node: req.node,
      });
    }
    this.detector.heard(req.node, now);
    switch (req.type) {
      case 'heartbeat': {
        // A sign of life every authority object reads (not a comparison: a plain put).
        await this.gateway.txn([], [{ put: `${p}alive/${req.node}`, value: this.incarnation }]);
        const renewed: number[] = [];
        for (const { shard, epoch } of req.held ?? []) {
          const l = s.leases.get(shard);
          if (!l || l.owner !== req.node || l.epoch !== epoch || this.expiry(shard, l, now) <= now) continue;
          const r = await this.renewLease(shard, l, now);
          if (r === 'conflict') return { kind: 'conflict' };
          if (r) renewed.push(shard);
        }
        return { kind: 'ok', renewed, changed: renewed.length > 0 };
      }
      case 'leave': {
        this.detector.forget(req.node);
        const cmp: EtcdCompare[] = [this.modIs(`members/${req.node}`, member.mod)];
        const ops: EtcdOp[] = [{ del: `${p}members/${req.node}` }];
        for (const [shard, l] of s.leases) {
          if (l.owner !== req.node) continue;
          cmp.push(this.modIs(`leases/${shard}`, l.mod));
          ops.push({ del: `${p}leases/${shard}` });
        }
        return this.cas(cmp, ops);
      }
      case 'drain': {
        if (member.leaving) return { kind: 'ok', changed: false };
        return this.cas(
          [this.modIs(`members/${req.node}`, member.mod)],
          [{ put: `${p}members/${req.node}`, value: JSON.stringify({ address: member.address, leaving: true }) }],
        );
      }
      case 'grant': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        if (member.leaving) return this.fail(ClusterCode.LEAVING, `${req.node} is leaving: it takes no new leases`);
        const l = s.leases.get(req.shard);
        if (l !== undefined) {
          const ends = this.expiry(req.shard, l, now);
          if (ends > now) {
            if (l.owner === req.node && l.holder === this.incarnation) {
              const r = await this.renewLease(req.shard, l, now);
              if (r === 'conflict') return { kind: 'conflict' };
              if (r) return { kind: 'ok', lease: { shard: req.shard, epoch: l.epoch }, changed: true };
            } else {
              const foreign = l.holder !== this.incarnation;
              return this.fail(
                ClusterCode.LEASE_HELD,
                foreign
                  ? `shard ${req.shard} is held by ${l.owner} under a lease another authority granted: it is granted again once that lease has run out (${Math.ceil(ends - now)} ms)`
                  : `shard ${req.shard} is held by ${l.owner} until its lease ends`,
                foreign
                  ? { shard: req.shard, owner: l.owner, reason: 'restart', retryAfterMs: Math.ceil(ends - now) }
                  : { shard: req.shard, owner: l.owner },
              );
            }
          }
        }
        return this.newGrant(req.shard, req.node, s, now);
      }
      case 'renew': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        const l = s.leases.get(req.shard);
        const live = l !== undefined && this.expiry(req.shard, l, now) > now;
        if (l && live && l.owner === req.node && l.epoch === req.epoch) {
          const r = await this.renewLease(req.shard, l, now);
          if (r === 'conflict') return { kind: 'conflict' };
          if (r) return { kind: 'ok', lease: { shard: req.shard, epoch: l.epoch }, changed: true };
        }
        return this.fail(
          ClusterCode.LEASE_LOST,
          `${req.node} no longer holds shard ${req.shard} at epoch ${req.epoch}: stop using it and ask for a new grant`,
          { shard: req.shard, epoch: String(req.epoch), current: l && live ? String(l.epoch) : null },
        );
      }
      case 'release': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        const l = s.leases.get(req.shard);
        if (!l || l.owner !== req.node || l.epoch !== req.epoch || this.expiry(req.shard, l, now) <= now) {
          return this.fail(
            ClusterCode.LEASE_LOST,
            `${req.node} does not hold shard ${req.shard} at epoch ${req.epoch}`,
            {
              shard: req.shard,
            },
          );
        }
        const out = await this.cas([this.modIs(`leases/${req.shard}`, l.mod)], [{ del: `${p}leases/${req.shard}` }]);
        if (out.kind === 'ok') await this.gateway.leaseRevoke(l.etcdLease).catch(() => undefined);
        return out;
      }
    }
  }

  private async join(node: string, address: string, meta: ClusterMeta, s: Snapshot, now: number): Promise<Outcome> {
    try {
      checkJoinMeta(this.meta, meta, node);
    } catch (e) {
      const pe = e as PlexusError;
      return this.fail(pe.code as ClusterCodeValue, pe.message, { ...(pe.details as Record<string, unknown>) });
    }
    const info = this.allowed.get(node);
    const removed = s.removed.has(node);
    if (!info || removed) {
      return this.fail(
        ClusterCode.UNKNOWN_NODE,
        `node id ${JSON.stringify(node)} is not ${removed ? 'a member any more (it was removed)' : 'listed in the static configuration'} of cluster ${this.meta.id}`,
        { field: 'node', node },
      );
    }
    this.detector.heard(node, now);
    if (s.members.has(node)) return { kind: 'ok', changed: false };
    return this.cas(
      [
        { key: `${this.prefix}members/${node}`, target: 'CREATE', createRevision: 0n },
        { key: `${this.prefix}removed/${node}`, target: 'CREATE', createRevision: 0n },
      ],
      [
        {
          put: `${this.prefix}members/${node}`,
          value: JSON.stringify({ address: address || info.address, leaving: false }),
        },
      ],
    );
  }

  /** A new grant: the epoch key raised by one and the lease written, in one compare-and-set. */
  private async newGrant(shard: number, owner: string, s: Snapshot, now: number): Promise<Outcome> {
    const last = s.epochs.get(shard);
    const epoch = (last?.epoch ?? 0n) + 1n;
    const l = s.leases.get(shard);
    const { id } = await this.gateway.leaseGrant(this.gcTtl);
    const value: LeaseValue = { owner, epoch, expiresAt: now + this.lease.ttlMs, holder: this.incarnation };
    const out = await this.cas(
      [this.modIs(`epochs/${shard}`, last?.mod ?? 0n), this.modIs(`leases/${shard}`, l?.mod ?? 0n)],
      [
        { put: `${this.prefix}epochs/${shard}`, value: epoch.toString() },
        { put: `${this.prefix}leases/${shard}`, value: encodeLease(value), lease: id },
      ],
    );
    if (out.kind !== 'ok') {
      await this.gateway.leaseRevoke(id).catch(() => undefined);
      return out;
    }
    // The lease this one replaces (expired) has nothing left to keep.
    if (l !== undefined) await this.gateway.leaseRevoke(l.etcdLease).catch(() => undefined);
    return { kind: 'ok', lease: { shard, epoch }, changed: true };
  }

  /** Renews a live lease: one keepalive of its etcd lease, then its expiry moved by compare-and-set. */
  private async renewLease(
    shard: number,
    l: LeaseValue & { mod: bigint; etcdLease: bigint },
    now: number,
  ): Promise<boolean | 'conflict'> {
    const ttl = await this.gateway.keepAlive(l.etcdLease);
    if (ttl <= 0n) return false; // etcd dropped it: the key is gone or about to be
    const value: LeaseValue = {
      owner: l.owner,
      epoch: l.epoch,
      expiresAt: now + this.lease.ttlMs,
      holder: this.incarnation,
    };
    const out = await this.cas(
      [this.modIs(`leases/${shard}`, l.mod)],
      [{ put: `${this.prefix}leases/${shard}`, value: encodeLease(value), lease: l.etcdLease }],
    );
    return out.kind === 'ok' ? true : 'conflict';
  }

  // ---- reading, publishing ----

  /** Counts each new revision of a member's `alive/<id>` key as a sign of life at `now`. */
  private noteAlive(s: Snapshot, now: number): void {
    for (const [id, mod] of s.alive) {
      if (this.aliveSeen.get(id) === mod) continue;
      const first = !this.aliveSeen.has(id);
      this.aliveSeen.set(id, mod);
      // A key first read here may be old (a process that died long ago): only members are heard.
      if (!first || s.members.has(id)) this.detector.heard(id, now);
    }
  }

  /** When a lease ends on this object's clock. */
  private expiry(shard: number, l: LeaseValue & { mod: bigint }, now: number): number {
    if (l.holder === this.incarnation) return l.expiresAt;
    const key = `${shard}@${l.mod}`;
    let seen = this.firstSeen.get(key);
    if (seen === undefined) {
      seen = now;
      this.firstSeen.set(key, seen);
    }
    return seen + this.lease.ttlMs;
  }

  private async load(): Promise<Snapshot> {
    const r = await this.gateway.range(this.prefix, true);
    const s: Snapshot = {
      revision: r.revision,
      members: new Map(),
      removed: new Set(),
      epochs: new Map(),
      leases: new Map(),
      view: undefined,
      alive: new Map(),
    };
    for (const kv of r.kvs) this.read(kv, s);
    if (s.revision >= this.cacheRevision) {
      this.joined = new Set(s.members.keys());
      this.removed = s.removed;
      this.cacheRevision = s.revision;
    }
    // Forget first sightings of lease revisions that are no longer current.
    const current = new Set([...s.leases].map(([shard, l]) => `${shard}@${l.mod}`));
    for (const k of this.firstSeen.keys()) if (!current.has(k)) this.firstSeen.delete(k);
    return s;
  }

  private read(kv: EtcdKv, s: Snapshot): void {
    const rest = kv.key.slice(this.prefix.length);
    const text = kv.value.toString('utf8');
    const slash = rest.indexOf('/');
    const kind = slash < 0 ? rest : rest.slice(0, slash);
    const name = slash < 0 ? '' : rest.slice(slash + 1);
    const shard = (n: string) => {
      const v = Number(n);
      if (!/^\d{1,7}$/.test(n) || !this.shardOk(v)) throw this.stateError(`${kv.key} names no shard`, 'key');
      return v;
    };
    try {
      switch (kind) {
        case 'members': {
          const j = JSON.parse(text) as { address?: unknown; leaving?: unknown };
          if (typeof j.address !== 'string' || typeof j.leaving !== 'boolean') throw new Error('bad member');
          s.members.set(name, { address: j.address, leaving: j.leaving, mod: kv.modRevision });
          return;
        }
        case 'removed':
          s.removed.add(name);
          return;
        case 'alive':
          s.alive.set(name, kv.modRevision);
          return;
        case 'epochs': {
          if (!/^\d{1,20}$/.test(text)) throw new Error('bad epoch');
          s.epochs.set(shard(name), { epoch: BigInt(text), mod: kv.modRevision });
          return;
        }
        case 'leases':
          s.leases.set(shard(name), { ...decodeLease(text), mod: kv.modRevision, etcdLease: kv.lease });
          return;
        case 'view': {
          const j = JSON.parse(text) as { version?: unknown; digest?: unknown };
          if (!Number.isSafeInteger(j.version) || typeof j.digest !== 'string') throw new Error('bad view');
          s.view = { version: j.version as number, digest: j.digest, mod: kv.modRevision };
          return;
        }
        default:
          return; // meta, and keys of later versions
      }
    } catch (e) {
      if (e instanceof PlexusError) throw e;
      throw this.stateError(`${kv.key} holds a value of a bad shape`, kind, e);
    }
  }

  /**
   * The view of snapshot `s` at `now`; a content not yet published under the `view` key (or
   * this object's first view) gets the next version by compare-and-set. Undefined when
   * another authority published first (the caller reads again).
   */
  private async publish(s: Snapshot, now: number): Promise<View | undefined> {
    const members: MemberState[] = [...s.members]
      .map(([id, m]) => ({
        id,
        address: m.address,
        status: (m.leaving ? 'leaving' : (this.detector.status(id) ?? 'alive')) as MemberStatus,
      }))
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const leases: LeaseEntry[] = [...s.leases]
      .filter(([shard, l]) => this.expiry(shard, l, now) > now)
      .map(([shard, l]) => ({ shard, owner: l.owner, epoch: l.epoch }))
      .sort((a, b) => a.shard - b.shard);
    const digest = JSON.stringify({
      members: members.map((m) => [m.id, m.address, m.status]),
      leases: leases.map((l) => [l.shard, l.owner, l.epoch.toString()]),
    });
    let version = s.view?.version ?? 0;
    if (!this.published || s.view?.digest !== digest) {
      version++;
      const out = await this.cas(
        [this.modIs('view', s.view?.mod ?? 0n)],
        [{ put: `${this.prefix}view`, value: JSON.stringify({ version, digest }) }],
      );
      if (out.kind !== 'ok') return undefined;
      this.published = true;
    }
    return Object.freeze({ version, members, leases });
  }

  private async cas(compare: EtcdCompare[], ops: EtcdOp[]): Promise<Outcome> {
    const r = await this.gateway.txn(compare, ops);
    return r.succeeded ? { kind: 'ok', changed: true } : { kind: 'conflict' };
  }

  private modIs(rel: string, mod: bigint): EtcdCompare {
    return { key: `${this.prefix}${rel}`, target: 'MOD', modRevision: mod };
  }

  // ---- the member cache's watch ----

  private watchFrom(revision: bigint): void {
    if (this.closed) return;
    let next = revision;
    this.watcher = this.gateway.watch(
      this.prefix,
      revision,
      (rev, events) => {
        next = rev + 1n;
        for (const ev of events) {
          if (ev.kv.modRevision <= this.cacheRevision) continue;
          const rest = ev.kv.key.slice(this.prefix.length);
          if (rest.startsWith('members/')) {
            const id = rest.slice('members/'.length);
            if (ev.type === 'PUT') this.joined.add(id);
            else this.joined.delete(id);
          } else if (rest.startsWith('removed/') && ev.type === 'PUT') {
            this.removed.add(rest.slice('removed/'.length));
          }
        }
        if (rev > this.cacheRevision) this.cacheRevision = rev;
      },
      () => {
        if (this.closed) return;
        // Watch again from the next revision (etcd replays what was missed) after a pause.
        // (From the cache's revision when a read is newer: etcd may have compacted older ones.)
        const from = next > this.cacheRevision ? next : this.cacheRevision + 1n;
        this.watchTimer = this.timers.setTimeout(() => this.watchFrom(from), WATCH_AGAIN_MS);
      },
    );
  }

  // ---- refusals ----

  private shardOk(shard: number): boolean {
    return Number.isInteger(shard) && shard >= 0 && shard < this.meta.shardCount;
  }

  private badShard(shard: number): Outcome {
    return this.fail(ClusterCode.BAD_SHARD, `shard ${shard} is outside 0..${this.meta.shardCount - 1}`, { shard });
  }

  private fail(code: ClusterCodeValue, message: string, details: Record<string, unknown> = {}): Outcome {
    return { kind: 'fail', code, message, details };
  }

  private stateError(message: string, reason: string, cause?: unknown): PlexusError {
    return clusterError(
      ClusterCode.AUTHORITY_STATE,
      `etcd under ${this.prefix}: ${message}; the etcd authority does not act on state it cannot read`,
      { prefix: this.prefix, reason },
      cause,
    );
  }
}

/** A lease value's JSON (epochs as decimal strings). */
export function encodeLease(v: LeaseValue): string {
  return JSON.stringify({ owner: v.owner, epoch: v.epoch.toString(), expiresAt: v.expiresAt, holder: v.holder });
}

export function decodeLease(text: string): LeaseValue {
  const j = JSON.parse(text) as Record<string, unknown>;
  if (
    typeof j.owner !== 'string' ||
    typeof j.epoch !== 'string' ||
    !/^\d{1,20}$/.test(j.epoch) ||
    typeof j.expiresAt !== 'number' ||
    !Number.isFinite(j.expiresAt) ||
    typeof j.holder !== 'string'
  ) {
    throw new Error('bad lease');
  }
  return { owner: j.owner, epoch: BigInt(j.epoch), expiresAt: j.expiresAt, holder: j.holder };
}
