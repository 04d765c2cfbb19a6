/**
 * EtcdAuthority: the LeaseAuthority seam (ts/cluster/lease-authority.ts) on a real etcd v3
 * cluster, through its JSON gateway (EtcdGateway, ts/cluster/etcd-gateway.ts). Every plexus
 * process may open one on the same etcd and key prefix; etcd's transactions order them. The
 * request rounds, views, member health and refusals are StoreAuthority's
 * (ts/cluster/store-authority.ts); this file keeps the keys and the transactions.
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
import { type ClockTimers, monotonicClock } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import { ClusterCode, clusterError } from './errors.js';
import { type EtcdCompare, EtcdGateway, type EtcdGatewayOptions, type EtcdKv, type EtcdOp } from './etcd-gateway.js';
import { type ClusterMeta, checkJoinMeta, clusterMeta } from './meta.js';
import {
  OK_CHANGED,
  type Outcome,
  StoreAuthority,
  type StoreAuthorityOptions,
  type StoredMember,
  type StoreSnapshot,
} from './store-authority.js';

export interface EtcdAuthorityOptions extends Omit<StoreAuthorityOptions, 'clock'> {
  /** The gateway client, or its options (endpoints, timeouts, retries). */
  readonly etcd: EtcdGateway | EtcdGatewayOptions;
  /** Where the cluster's keys live (default `/plexus/<meta.id>/`); ends with `/`. */
  readonly prefix?: string;
  /** The authority's time (ms) that leases end on; default the process's monotonic clock. */
  readonly clock?: StoreAuthorityOptions['clock'];
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

type EtcdLease = LeaseValue & { mod: bigint; etcdLease: bigint };

interface Snapshot extends StoreSnapshot<bigint, EtcdLease> {
  revision: bigint;
  epochs: Map<number, { epoch: bigint; mod: bigint }>;
}

/** Pause before watching again after the watch stream ended (an etcd member died, say). */
const WATCH_AGAIN_MS = 200;

export class EtcdAuthority extends StoreAuthority<bigint, EtcdLease, Snapshot> {
  readonly prefix: string;
  readonly gateway: EtcdGateway;
  protected readonly storeName = 'etcd';
  private readonly timers: ClockTimers;
  private readonly gcTtl: number;
  /** Joined and removed members as last read or watched (`isMember`, `isAdmitted`). */
  private joined = new Set<string>();
  private removed = new Set<string>();
  /** The etcd revision `joined` and `removed` are current at (a watch event at or below it is old news). */
  private cacheRevision = 0n;
  private watcher: { close(): void } | undefined;
  private watchTimer: unknown;

  private constructor(opts: EtcdAuthorityOptions) {
    super({ ...opts, clock: opts.clock ?? monotonicClock });
    this.prefix = opts.prefix ?? `/plexus/${this.meta.id}/`;
    if (!this.prefix.endsWith('/')) {
      throw clusterError(ClusterCode.BAD_CONFIG, `the etcd key prefix ${JSON.stringify(this.prefix)} must end with /`, {
        field: 'prefix',
      });
    }
    this.gateway = opts.etcd instanceof EtcdGateway ? opts.etcd : new EtcdGateway(opts.etcd);
    this.timers = opts.timers ?? monotonicClock;
    this.gcTtl = opts.gcTtlSeconds ?? Math.max(10, Math.ceil((3 * this.lease.ttlMs) / 1000));
    if (!Number.isInteger(this.gcTtl) || this.gcTtl * 1000 < this.lease.ttlMs * 2) {
      throw clusterError(
        ClusterCode.BAD_CONFIG,
        `gcTtlSeconds ${this.gcTtl} must be a whole number of seconds of at least two lease lengths (${(2 * this.lease.ttlMs) / 1000} s)`,
        { field: 'gcTtlSeconds' },
      );
    }
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
    a.started(snap);
    if (opts.watch !== false) a.watchFrom(snap.revision + 1n);
    return a;
  }

  isMember(node: string): boolean {
    return this.joined.has(node);
  }

  protected isRemoved(node: string): boolean {
    return this.removed.has(node);
  }

  override close(): void {
    super.close();
    this.watcher?.close();
    this.watcher = undefined;
    if (this.watchTimer !== undefined) this.timers.clearTimeout(this.watchTimer);
  }

  // ---- writes ----

  protected async writeJoin(node: string, address: string): Promise<Outcome> {
    return this.cas(
      [
        { key: `${this.prefix}members/${node}`, target: 'CREATE', createRevision: 0n },
        { key: `${this.prefix}removed/${node}`, target: 'CREATE', createRevision: 0n },
      ],
      [{ put: `${this.prefix}members/${node}`, value: JSON.stringify({ address, leaving: false }) }],
    );
  }

  protected async writeRemove(node: string): Promise<Outcome> {
    const p = this.prefix;
    await this.gateway.txn([], [{ put: `${p}removed/${node}`, value: '' }, { del: `${p}members/${node}` }]);
    return OK_CHANGED;
  }

  protected writeRevoke(shard: number, l: EtcdLease): Promise<Outcome> {
    return this.cas([this.modIs(`leases/${shard}`, l.mod)], [{ del: `${this.prefix}leases/${shard}` }]);
  }

  protected async writeAlive(node: string): Promise<Outcome> {
    // A sign of life every authority object reads (not a comparison: a plain put).
    await this.gateway.txn([], [{ put: `${this.prefix}alive/${node}`, value: this.incarnation }]);
    return OK_CHANGED;
  }

  protected writeLeave(node: string, member: StoredMember<bigint>, owned: [number, EtcdLease][]): Promise<Outcome> {
    const cmp: EtcdCompare[] = [this.modIs(`members/${node}`, member.mod)];
    const ops: EtcdOp[] = [{ del: `${this.prefix}members/${node}` }];
    for (const [shard, l] of owned) {
      cmp.push(this.modIs(`leases/${shard}`, l.mod));
      ops.push({ del: `${this.prefix}leases/${shard}` });
    }
    return this.cas(cmp, ops);
  }

  protected writeDrain(node: string, member: StoredMember<bigint>): Promise<Outcome> {
    return this.cas(
      [this.modIs(`members/${node}`, member.mod)],
      [{ put: `${this.prefix}members/${node}`, value: JSON.stringify({ address: member.address, leaving: true }) }],
    );
  }

  protected async writeRelease(shard: number, l: EtcdLease): Promise<Outcome> {
    const out = await this.cas([this.modIs(`leases/${shard}`, l.mod)], [{ del: `${this.prefix}leases/${shard}` }]);
    if (out.kind === 'ok') await this.gateway.leaseRevoke(l.etcdLease).catch(() => undefined);
    return out;
  }

  /** A new grant: the epoch key raised by one and the lease written, in one compare-and-set. */
  protected async writeGrant(shard: number, owner: string, s: Snapshot, now: number): Promise<Outcome> {
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
  protected async writeRenew(shard: number, l: EtcdLease, now: number): Promise<boolean | 'conflict'> {
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

  protected async writeView(version: number, digest: string, s: Snapshot): Promise<boolean> {
    const out = await this.cas(
      [this.modIs('view', s.view?.mod ?? 0n)],
      [{ put: `${this.prefix}view`, value: JSON.stringify({ version, digest }) }],
    );
    return out.kind === 'ok';
  }

  protected ownExpiry(_shard: number, l: EtcdLease): number | undefined {
    return l.holder === this.incarnation ? l.expiresAt : undefined;
  }

  // ---- reading ----

  protected async load(): Promise<Snapshot> {
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
