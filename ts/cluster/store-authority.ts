/**
 * StoreAuthority: what every LeaseAuthority on an external store ordered by compare-and-set
 * shares (EtcdAuthority on etcd keys, KubeAuthority on Kubernetes Lease objects). Every plexus
 * process may open one on the same store; the store's comparisons order them.
 *
 * A request is answered in rounds: read the whole cluster state (`load`, a snapshot with the
 * revision of every record), decide, and write by compare-and-set on the revisions read; a
 * lost comparison (`conflict`: another writer came first) reads and decides again, up to
 * MAX_ROUNDS times. Then the view is published: a new content (or this object's first view)
 * raises the stored view version by one, by compare-and-set, so views carry strictly
 * increasing versions across every authority object.
 *
 * What a subclass gives: `load`, the writes (`write*`, each one compare-and-set on what it
 * read), and `ownExpiry` (the recorded end of a lease this object wrote).
 *
 * Time: a lease ends on the authority's own clock (`clock`). A lease this object wrote ends at
 * its recorded expiry; a lease another authority object wrote (another process, or a run
 * before a restart) ends one lease length after this object first saw it at its current
 * revision: its holder got it before that, so by then its own clock has run out too. Wall
 * clocks are never compared. Member health (alive, suspect, failed) is judged by this
 * object's failure detector from the requests it answers and from each new revision of a
 * member's sign-of-life record (written by every heartbeat, whichever process answered it),
 * so that every authority object judges a member alike. A failed member's leases free only
 * when they expire.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import type { PlexusError } from '../core/errors.js';
import { type DetectorConfig, type LeaseConfig, leaseConfig } from './config.js';
import { FailureDetector } from './detector.js';
import { ClusterCode, type ClusterCodeValue, clusterError } from './errors.js';
import type { AuthorityReply, AuthorityRequest, LeaseAuthority } from './lease-authority.js';
import { type ClusterMeta, checkJoinMeta, clusterMeta } from './meta.js';
import type { LeaseEntry, MemberInfo, MemberState, MemberStatus, View } from './types.js';

/** A revision of one stored record (etcd's mod_revision, a Kubernetes resourceVersion). */
export type Revision = bigint | string;

export interface StoredMember<R extends Revision> {
  readonly address: string;
  readonly leaving: boolean;
  readonly mod: R;
}

export interface StoredLease<R extends Revision> {
  readonly owner: string;
  readonly epoch: bigint;
  readonly mod: R;
}

/** The cluster state as one read found it. */
export interface StoreSnapshot<R extends Revision, L extends StoredLease<R>> {
  readonly members: Map<string, StoredMember<R>>;
  readonly removed: Set<string>;
  readonly leases: Map<number, L>;
  /** The last published view (`digest` as the store keeps it: see `digestKey`). */
  view: { readonly version: number; readonly digest: string; readonly mod: R } | undefined;
  /** Each member's sign-of-life record: member -> revision. */
  readonly alive: Map<string, R>;
}

/** A request outcome before the view is attached; `conflict`: another writer won a comparison, read again. */
export type Outcome =
  | { kind: 'ok'; lease?: { shard: number; epoch: bigint }; renewed?: number[]; changed: boolean }
  | { kind: 'fail'; code: ClusterCodeValue; message: string; details: Record<string, unknown> }
  | { kind: 'conflict' };

export const OK_CHANGED: Outcome = Object.freeze({ kind: 'ok', changed: true }) as Outcome;
export const CONFLICT: Outcome = Object.freeze({ kind: 'conflict' }) as Outcome;

/** Reads and writes before a request gives up on contention (each a full read, decide, compare-and-set). */
export const MAX_ROUNDS = 32;

export interface StoreAuthorityOptions {
  readonly meta: ClusterMeta;
  /** The members the configuration lists; only they may join. */
  readonly members: readonly MemberInfo[];
  readonly lease?: Partial<LeaseConfig>;
  readonly detector?: Partial<DetectorConfig>;
  /** The authority's time (ms) that leases end on. */
  readonly clock: Clock;
}

export abstract class StoreAuthority<R extends Revision, L extends StoredLease<R>, S extends StoreSnapshot<R, L>>
  implements LeaseAuthority
{
  readonly meta: ClusterMeta;
  readonly lease: LeaseConfig;
  /** This object's name in the records it writes. */
  readonly incarnation = randomBytes(8).toString('hex');
  protected readonly clock: Clock;
  protected readonly allowed = new Map<string, MemberInfo>();
  protected readonly detector: FailureDetector;
  /** `<shard>@<revision>` of another object's lease -> when this object first saw it. */
  private readonly firstSeen = new Map<string, number>();
  /** The sign-of-life revision last counted for each member. */
  private readonly aliveSeen = new Map<string, R>();
  private published = false;
  protected closed = false;
  private queue: Promise<unknown> = Promise.resolve();

  /** The store's name in messages (`etcd`, `Kubernetes`). */
  protected abstract readonly storeName: string;

  protected constructor(opts: StoreAuthorityOptions) {
    this.meta = clusterMeta(opts.meta);
    this.lease = leaseConfig(opts.lease);
    this.clock = opts.clock;
    for (const m of opts.members) this.allowed.set(m.id, m);
    this.detector = new FailureDetector(opts.detector);
  }

  // ---- what a store gives ----

  /** Reads the whole cluster state (refusing state it cannot read: PLX_CLUSTER_AUTHORITY_STATE). */
  protected abstract load(): Promise<S>;
  /** Admits `node` (not yet a member, not removed) at `address`. */
  protected abstract writeJoin(node: string, address: string, s: S): Promise<Outcome>;
  /** Marks `node` removed for good and no longer a member. */
  protected abstract writeRemove(node: string, s: S): Promise<Outcome>;
  /** Frees lease `l` (revoked by an operator). */
  protected abstract writeRevoke(shard: number, l: L, s: S): Promise<Outcome>;
  /** Writes `node`'s sign of life (a new revision every authority object reads). */
  protected abstract writeAlive(node: string, s: S): Promise<Outcome>;
  /** `node` leaves: no longer a member, its leases (`owned`) freed. */
  protected abstract writeLeave(node: string, member: StoredMember<R>, owned: [number, L][], s: S): Promise<Outcome>;
  /** `node` is leaving: it takes no new leases. */
  protected abstract writeDrain(node: string, member: StoredMember<R>, s: S): Promise<Outcome>;
  /** A new grant of `shard` to `owner`, its epoch raised by one above every earlier grant. */
  protected abstract writeGrant(shard: number, owner: string, s: S, now: number): Promise<Outcome>;
  /** Renews a live lease keeping its epoch: true, false (it is gone), or a lost comparison. */
  protected abstract writeRenew(shard: number, l: L, now: number): Promise<boolean | 'conflict'>;
  /** Frees lease `l`, released by its owner. */
  protected abstract writeRelease(shard: number, l: L, s: S): Promise<Outcome>;
  /** Stores view `version` with `digest` (as `digestKey` gives it), by compare-and-set on `s.view`. */
  protected abstract writeView(version: number, digest: string, s: S): Promise<boolean>;
  /** When a lease this object wrote ends (its own recorded expiry); undefined for another object's. */
  protected abstract ownExpiry(shard: number, l: L): number | undefined;
  /** The form a view digest is stored and compared in (default itself). */
  protected digestKey(digest: string): string {
    return digest;
  }

  // ---- the seam ----

  readonly call = (req: AuthorityRequest): Promise<AuthorityReply> => {
    const run = this.queue.then(() => this.answer(req));
    this.queue = run.catch(() => undefined);
    return run;
  };

  abstract isMember(node: string): boolean;

  isAdmitted(node: string): boolean {
    return this.allowed.has(node) && !this.isRemoved(node);
  }

  /** Whether `node` was removed, as last read. */
  protected abstract isRemoved(node: string): boolean;

  close(): void {
    this.closed = true;
  }

  /** After the first read: every member heard now, every lease another object wrote held one lease length from now. */
  protected started(s: S): void {
    const now = this.clock.now();
    for (const id of s.members.keys()) this.detector.heard(id, now);
    this.noteAlive(s, now);
    this.detector.advance();
    for (const [shard, l] of s.leases) this.expiry(shard, l, now);
  }

  // ---- requests ----

  private async answer(req: AuthorityRequest): Promise<AuthorityReply> {
    if (this.closed) throw clusterError(ClusterCode.UNAVAILABLE, `the ${this.storeName} authority is closed`);
    const now = this.clock.now();
    this.detector.tick(now);
    let out: Outcome = CONFLICT;
    let snap: S | undefined;
    for (let round = 0; round < MAX_ROUNDS && out.kind === 'conflict'; round++) {
      snap = await this.readState();
      this.noteAlive(snap, now);
      out = await this.apply(req, snap, now);
    }
    // The request is applied (or refused) once; only publishing its view may take more rounds.
    for (let round = 0; round < MAX_ROUNDS && out.kind !== 'conflict' && snap !== undefined; round++) {
      if (round > 0 || (out.kind === 'ok' && out.changed)) snap = await this.readState();
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
      `the ${this.storeName} authority lost ${MAX_ROUNDS} compare-and-set rounds in a row on ${req.type}: too much contention`,
      { request: req.type },
    );
  }

  private async apply(req: AuthorityRequest, s: S, now: number): Promise<Outcome> {
    switch (req.type) {
      case 'view':
        return { kind: 'ok', changed: false };
      case 'join':
        return this.join(req.node, req.address, req.meta, s, now);
      case 'remove':
        this.detector.forget(req.node);
        return this.writeRemove(req.node, s);
      case 'revoke': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        const l = s.leases.get(req.shard);
        if (l === undefined) return { kind: 'ok', changed: false };
        return this.writeRevoke(req.shard, l, s);
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
        const alive = await this.writeAlive(req.node, s);
        if (alive.kind !== 'ok') return alive;
        const renewed: number[] = [];
        for (const { shard, epoch } of req.held ?? []) {
          const l = s.leases.get(shard);
          if (!l || l.owner !== req.node || l.epoch !== epoch || this.expiry(shard, l, now) <= now) continue;
          const r = await this.writeRenew(shard, l, now);
          if (r === 'conflict') return CONFLICT;
          if (r) renewed.push(shard);
        }
        return { kind: 'ok', renewed, changed: renewed.length > 0 };
      }
      case 'leave': {
        this.detector.forget(req.node);
        return this.writeLeave(
          req.node,
          member,
          [...s.leases].filter(([, l]) => l.owner === req.node),
          s,
        );
      }
      case 'drain':
        if (member.leaving) return { kind: 'ok', changed: false };
        return this.writeDrain(req.node, member, s);
      case 'grant': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        if (member.leaving) return this.fail(ClusterCode.LEAVING, `${req.node} is leaving: it takes no new leases`);
        const l = s.leases.get(req.shard);
        if (l !== undefined) {
          const ends = this.expiry(req.shard, l, now);
          if (ends > now) {
            const foreign = this.ownExpiry(req.shard, l) === undefined;
            if (l.owner === req.node && !foreign) {
              const r = await this.writeRenew(req.shard, l, now);
              if (r === 'conflict') return CONFLICT;
              if (r) return { kind: 'ok', lease: { shard: req.shard, epoch: l.epoch }, changed: true };
            } else {
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
        return this.writeGrant(req.shard, req.node, s, now);
      }
      case 'renew': {
        if (!this.shardOk(req.shard)) return this.badShard(req.shard);
        const l = s.leases.get(req.shard);
        const live = l !== undefined && this.expiry(req.shard, l, now) > now;
        if (l && live && l.owner === req.node && l.epoch === req.epoch) {
          const r = await this.writeRenew(req.shard, l, now);
          if (r === 'conflict') return CONFLICT;
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
        return this.writeRelease(req.shard, l, s);
      }
    }
  }

  private join(node: string, address: string, meta: ClusterMeta, s: S, now: number): Promise<Outcome> | Outcome {
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
    return this.writeJoin(node, address || info.address, s);
  }

  // ---- reading, publishing ----

  private async readState(): Promise<S> {
    const s = await this.load();
    // Forget first sightings of lease revisions that are no longer current.
    const current = new Set([...s.leases].map(([shard, l]) => `${shard}@${l.mod}`));
    for (const k of this.firstSeen.keys()) if (!current.has(k)) this.firstSeen.delete(k);
    return s;
  }

  /** Counts each new revision of a member's sign of life as a sign of life at `now`. */
  private noteAlive(s: S, now: number): void {
    for (const [id, mod] of s.alive) {
      if (this.aliveSeen.get(id) === mod) continue;
      const first = !this.aliveSeen.has(id);
      this.aliveSeen.set(id, mod);
      // A record first read here may be old (a process that died long ago): only members are heard.
      if (!first || s.members.has(id)) this.detector.heard(id, now);
    }
  }

  /** When a lease ends on this object's clock. */
  protected expiry(shard: number, l: L, now: number): number {
    const own = this.ownExpiry(shard, l);
    if (own !== undefined) return own;
    const key = `${shard}@${l.mod}`;
    let seen = this.firstSeen.get(key);
    if (seen === undefined) {
      seen = now;
      this.firstSeen.set(key, seen);
    }
    return seen + this.observedLength(l);
  }

  /** How long a lease another object wrote must be seen unchanged before it is free (default one lease length). */
  protected observedLength(_l: L): number {
    return this.lease.ttlMs;
  }

  /**
   * The view of snapshot `s` at `now`; a content not yet published (or this object's first
   * view) gets the next version by compare-and-set. Undefined when another authority
   * published first (the caller reads again).
   */
  private async publish(s: S, now: number): Promise<View | undefined> {
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
    const digest = this.digestKey(
      JSON.stringify({
        members: members.map((m) => [m.id, m.address, m.status]),
        leases: leases.map((l) => [l.shard, l.owner, l.epoch.toString()]),
      }),
    );
    let version = s.view?.version ?? 0;
    if (!this.published || s.view?.digest !== digest) {
      version++;
      if (!(await this.writeView(version, digest, s))) return undefined;
      this.published = true;
    }
    return Object.freeze({ version, members, leases });
  }

  // ---- refusals ----

  protected shardOk(shard: number): boolean {
    return Number.isInteger(shard) && shard >= 0 && shard < this.meta.shardCount;
  }

  private badShard(shard: number): Outcome {
    return this.fail(ClusterCode.BAD_SHARD, `shard ${shard} is outside 0..${this.meta.shardCount - 1}`, { shard });
  }

  protected fail(code: ClusterCodeValue, message: string, details: Record<string, unknown> = {}): Outcome {
    return { kind: 'fail', code, message, details };
  }
}
