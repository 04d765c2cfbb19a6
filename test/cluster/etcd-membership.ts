/**
 * A `MembershipFactory` (test/compliance/membership.suite.ts) for static membership over the
 * etcd lease authority, as `launchClusterNode` builds it for `membership.kind` `etcd`: every
 * node has its own `EtcdAuthority` on one key prefix of a real etcd, and claims free shards
 * with `startClaiming` (etcd assigns nothing by itself; a node claims the free shards it
 * ranks first for among the alive members). A node's claiming stops when its membership
 * closes or leaves.
 */
import { EtcdAuthority } from '../../ts/cluster/etcd-authority.js';
import type { ClusterMeta } from '../../ts/cluster/meta.js';
import { startClaiming } from '../../ts/cluster/node.js';
import { StaticMembership } from '../../ts/cluster/static.js';
import type { MemberInfo } from '../../ts/cluster/types.js';
import type { FailureCostsFactory } from '../compliance/failure-costs.suite.js';
import type { MembershipHarness } from '../compliance/membership.suite.js';

const META: ClusterMeta = { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 };
const LEASE = { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 };
const DETECTOR = { suspectAfterMs: 300, failedAfterMs: 1000 };

let next = 0;

/**
 * The factory over etcd at `endpoints()` (read when a test builds its cluster), each cluster on
 * a fresh prefix; `leaseClockRate` slows a node's lease clock (the failure-costs suite's skew row).
 */
export function etcdMembershipFactory(endpoints: () => readonly string[]): FailureCostsFactory {
  return async (nodes, opts = {}): Promise<MembershipHarness> => {
    const prefix = `/plexus-membership/${process.pid}-${Date.now()}-${next++}/`;
    const infos: MemberInfo[] = nodes.map((id) => ({ id, address: `${id}:0` }));
    const lease = LEASE;
    const authorities: Promise<EtcdAuthority>[] = [];
    const all: StaticMembership[] = [];
    const make = (node: string, meta: ClusterMeta = META): StaticMembership => {
      let opened: Promise<EtcdAuthority> | undefined;
      const authority = () => {
        opened ??= EtcdAuthority.open({
          etcd: { endpoints: endpoints() },
          prefix,
          meta,
          members: infos,
          lease,
          detector: DETECTOR,
        });
        if (!authorities.includes(opened)) authorities.push(opened);
        return opened;
      };
      const rate = opts.leaseClockRate?.(node) ?? 1;
      const m = new StaticMembership({
        config: { meta, self: { id: node, address: `${node}:0` }, members: infos, authority: 'etcd' },
        call: async (req) => (await authority()).call(req),
        lease,
        heartbeatEveryMs: 50,
        ...(rate === 1 ? {} : { clock: { now: () => performance.now() * rate } }),
      });
      // Like a launched node: claims start once joined and stop when the membership closes.
      let stopClaiming: (() => void) | undefined;
      const join = m.join.bind(m);
      m.join = async () => {
        const v = await join();
        stopClaiming ??= startClaiming(m, meta.shardCount, [], { everyMs: 20, graceMs: 0 });
        return v;
      };
      const close = m.close.bind(m);
      m.close = async () => {
        stopClaiming?.();
        await close();
      };
      all.push(m);
      return m;
    };
    const members = new Map(nodes.map((n) => [n, make(n)]));
    return {
      members,
      make,
      meta: META,
      teardown: async () => {
        for (const m of all) await m.close();
        for (const a of authorities) await a.then((x) => x.close()).catch(() => {});
      },
    };
  };
}
