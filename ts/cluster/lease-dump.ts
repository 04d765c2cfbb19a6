/**
 * `plexus cluster leases --dump FILE`: the leases of a cluster, running or stopped, as one
 * JSON document (for operators and scripts; `plexus cluster reshard` reads a static cluster's
 * authority.state itself). Where they come from depends on the membership:
 * - `etcd`: the `leases/<shard>` and `epochs/<shard>` keys under the cluster's prefix, read
 *   directly (running or stopped alike). A lease's `expiresAt` is on the clock of the authority
 *   object that wrote it (`holder`); a lease whose holder stopped renewing is dropped by etcd
 *   once its etcd lease (`gcTtlSeconds`) runs out, so a stopped cluster's leases fade.
 * - `kubernetes`: the `<prefix>-shard-<n>` Lease objects in the namespace (running or stopped
 *   alike): a held one's owner (holderIdentity), epoch (`plexus.dev/epoch`), renewTime and
 *   leaseDurationSeconds (on its writer's wall clock: for people, the authority never compares
 *   them), and every shard's last granted epoch, leased or not.
 * - `static`, running: the view of the authority node over the cluster wire (with this node's
 *   certificate): owners and epochs, no expiry (the view carries none).
 * - `static`, stopped: the in-memory authority's leases ended with its process; the dump says
 *   so (`leases: []`) and gives what its `authority.state` keeps: the epoch ceiling (every new
 *   grant is above it) and, with per-node journals, the member whose store holds each shard.
 *   The state file is read from the authority node's data directory in the layout
 *   `plexus cluster init` writes (`nodes/<authority>/data`, beside this node's).
 * - `gossip`, running: the view of the gossip leader (the members the config lists are asked
 *   in order of id, following the leader a member that does not lead names), `source: 'leader'`:
 *   owners and epochs, no expiry.
 * - `gossip`, stopped (no member answers): the leases ended with the processes and no leader
 *   kept them on disk. The dump gives what offline tools need to stay safe, `source:
 *   'journals'`, `leases: []`: per shard the highest fencing epoch among the records of the
 *   shared store's shard journals (`epochs`; a shard without records is absent), and the
 *   greatest of them (`epochCeiling`). Any owner that appended wrote at or below it; a tool that
 *   writes a shard's journal offline uses an epoch above its entry, so the journal fences every
 *   earlier owner. The store is read from the config's `sharedDir` (or the store host's data
 *   directory in the layout `plexus cluster init` writes).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { shardDir } from '../runtime/log-journal.js';
import { openLog } from '../storage/index.js';
import { loadAuthorityState } from './authority-state.js';
import { decodeReply, encodeRequest } from './codec.js';
import { writeFileDurably } from './durable-file.js';
import { ClusterCode, clusterError } from './errors.js';
import { readShard } from './history.js';
import type { AuthorityReply } from './lease-authority.js';
import type { ClusterNodeConfig } from './node.js';

export interface DumpedLease {
  readonly shard: number;
  readonly owner: string;
  /** The fencing epoch (decimal). */
  readonly epoch: string;
  /** etcd: when the lease ends on its writer's clock (ms); static: null (the view carries no expiry). */
  readonly expiresAt: number | null;
  /** etcd: the authority object that last wrote the lease. */
  readonly holder?: string;
  /** kubernetes: the Lease's renewTime (RFC 3339, its writer's wall clock) and stated length. */
  readonly renewTime?: string;
  readonly leaseDurationSeconds?: number;
}

export interface LeaseDump {
  readonly cluster: string;
  readonly shardCount: number;
  readonly membership: 'static' | 'etcd' | 'kubernetes' | 'gossip';
  /**
   * `etcd`, `kubernetes`, `authority` (a running static cluster), `authority.state` (a stopped
   * one), `leader` (a running gossip cluster) or `journals` (a stopped one).
   */
  readonly source: 'etcd' | 'kubernetes' | 'authority' | 'authority.state' | 'leader' | 'journals';
  /** When the dump was taken (ISO 8601, this machine's wall clock). */
  readonly takenAt: string;
  readonly leases: readonly DumpedLease[];
  /**
   * etcd, kubernetes: every shard's last granted epoch (decimal), leased or not. gossip,
   * stopped: every shard's highest epoch in its journal (shards with records only).
   */
  readonly epochs?: Readonly<Record<string, string>>;
  /**
   * static, stopped: every epoch granted so far is at or below this (decimal). gossip, stopped:
   * every epoch any journal record carries is at or below this.
   */
  readonly epochCeiling?: string;
  /** gossip, running: the member that leads. */
  readonly leader?: string;
  /** gossip, stopped: the shared store that was read. */
  readonly store?: string;
  /** static, stopped, per-node journals: the member whose store holds each shard's journal. */
  readonly journalHomes?: Readonly<Record<string, string>>;
  /** The view version (static, running). */
  readonly viewVersion?: number;
}

/** Sends one request to a member over the cluster wire (the static authority, for its view). */
export type ViewCaller = (authority: string, body: Uint8Array) => Promise<Uint8Array>;

/** Reads the leases of the cluster `cfg` belongs to (see the module comment for the sources). */
export async function readLeases(cfg: ClusterNodeConfig, callAuthority: () => Promise<ViewCaller>): Promise<LeaseDump> {
  const base = { cluster: cfg.meta.id, shardCount: cfg.meta.shardCount, takenAt: new Date().toISOString() };
  const m = cfg.membership;
  if (m?.kind === 'etcd') {
    const { EtcdGateway } = await import('./etcd-gateway.js');
    const { decodeLease } = await import('./etcd-authority.js');
    const prefix = m.prefix ?? `/plexus/${cfg.meta.id}/`;
    const gw = new EtcdGateway({
      endpoints: m.endpoints,
      ...(m.timeoutMs === undefined ? {} : { timeoutMs: m.timeoutMs }),
    });
    const r = await gw.range(prefix, true);
    const leases: DumpedLease[] = [];
    const epochs: Record<string, string> = {};
    for (const kv of r.kvs) {
      const rest = kv.key.slice(prefix.length);
      const text = kv.value.toString('utf8');
      try {
        if (rest.startsWith('leases/')) {
          const l = decodeLease(text);
          leases.push({
            shard: Number(rest.slice('leases/'.length)),
            owner: l.owner,
            epoch: l.epoch.toString(),
            expiresAt: l.expiresAt,
            holder: l.holder,
          });
        } else if (rest.startsWith('epochs/')) {
          if (!/^\d{1,20}$/.test(text)) throw new Error('bad epoch');
          epochs[rest.slice('epochs/'.length)] = text;
        }
      } catch (e) {
        throw clusterError(
          ClusterCode.AUTHORITY_STATE,
          `etcd key ${kv.key} holds a value of a bad shape: the dump does not guess`,
          { prefix, key: kv.key, reason: 'shape' },
          e,
        );
      }
    }
    leases.sort((a, b) => a.shard - b.shard);
    return { ...base, membership: 'etcd', source: 'etcd', leases, epochs };
  }
  if (m?.kind === 'kubernetes') {
    const { kubeLeaseApi, readShard, shardObjectPrefix } = await import('./kube-authority.js');
    const prefix = shardObjectPrefix(m.prefix ?? `plexus-${cfg.meta.id}`);
    const api = await kubeLeaseApi(m.kubeconfig, m.timeoutMs ?? 5000);
    const leases: DumpedLease[] = [];
    const epochs: Record<string, string> = {};
    for (const o of await api.list(m.namespace)) {
      if (!o.metadata.name.startsWith(prefix)) continue;
      const r = readShard(o, o.metadata.name.slice(prefix.length), cfg.meta.shardCount);
      if (typeof r === 'string') {
        throw clusterError(
          ClusterCode.AUTHORITY_STATE,
          `Lease ${o.metadata.name} in namespace ${m.namespace} ${r}: the dump does not guess`,
          { namespace: m.namespace, name: o.metadata.name, reason: 'shape' },
        );
      }
      epochs[String(r.shard)] = r.epoch.toString();
      if (r.owner === undefined) continue;
      leases.push({
        shard: r.shard,
        owner: r.owner,
        epoch: r.epoch.toString(),
        expiresAt: null,
        ...(o.spec?.renewTime === undefined ? {} : { renewTime: o.spec.renewTime }),
        leaseDurationSeconds: r.durationMs / 1000,
      });
    }
    leases.sort((a, b) => a.shard - b.shard);
    return { ...base, membership: 'kubernetes', source: 'kubernetes', leases, epochs };
  }
  if (m?.kind === 'gossip') return readGossipLeases(cfg, base, callAuthority);
  const authority = cfg.authority as string;
  let reachError: unknown;
  try {
    const call = await callAuthority();
    const r = decodeReply(await call(authority, encodeRequest({ type: 'view' })));
    return {
      ...base,
      membership: 'static',
      source: 'authority',
      viewVersion: r.view.version,
      leases: r.view.leases.map((l) => ({
        shard: l.shard,
        owner: l.owner,
        epoch: l.epoch.toString(),
        expiresAt: null,
      })),
    };
  } catch (e) {
    reachError = e;
  }
  const stateDir = cfg.self === authority ? cfg.dataDir : join(cfg.dataDir, '..', '..', authority, 'data');
  if (!existsSync(stateDir)) {
    throw clusterError(
      ClusterCode.UNAVAILABLE,
      `the authority ${authority} cannot be reached (${(reachError as Error).message}) and its data directory ${stateDir} is not here: no leases to dump`,
      { authority, stateDir },
      reachError,
    );
  }
  const state = await loadAuthorityState(stateDir, cfg.meta);
  return {
    ...base,
    membership: 'static',
    source: 'authority.state',
    leases: [],
    epochCeiling: (state?.epochCeiling ?? 0n).toString(),
    journalHomes: Object.fromEntries([...(state?.homes ?? new Map())].map(([s, n]) => [String(s), n])),
  };
}

/**
 * The view of a gossip cluster from its leader: asks the members the config lists in order of
 * id (the leader is the lowest live one), following the `details.leader` a member that does
 * not lead answers with. PLX_CLUSTER_UNAVAILABLE naming each member's answer when none leads.
 */
export async function askGossipLeader(
  cfg: ClusterNodeConfig,
  call: ViewCaller,
): Promise<{ readonly leader: string; readonly reply: AuthorityReply }> {
  const queue = cfg.members.map((m) => m.id).sort();
  const asked = new Set<string>();
  const problems: string[] = [];
  while (queue.length > 0) {
    const id = queue.shift() as string;
    if (asked.has(id)) continue;
    asked.add(id);
    try {
      const reply = decodeReply(await call(id, encodeRequest({ type: 'view' })));
      if (reply.ok) return { leader: id, reply };
      const leader = reply.details.leader;
      if (typeof leader === 'string' && !asked.has(leader)) queue.unshift(leader);
      problems.push(`${id}: ${reply.message}`);
    } catch (e) {
      problems.push(`${id}: ${(e as Error).message}`);
    }
  }
  throw clusterError(ClusterCode.UNAVAILABLE, `no member leads: ${problems.join('; ')}`, { asked: [...asked] });
}

/** Where the shared store of a gossip cluster's node config is (its `sharedDir`, or the store host's). */
function sharedStoreDir(cfg: ClusterNodeConfig): string {
  if (cfg.sharedDir !== undefined) return cfg.sharedDir;
  const host = cfg.storeHost ?? cfg.self;
  return host === cfg.self ? join(cfg.dataDir, 'shared') : join(cfg.dataDir, '..', '..', host, 'data', 'shared');
}

async function readGossipLeases(
  cfg: ClusterNodeConfig,
  base: { readonly cluster: string; readonly shardCount: number; readonly takenAt: string },
  callAuthority: () => Promise<ViewCaller>,
): Promise<LeaseDump> {
  let reachError: unknown;
  try {
    const { leader, reply } = await askGossipLeader(cfg, await callAuthority());
    return {
      ...base,
      membership: 'gossip',
      source: 'leader',
      leader,
      viewVersion: reply.view.version,
      leases: reply.view.leases.map((l) => ({
        shard: l.shard,
        owner: l.owner,
        epoch: l.epoch.toString(),
        expiresAt: null,
      })),
    };
  } catch (e) {
    reachError = e;
  }
  const store = sharedStoreDir(cfg);
  if (!existsSync(store)) {
    throw clusterError(
      ClusterCode.UNAVAILABLE,
      `no gossip member answers (${(reachError as Error).message}) and the shared store ${store} is not here: no leases to dump`,
      { membership: 'gossip', store },
      reachError,
    );
  }
  const epochs: Record<string, string> = {};
  let ceiling = 0n;
  for (let s = 0; s < cfg.meta.shardCount; s++) {
    const d = shardDir(store, s);
    if (!existsSync(d)) continue;
    const log = await openLog(d);
    let top = 0n;
    try {
      for (const r of (await readShard(s, log)).records) if (r.epoch > top) top = r.epoch;
    } finally {
      await log.close();
    }
    if (top === 0n) continue;
    epochs[String(s)] = top.toString();
    if (top > ceiling) ceiling = top;
  }
  return {
    ...base,
    membership: 'gossip',
    source: 'journals',
    store,
    leases: [],
    epochs,
    epochCeiling: ceiling.toString(),
  };
}

/** Writes `dump` to `file` durably (fsync, rename, fsync of the directory). */
export async function writeLeaseDump(file: string, dump: LeaseDump): Promise<void> {
  await writeFileDurably(file, `${JSON.stringify(dump, null, 2)}\n`);
}
