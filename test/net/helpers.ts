/** Shared test helpers: one cluster CA per test file, node credentials made once per node. */
import { type ClusterCa, createClusterCa, issueNodeCertificate, type NodeCredentials } from '../../ts/net/ca.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import type { WireTuning } from '../../ts/net/types.js';

const cas = new Map<string, Promise<ClusterCa>>();
const creds = new Map<string, Promise<NodeCredentials>>();

export function clusterCa(cluster = 'c1'): Promise<ClusterCa> {
  let p = cas.get(cluster);
  if (!p) {
    p = createClusterCa(cluster);
    cas.set(cluster, p);
  }
  return p;
}

export function nodeCreds(node: string, cluster = 'c1'): Promise<NodeCredentials> {
  const key = `${cluster}/${node}`;
  let p = creds.get(key);
  if (!p) {
    p = clusterCa(cluster).then((ca) => issueNodeCertificate(ca, node));
    creds.set(key, p);
  }
  return p;
}

export interface Http2Net {
  readonly wires: Map<string, Http2Wire>;
  readonly addresses: Map<string, string>;
  /** Per viewer: the nodes it does not count as members. */
  readonly excluded: Map<string, Set<string>>;
  close(): Promise<void>;
}

/** One listening Http2Wire per node of cluster `c1`, each admitting every node not excluded. */
export async function http2Net(
  nodes: readonly string[],
  tuning: WireTuning & { poolSize?: number; spinMs?: number } = {},
): Promise<Http2Net> {
  const wires = new Map<string, Http2Wire>();
  const addresses = new Map<string, string>();
  const excluded = new Map<string, Set<string>>();
  for (const n of nodes) {
    const c = await nodeCreds(n);
    excluded.set(n, new Set());
    const w = new Http2Wire({
      self: n,
      cluster: 'c1',
      tls: c,
      resolve: (peer) => addresses.get(peer),
      isMember: (peer) => nodes.includes(peer) && !excluded.get(n)?.has(peer),
      deliveryDeadlineMs: 1500,
      retryBackoffMs: 20,
      ...tuning,
    });
    addresses.set(n, await w.listen());
    wires.set(n, w);
  }
  return {
    wires,
    addresses,
    excluded,
    close: async () => {
      await Promise.all([...wires.values()].map((w) => w.close()));
    },
  };
}
