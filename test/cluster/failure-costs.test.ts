/**
 * "What each failure costs" (test/compliance/failure-costs.suite.ts) for static membership with
 * the in-memory lease authority; test/cluster/etcd-membership.test.ts runs it on a real etcd.
 */
import { failureCostsSuite } from '../compliance/failure-costs.suite.js';
import { localCluster, META } from './helpers.js';

failureCostsSuite('StaticMembership + MemoryAuthority', async (nodes, opts) => {
  const c = await localCluster({
    nodes,
    transport: 'direct',
    ...(opts?.leaseClockRate ? { leaseClockRate: opts.leaseClockRate } : {}),
  });
  return { members: c.members, make: c.make, meta: META, teardown: () => c.close() };
});
