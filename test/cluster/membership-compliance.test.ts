import { membershipSuite } from '../compliance/membership.suite.js';
import { localCluster, META, type Transport } from './helpers.js';

for (const transport of ['direct', 'memory', 'http2'] as Transport[]) {
  membershipSuite(`StaticMembership + MemoryAuthority (${transport})`, async (nodes) => {
    const c = await localCluster({ nodes, transport });
    return { members: c.members, make: c.make, meta: META, teardown: () => c.close() };
  });
}
