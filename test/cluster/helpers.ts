/** Builds a static-membership cluster in one process over a chosen transport to the authority. */
import { decodeReply, encodeRequest } from '../../ts/cluster/codec.js';
import type { DetectorConfig, LeaseConfig } from '../../ts/cluster/config.js';
import { AuthorityHost } from '../../ts/cluster/host.js';
import type { ClusterMeta } from '../../ts/cluster/meta.js';
import { type AuthorityCall, StaticMembership } from '../../ts/cluster/static.js';
import type { MemberInfo } from '../../ts/cluster/types.js';
import { MemoryNetwork, MemoryWire } from '../../ts/net/memory-wire.js';
import type { Wire } from '../../ts/net/types.js';
import { http2Net } from '../net/helpers.js';

export const META: ClusterMeta = { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 };

export interface LocalCluster {
  readonly host: AuthorityHost;
  readonly members: Map<string, StaticMembership>;
  readonly wires: Map<string, Wire>;
  /** A membership for `node` that is not started, with its own meta. */
  make(node: string, meta?: ClusterMeta): StaticMembership;
  close(): Promise<void>;
}

export type Transport = 'direct' | 'memory' | 'http2';

export async function localCluster(opts: {
  nodes: readonly string[];
  transport: Transport;
  lease?: Partial<LeaseConfig>;
  detector?: Partial<DetectorConfig>;
  autoAssign?: boolean;
  meta?: ClusterMeta;
  /** The rate of real time at which a node's lease clock runs (default 1: the monotonic clock). */
  leaseClockRate?: (node: string) => number;
}): Promise<LocalCluster> {
  const meta = opts.meta ?? META;
  const lease = opts.lease ?? { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 };
  const infos: MemberInfo[] = opts.nodes.map((id) => ({ id, address: '' }));
  const authorityNode = opts.nodes[0] as string;
  const host = new AuthorityHost({
    meta,
    members: infos,
    lease,
    detector: opts.detector ?? { suspectAfterMs: 300, failedAfterMs: 1000 },
    autoAssign: opts.autoAssign,
    tickEveryMs: 20,
  });
  const wires = new Map<string, Wire>();
  let closeNet = async () => {};
  if (opts.transport === 'memory') {
    const network = new MemoryNetwork();
    for (const id of opts.nodes) {
      const w = new MemoryWire({ self: id, network, isMember: (p) => opts.nodes.includes(p) });
      await w.listen();
      wires.set(id, w);
    }
    closeNet = async () => {
      for (const w of wires.values()) await w.close();
    };
  } else if (opts.transport === 'http2') {
    const net = await http2Net(opts.nodes, { deliveryDeadlineMs: 3000 });
    for (const [id, w] of net.wires) wires.set(id, w);
    closeNet = () => net.close();
  }
  wires.get(authorityNode)?.onCall(host.handle);
  const callFor = (node: string): AuthorityCall => {
    const w = wires.get(node);
    if (!w || node === authorityNode) return host.call;
    return async (req) => decodeReply(await w.call(authorityNode, encodeRequest(req)));
  };
  const all: StaticMembership[] = [];
  const make = (node: string, m: ClusterMeta = meta) => {
    const rate = opts.leaseClockRate?.(node) ?? 1;
    const s = new StaticMembership({
      ...(rate === 1 ? {} : { clock: { now: () => performance.now() * rate } }),
      config: { meta: m, self: { id: node, address: `${node}:0` }, members: infos, authority: authorityNode },
      call: callFor(opts.nodes.includes(node) ? node : authorityNode),
      lease,
      heartbeatEveryMs: 50,
    });
    all.push(s);
    return s;
  };
  const members = new Map(opts.nodes.map((n) => [n, make(n)]));
  return {
    host,
    members,
    wires,
    make,
    close: async () => {
      for (const m of all) await m.close();
      host.close();
      await closeNet();
    },
  };
}
