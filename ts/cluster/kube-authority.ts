/**
 * KubeAuthority: the LeaseAuthority seam (ts/cluster/lease-authority.ts) on Kubernetes
 * `coordination.k8s.io/v1` Lease objects in one namespace, through `@kubernetes/client-node`'s
 * CoordinationV1Api (an optional dependency, imported only when this authority is opened).
 * Every plexus process may open one on the same namespace and prefix; the API server's
 * optimistic concurrency orders them. The request rounds, views, member health and refusals
 * are StoreAuthority's (ts/cluster/store-authority.ts); this file keeps the objects.
 *
 * Objects (docs/cluster.md, "The Kubernetes authority"), none ever deleted:
 * - `<prefix>-cluster`: the ClusterMeta (annotation `plexus.dev/meta`, JSON), written by the
 *   first authority and checked by every later one (PLX_CLUSTER_META_MISMATCH naming the
 *   field); the last published view (`plexus.dev/view-version`, `plexus.dev/view-digest`, a
 *   SHA-256 of its content);
 * - `<prefix>-member-<id>`: member `id` (holderIdentity `id`, `plexus.dev/address`,
 *   `plexus.dev/state` `member`, `leaving`, `left` or `removed`), its renewTime rewritten by
 *   each heartbeat: every authority object counts a new resourceVersion as a sign of life;
 * - `<prefix>-shard-<n>`: shard `n`'s lease: holderIdentity the owner (absent when free),
 *   leaseDurationSeconds, acquireTime and renewTime (MicroTime, RFC 3339 with 6 fractional
 *   digits), leaseTransitions raised on each change of holder, and the fencing epoch in
 *   `plexus.dev/epoch` (decimal): raised by one on every new grant, kept on renewal and on
 *   release, never lowered, so no two grants share an epoch across restarts of every process.
 *
 * Every write is a replace carrying the resourceVersion it read (or a create of a missing
 * object); a 409 (Conflict, AlreadyExists) means another writer came first: read and decide
 * again. Expiry by observation: a lease this object wrote ends at its own recorded expiry; a
 * lease another writer holds is free only once this object has seen it unchanged (the same
 * resourceVersion) for its whole duration on its own monotonic clock. renewTime is written for
 * people and tools; it is never compared with a clock, so no two machines' clocks need agree.
 */
import { createHash } from 'node:crypto';
import type * as KubeClient from '@kubernetes/client-node';
import { type Clock, monotonicClock, systemClock } from '../core/clock.js';
import type { PlexusError } from '../core/errors.js';
import { ClusterCode, clusterError } from './errors.js';
import { type ClusterMeta, checkJoinMeta, clusterMeta } from './meta.js';
import {
  CONFLICT,
  type Outcome,
  StoreAuthority,
  type StoreAuthorityOptions,
  type StoredLease,
  type StoredMember,
  type StoreSnapshot,
} from './store-authority.js';

/** The annotations plexus keeps on its Lease objects. */
export const KUBE_ANNOTATIONS = Object.freeze({
  epoch: 'plexus.dev/epoch',
  meta: 'plexus.dev/meta',
  viewVersion: 'plexus.dev/view-version',
  viewDigest: 'plexus.dev/view-digest',
  address: 'plexus.dev/address',
  state: 'plexus.dev/state',
  /** The authority object that last wrote the object (for people reading it). */
  writer: 'plexus.dev/writer',
});

/** A Lease object as plexus reads and writes it (the JSON of `coordination.k8s.io/v1` Lease). */
export interface LeaseObject {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

/** The four Lease calls the authority makes (CoordinationV1Api's, or any with the same answers). */
export interface LeaseApi {
  list(namespace: string): Promise<LeaseObject[]>;
  /** The created object; `conflict` when one of that name exists. */
  create(namespace: string, obj: LeaseObject): Promise<LeaseObject | 'conflict'>;
  /** The replaced object; `conflict` on a stale resourceVersion or a missing object. */
  replace(namespace: string, obj: LeaseObject): Promise<LeaseObject | 'conflict'>;
}

export interface KubeAuthorityOptions extends Omit<StoreAuthorityOptions, 'clock'> {
  /** The namespace of the Lease objects. */
  readonly namespace: string;
  /** The objects' name prefix (default `plexus-<meta.id>`): a DNS label of at most 40 characters. */
  readonly prefix?: string;
  /** A kubeconfig file; default $KUBECONFIG, else ~/.kube/config, else the in-cluster service account. */
  readonly kubeconfig?: string;
  /** One API call's limit (ms, default 5000). */
  readonly timeoutMs?: number;
  /** The Lease calls (default: CoordinationV1Api of `@kubernetes/client-node` from `kubeconfig`). */
  readonly api?: LeaseApi;
  /** The authority's time (ms) that leases end on; default the process's monotonic clock. */
  readonly clock?: Clock;
  /** The wall clock of acquireTime and renewTime (ms since 1970; default Date.now). */
  readonly wallClock?: Clock;
}

type MemberState = 'member' | 'leaving' | 'left' | 'removed';

interface KubeLease extends StoredLease<string> {
  /** The lease length the object states (ms). */
  readonly durationMs: number;
  /** The object as read (a renewal replaces it). */
  readonly obj: LeaseObject;
}

interface ShardObject {
  readonly obj: LeaseObject;
  readonly epoch: bigint;
}

interface Snapshot extends StoreSnapshot<string, KubeLease> {
  /** Every shard object, held or free. */
  readonly shards: Map<number, ShardObject>;
  /** Every member object, whatever its state. */
  readonly memberObjects: Map<string, LeaseObject>;
  readonly cluster: LeaseObject;
}

const PREFIX = /^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$/;
const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DECIMAL = /^\d{1,20}$/;

export class KubeAuthority extends StoreAuthority<string, KubeLease, Snapshot> {
  readonly namespace: string;
  readonly prefix: string;
  protected readonly storeName = 'Kubernetes';
  private readonly api: LeaseApi;
  private readonly wall: Clock;
  /** Leases this object wrote: shard -> the resourceVersion its write got and when it ends. */
  private readonly written = new Map<number, { rev: string; expiresAt: number }>();
  private joined = new Set<string>();
  private removed = new Set<string>();

  private constructor(opts: KubeAuthorityOptions, api: LeaseApi) {
    super({ ...opts, clock: opts.clock ?? monotonicClock });
    if (!NAMESPACE.test(opts.namespace)) {
      throw clusterError(
        ClusterCode.BAD_CONFIG,
        `namespace ${JSON.stringify(opts.namespace)} is not a Kubernetes namespace name (a DNS label)`,
        { field: 'namespace' },
      );
    }
    this.namespace = opts.namespace;
    this.prefix = opts.prefix ?? `plexus-${this.meta.id}`;
    if (!PREFIX.test(this.prefix)) {
      throw clusterError(
        ClusterCode.BAD_CONFIG,
        `the Lease name prefix ${JSON.stringify(this.prefix)} must be a DNS label of at most 40 characters`,
        { field: 'prefix' },
      );
    }
    this.api = api;
    this.wall = opts.wallClock ?? systemClock;
  }

  /**
   * Opens the authority: creates `<prefix>-cluster` with the cluster meta if there is none, else
   * checks ours against it (PLX_CLUSTER_META_MISMATCH naming the field), and reads the members
   * and leases (leases of other writers are held for one lease length from now).
   */
  static async open(opts: KubeAuthorityOptions): Promise<KubeAuthority> {
    const api = opts.api ?? (await kubeLeaseApi(opts.kubeconfig, opts.timeoutMs ?? 5000));
    const a = new KubeAuthority(opts, api);
    const metaText = JSON.stringify({
      id: a.meta.id,
      shardCount: a.meta.shardCount,
      hashVersion: a.meta.hashVersion,
      replicationFactor: a.meta.replicationFactor,
    });
    const name = `${a.prefix}-cluster`;
    const made = await api.create(a.namespace, a.object(name, { [KUBE_ANNOTATIONS.meta]: metaText }, {}));
    if (made === 'conflict') {
      const found = (await api.list(a.namespace)).find((o) => o.metadata.name === name);
      let stored: ClusterMeta;
      try {
        stored = clusterMeta(JSON.parse(found?.metadata.annotations?.[KUBE_ANNOTATIONS.meta] ?? '') as ClusterMeta);
      } catch (e) {
        throw a.stateError(`${name} does not hold a cluster meta`, 'meta', e);
      }
      checkJoinMeta(stored, a.meta, 'this authority');
    }
    a.started(await a.load());
    return a;
  }

  isMember(node: string): boolean {
    return this.joined.has(node);
  }

  protected isRemoved(node: string): boolean {
    return this.removed.has(node);
  }

  // ---- writes ----

  protected writeJoin(node: string, address: string, s: Snapshot): Promise<Outcome> {
    return this.putMember(node, 'member', address, s);
  }

  protected writeRemove(node: string, s: Snapshot): Promise<Outcome> {
    const address = s.memberObjects.get(node)?.metadata.annotations?.[KUBE_ANNOTATIONS.address] ?? '';
    return this.putMember(node, 'removed', address, s);
  }

  protected writeDrain(node: string, member: StoredMember<string>, s: Snapshot): Promise<Outcome> {
    return this.putMember(node, 'leaving', member.address, s);
  }

  protected async writeAlive(node: string, s: Snapshot): Promise<Outcome> {
    const old = s.memberObjects.get(node) as LeaseObject;
    const r = await this.api.replace(this.namespace, {
      ...old,
      spec: { ...old.spec, renewTime: formatMicroTime(this.wall.now()) },
    });
    return r === 'conflict' ? CONFLICT : { kind: 'ok', changed: false };
  }

  protected async writeLeave(
    node: string,
    member: StoredMember<string>,
    owned: [number, KubeLease][],
    s: Snapshot,
  ): Promise<Outcome> {
    // No transaction spans objects: the leases are freed first, each by compare-and-set; a
    // lost comparison reads again, and the next round finds only what is still held.
    for (const [shard] of owned) {
      const out = await this.free(shard, s);
      if (out.kind !== 'ok') return out;
    }
    return this.putMember(node, 'left', member.address, s);
  }

  protected writeRevoke(shard: number, _l: KubeLease, s: Snapshot): Promise<Outcome> {
    return this.free(shard, s);
  }

  protected writeRelease(shard: number, _l: KubeLease, s: Snapshot): Promise<Outcome> {
    return this.free(shard, s);
  }

  /** A new grant: the epoch annotation raised by one, the holder set, in one replace (or a create). */
  protected async writeGrant(shard: number, owner: string, s: Snapshot, now: number): Promise<Outcome> {
    const old = s.shards.get(shard);
    const epoch = (old?.epoch ?? 0n) + 1n;
    const at = formatMicroTime(this.wall.now());
    const before = old?.obj.spec ?? {};
    const spec = {
      holderIdentity: owner,
      leaseDurationSeconds: this.durationSeconds(),
      acquireTime: at,
      renewTime: at,
      leaseTransitions: (before.leaseTransitions ?? 0) + (old !== undefined && before.holderIdentity !== owner ? 1 : 0),
    };
    const obj = this.object(
      `${this.prefix}-shard-${shard}`,
      { ...old?.obj.metadata.annotations, [KUBE_ANNOTATIONS.epoch]: epoch.toString() },
      spec,
      old?.obj,
    );
    const r =
      old === undefined ? await this.api.create(this.namespace, obj) : await this.api.replace(this.namespace, obj);
    if (r === 'conflict') return CONFLICT;
    this.record(shard, r, now);
    return { kind: 'ok', lease: { shard, epoch }, changed: true };
  }

  /** Renews a live lease: renewTime moved, the epoch kept, by compare-and-set. */
  protected async writeRenew(shard: number, l: KubeLease, now: number): Promise<boolean | 'conflict'> {
    const r = await this.api.replace(this.namespace, {
      ...l.obj,
      metadata: { ...l.obj.metadata, annotations: this.annotate(l.obj.metadata.annotations) },
      spec: {
        ...l.obj.spec,
        leaseDurationSeconds: this.durationSeconds(),
        renewTime: formatMicroTime(this.wall.now()),
      },
    });
    if (r === 'conflict') return 'conflict';
    this.record(shard, r, now);
    return true;
  }

  protected async writeView(version: number, digest: string, s: Snapshot): Promise<boolean> {
    const c = s.cluster;
    const r = await this.api.replace(this.namespace, {
      ...c,
      metadata: {
        ...c.metadata,
        annotations: {
          ...c.metadata.annotations,
          [KUBE_ANNOTATIONS.viewVersion]: String(version),
          [KUBE_ANNOTATIONS.viewDigest]: digest,
        },
      },
    });
    return r !== 'conflict';
  }

  protected ownExpiry(shard: number, l: KubeLease): number | undefined {
    const w = this.written.get(shard);
    return w !== undefined && w.rev === l.mod ? w.expiresAt : undefined;
  }

  protected override observedLength(l: KubeLease): number {
    return Math.max(this.lease.ttlMs, l.durationMs);
  }

  /** Views are stored as a SHA-256 of their content (an annotation stays small). */
  protected override digestKey(digest: string): string {
    return createHash('sha256').update(digest).digest('hex');
  }

  // ---- objects ----

  private durationSeconds(): number {
    return Math.max(1, Math.ceil(this.lease.ttlMs / 1000));
  }

  private annotate(a: Record<string, string> | undefined): Record<string, string> {
    return { ...a, [KUBE_ANNOTATIONS.writer]: this.incarnation };
  }

  private object(
    name: string,
    annotations: Record<string, string>,
    spec: NonNullable<LeaseObject['spec']>,
    /** The object as read, whose other metadata (labels, uid, its resourceVersion) the write keeps. */
    old?: LeaseObject,
  ): LeaseObject {
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { ...old?.metadata, name, annotations: this.annotate(annotations) },
      spec,
    };
  }

  private record(shard: number, written: LeaseObject, now: number): void {
    const rev = written.metadata.resourceVersion;
    if (rev === undefined)
      throw this.stateError(`the API server answered a write of shard ${shard} without a resourceVersion`, 'write');
    this.written.set(shard, { rev, expiresAt: now + this.lease.ttlMs });
  }

  /** Shard `shard` freed: no holder, its epoch kept. */
  private async free(shard: number, s: Snapshot): Promise<Outcome> {
    const old = s.shards.get(shard) as ShardObject;
    const { holderIdentity: _h, ...spec } = old.obj.spec ?? {};
    const r = await this.api.replace(this.namespace, {
      ...old.obj,
      metadata: { ...old.obj.metadata, annotations: this.annotate(old.obj.metadata.annotations) },
      spec: { ...spec, renewTime: formatMicroTime(this.wall.now()) },
    });
    if (r === 'conflict') return CONFLICT;
    this.written.delete(shard);
    return { kind: 'ok', changed: true };
  }

  /** Writes member `node`'s object in `state` (a create when there is none). */
  private async putMember(node: string, state: MemberState, address: string, s: Snapshot): Promise<Outcome> {
    const old = s.memberObjects.get(node);
    const at = formatMicroTime(this.wall.now());
    const obj = this.object(
      `${this.prefix}-member-${node}`,
      { ...old?.metadata.annotations, [KUBE_ANNOTATIONS.address]: address, [KUBE_ANNOTATIONS.state]: state },
      {
        ...old?.spec,
        holderIdentity: node,
        leaseDurationSeconds: this.durationSeconds(),
        renewTime: at,
        ...(old?.spec?.acquireTime === undefined ? { acquireTime: at } : {}),
      },
      old,
    );
    const r =
      old === undefined ? await this.api.create(this.namespace, obj) : await this.api.replace(this.namespace, obj);
    return r === 'conflict' ? CONFLICT : { kind: 'ok', changed: true };
  }

  // ---- reading ----

  protected async load(): Promise<Snapshot> {
    const objects = await this.api.list(this.namespace);
    let cluster: LeaseObject | undefined;
    const s: Omit<Snapshot, 'cluster'> = {
      members: new Map(),
      removed: new Set(),
      leases: new Map(),
      view: undefined,
      alive: new Map(),
      shards: new Map(),
      memberObjects: new Map(),
    };
    const shardPrefix = shardObjectPrefix(this.prefix);
    const memberPrefix = `${this.prefix}-member-`;
    for (const o of objects) {
      const name = o.metadata?.name;
      if (typeof name !== 'string' || !name.startsWith(`${this.prefix}-`)) continue;
      const rev = o.metadata.resourceVersion;
      if (typeof rev !== 'string' || rev === '')
        throw this.stateError(`${name} has no resourceVersion`, 'resourceVersion');
      const notes = o.metadata.annotations ?? {};
      if (name === `${this.prefix}-cluster`) {
        cluster = o;
        const version = notes[KUBE_ANNOTATIONS.viewVersion];
        const digest = notes[KUBE_ANNOTATIONS.viewDigest];
        if (version !== undefined || digest !== undefined) {
          if (version === undefined || !DECIMAL.test(version) || !Number.isSafeInteger(Number(version)) || !digest) {
            throw this.stateError(`${name} holds a view of a bad shape`, 'view');
          }
          s.view = { version: Number(version), digest, mod: rev };
        }
      } else if (name.startsWith(shardPrefix)) {
        const r = readShard(o, name.slice(shardPrefix.length), this.meta.shardCount);
        if (typeof r === 'string') throw this.stateError(`${name} ${r}`, 'shard');
        s.shards.set(r.shard, { obj: o, epoch: r.epoch });
        if (r.owner !== undefined) {
          s.leases.set(r.shard, { owner: r.owner, epoch: r.epoch, mod: rev, durationMs: r.durationMs, obj: o });
        }
      } else if (name.startsWith(memberPrefix)) {
        const id = name.slice(memberPrefix.length);
        const state = notes[KUBE_ANNOTATIONS.state];
        const address = notes[KUBE_ANNOTATIONS.address];
        if (!['member', 'leaving', 'left', 'removed'].includes(state as string) || typeof address !== 'string') {
          throw this.stateError(`${name} holds a member of a bad shape`, 'member');
        }
        s.memberObjects.set(id, o);
        s.alive.set(id, rev);
        if (state === 'removed') s.removed.add(id);
        else if (state !== 'left') s.members.set(id, { address, leaving: state === 'leaving', mod: rev });
      }
    }
    if (cluster === undefined) throw this.stateError(`${this.prefix}-cluster is missing`, 'meta');
    this.joined = new Set(s.members.keys());
    this.removed = s.removed;
    return { ...s, cluster };
  }

  private stateError(message: string, reason: string, cause?: unknown): PlexusError {
    return clusterError(
      ClusterCode.AUTHORITY_STATE,
      `Kubernetes namespace ${this.namespace}, Leases ${this.prefix}-*: ${message}; the Kubernetes authority does not act on state it cannot read`,
      { namespace: this.namespace, prefix: this.prefix, reason },
      cause,
    );
  }
}

/** The name prefix of the shard Lease objects under `prefix`. */
export function shardObjectPrefix(prefix: string): string {
  return `${prefix}-shard-`;
}

/**
 * Shard Lease `o` (named `<prefix>-shard-<n>`, `n` given): its shard, epoch and, when held,
 * owner and stated duration; or what is wrong with it (`names no shard`, `holds no epoch`,
 * `holds no leaseDurationSeconds`).
 */
export function readShard(
  o: LeaseObject,
  n: string,
  shardCount: number,
): { shard: number; epoch: bigint; owner?: string; durationMs: number } | string {
  const shard = Number(n);
  if (!/^\d{1,7}$/.test(n) || shard >= shardCount) return 'names no shard';
  const e = o.metadata.annotations?.[KUBE_ANNOTATIONS.epoch];
  if (e === undefined || !DECIMAL.test(e)) return 'holds no epoch';
  const owner = o.spec?.holderIdentity;
  if (!owner) return { shard, epoch: BigInt(e), durationMs: 0 };
  const secs = o.spec?.leaseDurationSeconds;
  if (!Number.isSafeInteger(secs) || (secs as number) < 1) return 'holds no leaseDurationSeconds';
  return { shard, epoch: BigInt(e), owner, durationMs: (secs as number) * 1000 };
}

// ---- MicroTime ----

/**
 * `ms` (milliseconds since 1970, fractions kept to the microsecond) as a Kubernetes MicroTime:
 * RFC 3339 in UTC with exactly six fractional digits, `2026-01-02T03:04:05.678901Z`.
 */
export function formatMicroTime(ms: number): string {
  if (!Number.isFinite(ms)) throw new RangeError(`not a time: ${ms}`);
  const us = Math.round(ms * 1000);
  const whole = Math.floor(us / 1_000_000);
  const frac = us - whole * 1_000_000;
  const secs = new Date(whole * 1000).toISOString().slice(0, 19);
  return `${secs}.${String(frac).padStart(6, '0')}Z`;
}

const RFC3339 = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/i;

/** An RFC 3339 time (any number of fractional digits, any offset) as milliseconds since 1970, to the microsecond. */
export function parseMicroTime(text: string): number {
  const m = RFC3339.exec(text);
  const base = m ? Date.parse(`${m[1]}${(m[3] as string).toUpperCase()}`) : Number.NaN;
  if (!m || Number.isNaN(base)) throw new RangeError(`not an RFC 3339 time: ${JSON.stringify(text)}`);
  const us = Number((m[2] ?? '').padEnd(6, '0').slice(0, 6));
  return base + us / 1000;
}

// ---- the client ----

/** CoordinationV1Api from a kubeconfig (or the default one); the client module is imported here only. */
export async function kubeLeaseApi(kubeconfig: string | undefined, timeoutMs: number): Promise<LeaseApi> {
  let k8s: typeof KubeClient;
  try {
    k8s = await import('@kubernetes/client-node');
  } catch (e) {
    throw clusterError(
      ClusterCode.UNAVAILABLE,
      'membership kubernetes needs the optional dependency @kubernetes/client-node: install it next to plexus',
      { dependency: '@kubernetes/client-node' },
      e,
    );
  }
  const kc = new k8s.KubeConfig();
  try {
    if (kubeconfig !== undefined) kc.loadFromFile(kubeconfig);
    else kc.loadFromDefault();
  } catch (e) {
    throw clusterError(
      ClusterCode.BAD_CONFIG,
      `cannot load the kubeconfig ${kubeconfig ?? '(default: $KUBECONFIG, ~/.kube/config or the in-cluster service account)'}: ${(e as Error).message}`,
      { field: 'kubeconfig' },
      e,
    );
  }
  const api = kc.makeApiClient(k8s.CoordinationV1Api);
  /**
   * One call, 409 (and `also`) answered `conflict`. A call past `timeoutMs` is given up; should
   * a write land after that, its object simply has a resourceVersion this authority did not
   * record: it is treated as another writer's (held until seen unchanged for a lease length).
   */
  const call = async <T>(what: string, run: () => Promise<T>, also?: number): Promise<T | 'conflict'> => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([run(), timeout]);
    } catch (e) {
      const code = (e as { code?: unknown }).code;
      if (code === 409 || code === also) return 'conflict';
      if (typeof code === 'number') {
        const body = (e as { body?: unknown }).body;
        const message = typeof body === 'string' ? body : JSON.stringify(body ?? null);
        throw clusterError(
          code >= 500 || code === 429 ? ClusterCode.UNAVAILABLE : ClusterCode.KUBE_RESPONSE,
          `the Kubernetes API server answered ${what} with status ${code}: ${message.slice(0, 300)}`,
          { what, status: code },
          e,
        );
      }
      throw clusterError(
        ClusterCode.UNAVAILABLE,
        `the Kubernetes API server did not answer ${what}: ${(e as Error).message}`,
        { what },
        e,
      );
    } finally {
      clearTimeout(timer);
    }
  };
  const plain = (o: unknown) => JSON.parse(JSON.stringify(o)) as LeaseObject;
  // List items come without kind and apiVersion; every write names them.
  const typed = (o: LeaseObject) =>
    ({ ...o, apiVersion: 'coordination.k8s.io/v1', kind: 'Lease' }) as unknown as KubeClient.V1Lease;
  const check = (o: unknown, what: string): LeaseObject => {
    const obj = plain(o);
    if (typeof obj?.metadata?.name !== 'string') {
      throw clusterError(ClusterCode.KUBE_RESPONSE, `the Kubernetes API server answered ${what} with no Lease`, {
        what,
      });
    }
    return obj;
  };
  return {
    async list(namespace) {
      const r = await call(`list leases in ${namespace}`, () => api.listNamespacedLease({ namespace }));
      if (r === 'conflict' || !Array.isArray(r.items)) {
        throw clusterError(ClusterCode.KUBE_RESPONSE, 'the Kubernetes API server answered a list with no items', {
          what: 'list',
        });
      }
      return r.items.map((o) => check(o, 'list'));
    },
    async create(namespace, obj) {
      const r = await call(`create lease ${obj.metadata.name}`, () =>
        api.createNamespacedLease({ namespace, body: typed(obj) }),
      );
      return r === 'conflict' ? r : check(r, 'create');
    },
    async replace(namespace, obj) {
      const name = obj.metadata.name;
      const r = await call(
        `replace lease ${name}`,
        () => api.replaceNamespacedLease({ name, namespace, body: typed(obj) }),
        404, // gone since it was read: read again
      );
      return r === 'conflict' ? r : check(r, 'replace');
    },
  };
}
