/**
 * Where journals live: a single-node journal directory becomes a cluster node's without
 * re-hashing; with per-node stores and replication factor 1 a failed owner's shards stay
 * held (messages wait, nothing is lost, no other node takes them) until it returns; and a
 * five-node cluster on MemoryWire keeps every acknowledged message exactly once.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { counterChart } from '../../ts/cluster/charts.js';
import { checkHistory } from '../../ts/cluster/history.js';
import { initCluster } from '../../ts/cluster/init.js';
import { launchClusterNode, readNodeConfig } from '../../ts/cluster/node.js';
import { type Membership, ownerOf } from '../../ts/cluster/types.js';
import { openJournal } from '../../ts/runtime/log-journal.js';
import { Node } from '../../ts/runtime/node.js';
import { refusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';
import { type MemoryActorCluster, memoryActorCluster, rng } from './actor-helpers.js';
import { freePorts } from './actor-procs.js';

let cluster: MemoryActorCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

describe('journal layouts', () => {
  it('opens a single-node journal directory as a cluster node journal without re-hashing', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-single-to-cluster-'));
    try {
      const files = await initCluster({ dir, id: 'c1', shards: 16, nodes: ['a'], ports: await freePorts(1) });
      const cfg = await readNodeConfig(files.get('a')!);
      // A single-node runtime writes into the node's journal directory first.
      const single = await openJournal(join(cfg.dataDir, 'journal'), { shardCount: 16 });
      const node = Node.builder(single).chart('vt:counter/', counterChart).build();
      for (let i = 0; i < 20; i++) for (let k = 0; k <= i % 3; k++) await node.send(`vt:counter/s${i}`, 'inc');
      await node.stop();
      await single.close();
      const cn = await launchClusterNode(cfg);
      try {
        await until(() => cn.membership.leaseFor(0) !== undefined && cn.membership.view().leases.length === 16, {
          what: 'leases',
        });
        for (let i = 0; i < 20; i++) {
          const r = await cn.node.ask(`vt:counter/s${i}`, 'inc', { reply: true });
          expect((r.data as { n: number }).n).toBe((i % 3) + 2);
        }
      } finally {
        await cn.stop();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 20_000);

  it('per-node stores: a failed owner’s shards stay held until it returns, then the message is delivered', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'], layout: 'per-node' });
    cluster = c;
    const ma = c.memberships.get('a')!;
    await until(() => ma.view().leases.length === 8 && new Set(ma.view().leases.map((l) => l.owner)).size === 3, {
      what: 'leases',
    });
    const mc = c.memberships.get('c')!;
    let shard = 0;
    while (ownerOf(ma.view(), shard)?.owner !== 'c') shard++;
    const e1 = ownerOf(ma.view(), shard)!.epoch;
    const target = Array.from({ length: 500 }, (_, i) => `vt:counter/pn${i}`).find(
      (t) => c.nodes.get('a')!.placement.shardOf(t) === shard,
    )!;
    await c.nodes.get('a')!.node.send(target, 'inc', { id: 'first' });
    // c goes silent: its heartbeats stop reaching the authority.
    const real = (mc as unknown as { call: Membership['grant'] }).call;
    (mc as unknown as { call: () => Promise<never> }).call = () => Promise.reject(new Error('down'));
    await until(() => ownerOf(ma.view(), shard) === undefined, { timeoutMs: 8000, what: 'the lease of c expired' });
    let done: string | undefined;
    void c.nodes
      .get('a')!
      .node.send(target, 'inc', { id: 'while-down' })
      .then((v) => {
        done = v;
      });
    // Held by a's runtime until the shard has an owner; and no other member may be that owner
    // while c is away: the authority refuses them the shard, whose journal is in c's store.
    await until(() => c.nodes.get('a')!.node.heldCount === 1, { what: 'the message held on a' });
    const refused = await refusal(c.memberships.get('b')!.grant(shard));
    expect([refused.code, refused.details.home]).toEqual(['PLX_CLUSTER_LEASE_HELD', 'c']);
    expect(done).toBeUndefined();
    expect(ownerOf(ma.view(), shard)).toBeUndefined(); // nobody else took it
    (mc as unknown as { call: typeof real }).call = real;
    await until(() => done !== undefined, { timeoutMs: 10_000, what: 'delivery after c returned' });
    expect(done).toBe('processed');
    const back = ownerOf(ma.view(), shard)!;
    expect(back.owner).toBe('c');
    expect(back.epoch > e1).toBe(true);
    const report = checkHistory(await c.histories(), c.writers);
    expect(report.problems).toEqual([]);
    expect([...report.consumed.get(target)!].sort()).toEqual(['first', 'while-down']);
  }, 30_000);

  it('five nodes, lost and duplicated frames, two revoked shards: every acknowledged message once', async () => {
    const nodes = ['a', 'b', 'c', 'd', 'e'];
    const c = await memoryActorCluster({ nodes, config: { retryBackoffMs: 5 } });
    cluster = c;
    const ma = c.memberships.get('a')!;
    await until(() => ma.view().leases.length === 8, { what: 'leases' });
    const r = rng(55);
    c.network.faults = { drop: () => r() < 0.1, duplicate: () => r() < 0.1 };
    const acked = new Map<string, string>();
    const sends: Promise<void>[] = [];
    for (let i = 0; i < 200; i++) {
      const from = c.nodes.get(nodes[Math.floor(r() * 5)]!)!;
      const target = `vt:counter/f${Math.floor(r() * 50)}`;
      const id = `five-${i}`;
      sends.push(
        from.node.send(target, 'inc', { id }).then(
          () => void acked.set(id, target),
          () => {},
        ),
      );
      if (i === 50 || i === 120) void ma.revoke(Math.floor(r() * 8)).catch(() => {});
      if (i % 20 === 0) await new Promise((res) => setTimeout(res, 5));
    }
    await Promise.all(sends);
    expect(acked.size).toBe(200);
    const report = checkHistory(await c.histories(), c.writers);
    expect(report.problems).toEqual([]);
    for (const [id, target] of acked) expect(report.consumed.get(target)?.has(id)).toBe(true);
    expect(report.macrosteps).toBe(200);
  }, 30_000);
});
