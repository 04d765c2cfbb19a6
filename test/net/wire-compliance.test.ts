import { MemoryNetwork, MemoryWire } from '../../ts/net/memory-wire.js';
import { wireSuite } from '../compliance/wire.suite.js';
import { http2Net } from './helpers.js';

wireSuite('MemoryWire', async (nodes) => {
  const network = new MemoryNetwork();
  const excluded = new Map<string, Set<string>>(nodes.map((n) => [n, new Set<string>()]));
  const wires = new Map(
    nodes.map((n) => [
      n,
      new MemoryWire({
        self: n,
        network,
        isMember: (p) => nodes.includes(p) && !excluded.get(n)?.has(p),
        deliveryDeadlineMs: 1500,
        retryBackoffMs: 20,
      }),
    ]),
  );
  for (const w of wires.values()) await w.listen();
  return {
    wires,
    setMember: (viewer, node, member) => {
      if (member) excluded.get(viewer)?.delete(node);
      else excluded.get(viewer)?.add(node);
    },
    teardown: async () => {
      for (const w of wires.values()) await w.close();
    },
  };
});

wireSuite('Http2Wire (mutual TLS 1.3 on loopback)', async (nodes) => {
  const net = await http2Net(nodes);
  return {
    wires: net.wires,
    setMember: (viewer, node, member) => {
      if (member) net.excluded.get(viewer)?.delete(node);
      else net.excluded.get(viewer)?.add(node);
    },
    teardown: () => net.close(),
  };
});
