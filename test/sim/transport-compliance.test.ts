/**
 * SimRaftTransport runs the Raft transport compliance suite on the simulator's network (no
 * loss, no duplicates, random delays, so no order per peer) on a ManualClock.
 */
import { ManualClock } from '../../ts/core/clock.js';
import type { Message } from '../../ts/raft/types.js';
import { SimNetwork } from '../../ts/sim/network.js';
import { SimRaftNetwork } from '../../ts/sim/raft/transport.js';
import { SimRandom } from '../../ts/sim/rng.js';
import { raftTransportSuite } from '../compliance/raft-transport.suite.js';

let seed = 1;

raftTransportSuite(
  'SimRaftTransport (simulated network, manual clock)',
  {
    setup: async () => {
      const clock = new ManualClock();
      const net = new SimNetwork<Message>(new SimRandom(seed++), {
        minDelay: 1,
        maxDelay: 10,
        dropRate: 0,
        duplicateRate: 0,
      });
      const wire = new SimRaftNetwork(net, clock);
      const transports = [1, 2, 3].map((id) => wire.join(id));
      return {
        transports,
        refusals: [],
        settle: async () => {
          clock.advance(5);
          wire.deliver(clock.now());
        },
      };
    },
    teardown: async (h) => {
      for (const t of h.transports) await t.close();
    },
  },
  { ordered: false, bytes: false },
);
