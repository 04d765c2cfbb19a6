/**
 * Creates a cluster directory: `cluster.meta`, the cluster CA (`ca.pem`, `ca-key.pem`), and
 * per node `nodes/<id>/` with its certificate, key and `node.json` config (members on
 * loopback ports from `basePort`, the first node hosting the lease authority and, with a
 * shared store, the shard stores in `<dir>/shared`). With `membership` `etcd` or `kubernetes`
 * no node hosts an authority (every node talks to etcd, or to the Kubernetes API server) and
 * the journal is shared (the first node hosts it); with `gossip` likewise (the live member
 * with the lowest id leads), its seeds every node unless given. A directory that already holds a
 * cluster is refused (PLX_CLUSTER_EXISTS) unless `force`: replacing the CA key would orphan
 * every certificate it signed. Every file is written durably (fsync, rename, fsync of the
 * directory).
 */
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { META_FILE } from '../codec/cluster-meta.js';
import { isDnsLabel } from '../core/names.js';
import { createClusterCa, issueNodeCertificate } from '../net/ca.js';
import type { ClusterConfig, DetectorConfig, LeaseConfig } from './config.js';
import { ensureDir, writeFileDurably } from './durable-file.js';
import { ClusterCode, clusterError } from './errors.js';
import { clusterMeta, writeClusterMeta } from './meta.js';
import type { ClusterNodeConfig } from './node.js';
import { gossipSeeds, type MembershipConfig } from './node-config.js';

export interface InitOptions {
  readonly dir: string;
  readonly id: string;
  readonly shards: number;
  readonly nodes: readonly string[];
  /** Loopback ports basePort, basePort+1, ... (default 7400), or explicit ports per node. */
  readonly basePort?: number;
  readonly ports?: readonly number[];
  readonly host?: string;
  readonly journal?: 'per-node' | 'shared';
  readonly replicationFactor?: number;
  readonly cluster?: Partial<ClusterConfig>;
  readonly lease?: Partial<LeaseConfig>;
  readonly detector?: Partial<DetectorConfig>;
  readonly heartbeatEveryMs?: number;
  /**
   * Where leases are granted (default static: the first node hosts the authority). With
   * gossip, `seeds` may be left out (every node is a seed).
   */
  readonly membership?:
    | MembershipConfig
    | { readonly kind: 'gossip'; readonly seeds?: readonly string[]; readonly gossip?: object };
  /** Replace the files of a cluster already in `dir` (its CA key, certificates, configs, cluster.meta). */
  readonly force?: boolean;
}

/** The files of `dir` that show a cluster is there already. */
export function existingClusterFiles(dir: string): string[] {
  return [META_FILE, 'ca.pem', 'ca-key.pem', 'nodes'].filter((f) => existsSync(join(dir, f)));
}

function checkPort(port: number, field: string): void {
  if (!Number.isInteger(port) || port < 1 || port > 65_535) {
    throw clusterError(ClusterCode.BAD_CONFIG, `${field} ${port} is not a port: a port is from 1 to 65535`, {
      field,
      port,
    });
  }
}

/** Writes the directory; returns the config file of each node, by id. */
export async function initCluster(o: InitOptions): Promise<Map<string, string>> {
  const dir = resolve(o.dir);
  const meta = clusterMeta({
    id: o.id,
    shardCount: o.shards,
    hashVersion: 1,
    replicationFactor: o.replicationFactor ?? 1,
  });
  if (o.nodes.length === 0 || new Set(o.nodes).size !== o.nodes.length || !o.nodes.every(isDnsLabel)) {
    throw clusterError(
      ClusterCode.BAD_CONFIG,
      'nodes must be distinct DNS labels (lower-case letters, digits, hyphens)',
      {
        field: 'nodes',
      },
    );
  }
  let ports: number[];
  if (o.ports !== undefined) {
    if (o.ports.length !== o.nodes.length) {
      throw clusterError(ClusterCode.BAD_CONFIG, `ports gives ${o.ports.length} ports for ${o.nodes.length} nodes`, {
        field: 'ports',
      });
    }
    for (const [i, p] of o.ports.entries()) checkPort(p, `ports[${i}]`);
    if (new Set(o.ports).size !== o.ports.length) {
      throw clusterError(ClusterCode.BAD_CONFIG, 'ports must be distinct', { field: 'ports' });
    }
    ports = [...o.ports];
  } else {
    const base = o.basePort ?? 7400;
    checkPort(base, 'basePort');
    const last = base + o.nodes.length - 1;
    if (last > 65_535) {
      throw clusterError(
        ClusterCode.BAD_CONFIG,
        `basePort ${base} with ${o.nodes.length} nodes runs to port ${last}, past 65535`,
        { field: 'basePort', port: base, last },
      );
    }
    ports = o.nodes.map((_, i) => base + i);
  }
  const membership = o.membership ?? { kind: 'static' as const };
  const kind = (membership as { kind: string }).kind;
  if (kind !== 'static' && kind !== 'etcd' && kind !== 'kubernetes' && kind !== 'gossip') {
    throw clusterError(
      ClusterCode.BAD_CONFIG,
      `membership is static, etcd, kubernetes or gossip, got ${JSON.stringify(kind)}`,
      { field: 'membership', membership: kind },
    );
  }
  const etcd = membership.kind === 'etcd' ? membership : undefined;
  if (etcd !== undefined && (etcd.endpoints === undefined || etcd.endpoints.length === 0)) {
    throw clusterError(ClusterCode.BAD_CONFIG, 'membership etcd needs at least one etcd endpoint', {
      field: 'membership.endpoints',
    });
  }
  const kube = membership.kind === 'kubernetes' ? membership : undefined;
  if (kube !== undefined && !kube.namespace) {
    throw clusterError(ClusterCode.BAD_CONFIG, 'membership kubernetes needs the namespace of its Lease objects', {
      field: 'membership.namespace',
    });
  }
  // An authority in every node (etcd, Kubernetes) records no journal homes: the journal is shared.
  const external = etcd ?? kube;
  if (external !== undefined && o.journal === 'per-node') {
    throw clusterError(
      ClusterCode.BAD_CONFIG,
      `membership ${external.kind} takes the shared journal: the ${external.kind} authority does not record which node holds a shard’s journal`,
      { field: 'journal' },
    );
  }
  const gossip = membership.kind === 'gossip' ? membership : undefined;
  if (gossip !== undefined && o.journal === 'per-node') {
    throw clusterError(
      ClusterCode.BAD_CONFIG,
      'membership gossip takes the shared journal: the gossip leader does not record which node holds a shard’s journal',
      { field: 'journal' },
    );
  }
  const elected = external ?? gossip;
  const journal = o.journal ?? (elected ? 'shared' : 'per-node');
  const found = existingClusterFiles(dir);
  if (found.length > 0 && o.force !== true) {
    throw clusterError(
      ClusterCode.EXISTS,
      `${dir} already holds a cluster (${found.join(', ')}); nothing was changed. Pass --force to replace its CA key, certificates, node configs and cluster.meta (the nodes' data directories are kept)`,
      { dir, found },
    );
  }
  await ensureDir(dir);
  if (o.force === true) await rm(join(dir, META_FILE), { force: true });
  await writeClusterMeta(dir, meta);
  const ca = await createClusterCa(meta.id);
  await writeFileDurably(join(dir, 'ca.pem'), ca.cert);
  await writeFileDurably(join(dir, 'ca-key.pem'), ca.key, 0o600);
  const host = o.host ?? '127.0.0.1';
  const members = o.nodes.map((id, i) => ({ id, address: `${host}:${ports[i]}` }));
  let written: MembershipConfig | undefined = external;
  if (gossip !== undefined) {
    const seeds = gossip.seeds !== undefined && gossip.seeds.length > 0 ? [...gossip.seeds] : [...o.nodes];
    try {
      gossipSeeds(seeds, members);
    } catch (e) {
      throw clusterError(ClusterCode.BAD_CONFIG, (e as Error).message.replace(/^node config node\.json: /, ''), {
        field: (e as { details: { field: string } }).details.field,
      });
    }
    written = { kind: 'gossip', seeds, ...(gossip.gossip ? { gossip: gossip.gossip } : {}) };
  }
  const out = new Map<string, string>();
  for (const id of o.nodes) {
    const nd = join(dir, 'nodes', id);
    await ensureDir(nd);
    const creds = await issueNodeCertificate(ca, id);
    await writeFileDurably(join(nd, 'cert.pem'), creds.cert);
    await writeFileDurably(join(nd, 'key.pem'), creds.key, 0o600);
    const cfg: ClusterNodeConfig = {
      meta,
      clusterMeta: `../../${META_FILE}`,
      self: id,
      members,
      ...(written ? {} : { authority: o.nodes[0] as string }),
      ...(written ? { membership: written } : {}),
      dataDir: 'data',
      tls: { cert: 'cert.pem', key: 'key.pem', ca: '../../ca.pem' },
      journal,
      ...(journal === 'shared' ? { sharedDir: '../../shared', storeHost: o.nodes[0] as string } : {}),
      ...(o.cluster ? { cluster: o.cluster } : {}),
      ...(o.lease ? { lease: o.lease } : {}),
      ...(o.detector ? { detector: o.detector } : {}),
      ...(o.heartbeatEveryMs ? { heartbeatEveryMs: o.heartbeatEveryMs } : {}),
    };
    const file = join(nd, 'node.json');
    await writeFileDurably(file, `${JSON.stringify(cfg, null, 2)}\n`);
    out.set(id, file);
  }
  return out;
}
