/** In-process actor clusters over MemoryWire for the cluster-runtime tests. */

import type { ClusterConfig } from '../../ts/cluster/config.js';
import { DeadLetters } from '../../ts/cluster/fencing.js';
import { readShard, type ShardHistory } from '../../ts/cluster/history.js';
import { AuthorityHost } from '../../ts/cluster/host.js';
import type { ClusterMeta } from '../../ts/cluster/meta.js';
import { assembleClusterNode, type ClusterNode, startClaiming } from '../../ts/cluster/node.js';
import { StaticMembership } from '../../ts/cluster/static.js';
import type { MemberInfo } from '../../ts/cluster/types.js';
import { MemoryNetwork, MemoryWire } from '../../ts/net/memory-wire.js';
import { MemoryLog, MemoryLogState } from '../../ts/storage/index.js';

export const ACTOR_META: ClusterMeta = { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 };

export interface MemoryActorCluster {
  readonly host: AuthorityHost;
  readonly network: MemoryNetwork;
  readonly nodes: Map<string, ClusterNode>;
  readonly memberships: Map<string, StaticMembership>;
  /** Shard states: one map for `shared`, one per node for `per-node`. */
  readonly stores: Map<string, Map<number, MemoryLogState>>;
  /** (shard/epoch) -> nodes that wrote a macrostep under it. */
  readonly writers: Map<string, Set<string>>;
  histories(): Promise<ShardHistory[]>;
  close(): Promise<void>;
}

export async function memoryActorCluster(opts: {
  nodes: readonly string[];
  layout?: 'shared' | 'per-node';
  config?: Partial<ClusterConfig>;
  autoAssign?: boolean;
  meta?: ClusterMeta;
}): Promise<MemoryActorCluster> {
  const meta = opts.meta ?? ACTOR_META;
  const layout = opts.layout ?? 'shared';
  const lease = { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 };
  const infos: MemberInfo[] = opts.nodes.map((id) => ({ id, address: `memory:${id}` }));
  const host = new AuthorityHost({
    meta,
    members: infos,
    lease,
    detector: { suspectAfterMs: 300, failedAfterMs: 1000 },
    autoAssign: false,
    journals: layout,
    tickEveryMs: 20,
  });
  const network = new MemoryNetwork();
  const nodes = new Map<string, ClusterNode>();
  const memberships = new Map<string, StaticMembership>();
  const stores = new Map<string, Map<number, MemoryLogState>>();
  const writers = new Map<string, Set<string>>();
  const shared = new Map<number, MemoryLogState>();
  const cfg = { deliveryDeadlineMs: 5000, retryBackoffMs: 20, ...(opts.config ?? {}) };
  for (const id of opts.nodes) {
    const wire = new MemoryWire({
      self: id,
      network,
      isMember: (p) => opts.nodes.includes(p),
      deliveryDeadlineMs: Math.min(cfg.deliveryDeadlineMs, 1000),
      retryBackoffMs: cfg.retryBackoffMs,
    });
    await wire.listen();
    const m = new StaticMembership({
      config: { meta, self: infos.find((x) => x.id === id) as MemberInfo, members: infos, authority: opts.nodes[0]! },
      call: host.call,
      lease,
      heartbeatEveryMs: 50,
    });
    memberships.set(id, m);
    const states = layout === 'shared' ? shared : new Map<number, MemoryLogState>();
    stores.set(layout === 'shared' ? 'shared' : id, states);
    const open = async (shard: number) => {
      let s = states.get(shard);
      if (s === undefined) {
        s = new MemoryLogState();
        states.set(shard, s);
      }
      return new MemoryLog(s);
    };
    let cn: ClusterNode | undefined;
    cn = assembleClusterNode({
      self: id,
      meta,
      membership: m,
      wire,
      layout,
      open,
      deadLetters: new DeadLetters(new MemoryLog()),
      config: cfg,
      runtime: { idleAfter: 0, snapshotEvery: 0 },
      onMacrostep: (iri) => {
        const p = cn?.placement;
        if (!p) return;
        const shard = p.shardOf(iri);
        const key = `${shard}/${p.heldEpoch(shard)}`;
        let set = writers.get(key);
        if (set === undefined) {
          set = new Set();
          writers.set(key, set);
        }
        set.add(id);
      },
      onStop: async () => {
        await m.close();
        await wire.close();
      },
    });
    nodes.set(id, cn);
  }
  for (const m of memberships.values()) await m.join();
  const stops: (() => void)[] = [];
  if (opts.autoAssign !== false) {
    for (const m of memberships.values()) stops.push(startClaiming(m, meta.shardCount, opts.nodes, { everyMs: 20 }));
  }
  return {
    host,
    network,
    nodes,
    memberships,
    stores,
    writers,
    async histories() {
      const out: ShardHistory[] = [];
      for (const states of stores.values()) {
        for (const [shard, s] of states) out.push(await readShard(shard, new MemoryLog(s)));
      }
      return out;
    },
    async close() {
      for (const s of stops) s();
      for (const n of nodes.values()) await n.stop();
      host.close();
    },
  };
}

/** An IRI with `prefix` whose shard is `shard` (of `shardCount`). */
export function iriInShard(prefix: string, shard: number, shardOfIri: (iri: string) => number, from = 0): string {
  for (let i = from; ; i++) {
    const iri = `${prefix}${i}`;
    if (shardOfIri(iri) === shard) return iri;
  }
}

/** Seeded PRNG (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
