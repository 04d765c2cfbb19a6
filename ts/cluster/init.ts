/**
 * Creates a cluster directory: `cluster.meta`, the cluster CA (`ca.pem`, `ca-key.pem`), and
 * per node `nodes/<id>/` with its certificate, key and `node.json` config (members on
 * loopback ports from `basePort`, the first node hosting the lease authority and, with a
 * shared store, the shard stores in `<dir>/shared`).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createClusterCa, issueNodeCertificate } from '../net/ca.js';
import type { ClusterConfig, DetectorConfig, LeaseConfig } from './config.js';
import { ClusterCode, clusterError } from './errors.js';
import { clusterMeta, isDnsLabel, writeClusterMeta } from './meta.js';
import type { ClusterNodeConfig } from './node.js';

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
  await mkdir(dir, { recursive: true });
  await writeClusterMeta(dir, meta);
  const ca = await createClusterCa(meta.id);
  await writeFile(join(dir, 'ca.pem'), ca.cert);
  await writeFile(join(dir, 'ca-key.pem'), ca.key, { mode: 0o600 });
  const host = o.host ?? '127.0.0.1';
  const members = o.nodes.map((id, i) => ({ id, address: `${host}:${o.ports?.[i] ?? (o.basePort ?? 7400) + i}` }));
  const out = new Map<string, string>();
  for (const id of o.nodes) {
    const nd = join(dir, 'nodes', id);
    await mkdir(nd, { recursive: true });
    const creds = await issueNodeCertificate(ca, id);
    await writeFile(join(nd, 'cert.pem'), creds.cert);
    await writeFile(join(nd, 'key.pem'), creds.key, { mode: 0o600 });
    const cfg: ClusterNodeConfig = {
      meta,
      self: id,
      members,
      authority: o.nodes[0] as string,
      dataDir: 'data',
      tls: { cert: 'cert.pem', key: 'key.pem', ca: '../../ca.pem' },
      journal: o.journal ?? 'per-node',
      ...(o.journal === 'shared' ? { sharedDir: '../../shared', storeHost: o.nodes[0] as string } : {}),
      ...(o.cluster ? { cluster: o.cluster } : {}),
      ...(o.lease ? { lease: o.lease } : {}),
      ...(o.detector ? { detector: o.detector } : {}),
      ...(o.heartbeatEveryMs ? { heartbeatEveryMs: o.heartbeatEveryMs } : {}),
    };
    const file = join(nd, 'node.json');
    await writeFile(file, `${JSON.stringify(cfg, null, 2)}\n`);
    out.set(id, file);
  }
  return out;
}
