/**
 * The cluster demo: three nodes on loopback in this process, each with its own HTTP/2
 * mutual-TLS wire, static membership (node a hosts the lease authority) and its own journal
 * directory, exchange durable messages among a few thousand virtual actors, then stop.
 * Everything lives in a temporary directory that is removed at the end.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts } from '../net/ports.js';
import { initCluster } from './init.js';
import { type ClusterNode, launchClusterNode, readNodeConfig } from './node.js';
import { ownerOf } from './types.js';

export interface ClusterDemoOptions {
  /** Actors to message (default 3000). */
  readonly actors?: number;
}

/** Runs the demo, printing a few lines through `log`; resolves when everything is stopped. */
export async function runClusterDemo(log: (line: string) => void, opts: ClusterDemoOptions = {}): Promise<void> {
  const actors = Math.max(10, opts.actors ?? 3000);
  const dir = await mkdtemp(join(tmpdir(), 'plexus-cluster-demo-'));
  const nodes: ClusterNode[] = [];
  const t0 = performance.now();
  try {
    const ids = ['a', 'b', 'c'];
    const files = await initCluster({ dir, id: 'demo', shards: 32, nodes: ids, ports: await freePorts(3) });
    for (const id of ids) nodes.push(await launchClusterNode(await readNodeConfig(files.get(id) as string)));
    const [a] = nodes as [ClusterNode];
    for (let i = 0; ; i++) {
      const v = a.membership.view();
      const usable = nodes.every((n) =>
        n.membership
          .view()
          .leases.filter((l) => l.owner === n.self)
          .every((l) => n.membership.leaseFor(l.shard) !== undefined),
      );
      if (v.leases.length === 32 && usable) break;
      if (i > 400) throw new Error('the demo cluster did not lease every shard within 20 s');
      await new Promise((r) => setTimeout(r, 50));
    }
    const view = a.membership.view();
    const per = ids.map((id) => `${id}: ${view.leases.filter((l) => l.owner === id).length}`).join(', ');
    log(
      `3 nodes on loopback (HTTP/2 + mutual TLS 1.3), 32 shards leased (${per}) in ${(performance.now() - t0).toFixed(0)} ms`,
    );

    // Every node sends one durable `inc` to each of a third of the actors, 64 at a time.
    const t1 = performance.now();
    let crossed = 0;
    await Promise.all(
      nodes.map(async (n, k) => {
        const mine = Array.from({ length: actors }, (_, i) => i).filter((i) => i % 3 === k);
        let next = 0;
        await Promise.all(
          Array.from({ length: 64 }, async () => {
            for (;;) {
              const i = mine[next++];
              if (i === undefined) return;
              const target = `vt:counter/demo-${i}`;
              if (ownerOf(view, n.placement.shardOf(target))?.owner !== n.self) crossed++;
              await n.node.send(target, 'inc');
            }
          }),
        );
      }),
    );
    const ms1 = performance.now() - t1;
    log(
      `${actors} actors got one message each, ${crossed} of them from another node; each journaled before it was acknowledged (${ms1.toFixed(0)} ms, ${((actors / ms1) * 1000).toFixed(0)}/s)`,
    );

    // Actor to actor: relays on every node ask counters elsewhere to count and reply.
    const t2 = performance.now();
    const relays = Array.from({ length: 30 }, (_, i) => `vt:relay/demo-${i}`);
    await Promise.all(
      relays.map(async (r, i) => {
        for (let j = 0; j < 10; j++) {
          await a.node.send(r, 'relay', {
            data: { to: `vt:counter/demo-${(i * 97 + j * 13) % actors}`, event: 'inc', data: { reply: true } },
          });
        }
      }),
    );
    let replies = 0;
    for (let tries = 0; tries < 200; tries++) {
      replies = 0;
      for (const r of relays) {
        const rep = await a.node.ask(r, 'report');
        replies += (rep.data as { got: Record<string, number> }).got.counted ?? 0;
      }
      if (replies >= relays.length * 10) break;
      await new Promise((res) => setTimeout(res, 20));
    }
    log(
      `30 relay actors sent 300 messages to counters and got ${replies} replies back across nodes (${(performance.now() - t2).toFixed(0)} ms)`,
    );
    const stats = nodes.map((n) => `${n.self}: ${n.processor.stats.delivered} in, ${n.processor.stats.sent} out`);
    log(`cluster frames per node: ${stats.join('; ')}`);
  } finally {
    for (const n of nodes.reverse()) await n.stop().catch(() => {});
    await rm(dir, { recursive: true, force: true });
    log(`stopped all nodes and removed the data (${(performance.now() - t0).toFixed(0)} ms in all)`);
  }
}
