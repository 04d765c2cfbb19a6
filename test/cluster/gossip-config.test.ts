/**
 * Gossip membership in the node config (ts/cluster/node-config.ts: the `membership` block
 * with `kind: "gossip"`, its seeds and gossip timings), what `initCluster` writes for it
 * (ts/cluster/init.ts), and a node launched from such a config in this process
 * (`launchClusterNode`: real mutual-TLS wire on loopback, gossip on the wire's calls).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { initCluster } from '../../ts/cluster/init.js';
import { type ClusterNode, launchClusterNode, readNodeConfig } from '../../ts/cluster/node.js';
import { checkNodeConfig, gossipSeeds } from '../../ts/cluster/node-config.js';
import { refusal, thrownRefusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';
import { freePorts, patchConfig } from './actor-procs.js';

// biome-ignore lint/suspicious/noExplicitAny: JSON
type Json = Record<string, any>;

const GOSSIP: Json = {
  meta: { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 },
  self: 'a',
  members: [
    { id: 'a', address: '127.0.0.1:7400' },
    { id: 'b', address: '127.0.0.1:7401' },
  ],
  dataDir: 'data',
  tls: { cert: 'cert.pem', key: 'key.pem', ca: '../../ca.pem' },
  journal: 'shared',
  storeHost: 'a',
  membership: { kind: 'gossip', seeds: ['a', '127.0.0.1:7401', 'z@10.0.0.9:7400'], gossip: { probeIntervalMs: 500 } },
};

function problem(change: (c: Json) => void): { code: string; path: unknown; message: string } {
  const c = structuredClone(GOSSIP);
  change(c);
  const e = thrownRefusal(() => checkNodeConfig(c, 'node.json'));
  return { code: e.code, path: e.details.path, message: e.message };
}

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('the gossip membership block', () => {
  it('accepts seeds as node ids, host:port and id@host:port, and gossip timings', () => {
    expect(() => checkNodeConfig(structuredClone(GOSSIP), 'node.json')).not.toThrow();
    expect(gossipSeeds(GOSSIP.membership.seeds, GOSSIP.members)).toEqual([
      'a@127.0.0.1:7400',
      'b@127.0.0.1:7401',
      'z@10.0.0.9:7400',
    ]);
  });

  it('names the bad field', () => {
    const cases: [(c: Json) => void, string, RegExp][] = [
      [(c) => delete c.membership.seeds, 'membership.seeds', /required with "kind": "gossip"/],
      [(c) => (c.membership.seeds = []), 'membership.seeds', /at least 1/],
      [(c) => (c.membership.seeds = ['a', 'B_1']), 'membership.seeds[1]', /node id, host:port or id@host:port/],
      [(c) => (c.membership.seeds = ['zz']), 'membership.seeds[0]', /which members does not list/],
      [(c) => (c.membership.seeds = ['a', '127.0.0.1:9']), 'membership.seeds[1]', /which members does not list/],
      [(c) => (c.membership.gossip = { probeIntervalMs: 0 }), 'membership.gossip.probeIntervalMs', /at least 1|from 1/],
      [
        (c) => (c.membership.gossip = { probeIntervalMs: 100, probeTimeoutMs: 100 }),
        'membership.gossip.probeTimeoutMs',
        /below probeIntervalMs/,
      ],
      [(c) => (c.membership.gossip = { lifeguard: 'yes' }), 'membership.gossip.lifeguard', /true or false/],
      [(c) => (c.membership.gossip = { fanout: 3 }), 'membership.gossip.fanout', /unknown|not a known|is not/],
      [(c) => (c.membership.endpoints = ['http://127.0.0.1:2379']), 'membership.endpoints', /only for "kind": "etcd"/],
      [(c) => (c.authority = 'a'), 'authority', /only for "membership": static \(with gossip/],
      [(c) => (c.journal = 'per-node'), 'journal', /must be "shared" with gossip membership/],
      [(c) => delete c.storeHost, 'storeHost', /required .* with gossip membership/],
      [
        (c) => {
          c.membership = { kind: 'static', seeds: ['a'] };
          c.authority = 'a';
        },
        'membership.seeds',
        /only for "kind": "gossip"/,
      ],
    ];
    for (const [change, path, message] of cases) {
      const p = problem(change);
      expect(p.code, path).toBe('PLX_CLUSTER_BAD_CONFIG');
      expect(p.path, path).toBe(path);
      expect(p.message, path).toMatch(message);
    }
  });
});

describe('initCluster with gossip membership', () => {
  it('writes the gossip block (every node a seed unless given), a shared journal and no authority', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-gossip-init-'));
    dirs.push(dir);
    const files = await initCluster({
      dir,
      id: 'c1',
      shards: 8,
      nodes: ['a', 'b', 'c'],
      membership: { kind: 'gossip' },
    });
    const cfg = await readNodeConfig(files.get('c')!);
    expect(cfg.membership).toEqual({ kind: 'gossip', seeds: ['a', 'b', 'c'] });
    expect(cfg.authority).toBeUndefined();
    expect(cfg.journal).toBe('shared');
    expect(cfg.storeHost).toBe('a');
    const two = await initCluster({
      dir: join(dir, 's'),
      id: 'c1',
      shards: 8,
      nodes: ['a', 'b'],
      basePort: 7600,
      membership: { kind: 'gossip', seeds: ['127.0.0.1:7601'] },
    });
    const raw = JSON.parse(await readFile(two.get('a')!, 'utf8')) as Json;
    expect(raw.membership).toEqual({ kind: 'gossip', seeds: ['127.0.0.1:7601'] });
    const bad = await refusal(
      initCluster({
        dir: join(dir, 'x'),
        id: 'c1',
        shards: 8,
        nodes: ['a'],
        membership: { kind: 'gossip', seeds: ['q'] },
      }),
    );
    expect(bad.code).toBe('PLX_CLUSTER_BAD_CONFIG');
    expect(bad.details.field).toBe('membership.seeds[0]');
    const perNode = await refusal(
      initCluster({
        dir: join(dir, 'y'),
        id: 'c1',
        shards: 8,
        nodes: ['a'],
        journal: 'per-node',
        membership: { kind: 'gossip' },
      }),
    );
    expect(perNode.details.field).toBe('journal');
  });
});

describe('launchClusterNode with gossip membership', () => {
  it('two nodes in this process form the cluster through their seeds and lease every shard', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-gossip-launch-'));
    dirs.push(dir);
    const ports = await freePorts(2);
    const files = await initCluster({
      dir,
      id: 'c1',
      shards: 8,
      nodes: ['a', 'b'],
      ports,
      membership: { kind: 'gossip' },
      lease: { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 },
      detector: { suspectAfterMs: 600, failedAfterMs: 2000 },
      heartbeatEveryMs: 100,
    });
    const nodes: ClusterNode[] = [];
    try {
      // Each waits for the other seed: they start together.
      nodes.push(
        ...(await Promise.all(['a', 'b'].map(async (id) => launchClusterNode(await readNodeConfig(files.get(id)!))))),
      );
      const [a, b] = nodes as [ClusterNode, ClusterNode];
      await until(() => a.membership.view().leases.length === 8, { timeoutMs: 20_000, what: 'every shard leased' });
      const v = a.membership.view();
      expect(v.members.map((m) => [m.id, m.status])).toEqual([
        ['a', 'alive'],
        ['b', 'alive'],
      ]);
      expect(new Set(v.leases.map((l) => l.owner))).toEqual(new Set(['a', 'b']));
      await until(() => b.membership.view().version >= v.version, 'b to see the view');
      for (const l of v.leases)
        expect(nodes[l.owner === 'a' ? 0 : 1]!.membership.leaseFor(l.shard)?.epoch).toBe(l.epoch);
    } finally {
      for (const n of nodes.reverse()) await n.stop();
    }
  }, 60_000);

  it('a node its config does not list joins through a seed, and the others reach it at the address gossip gives', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-gossip-unlisted-'));
    dirs.push(dir);
    const ports = await freePorts(2);
    const files = await initCluster({
      dir,
      id: 'c1',
      shards: 8,
      nodes: ['a', 'c'],
      ports,
      membership: { kind: 'gossip', seeds: ['a'] },
      lease: { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 },
      detector: { suspectAfterMs: 600, failedAfterMs: 2000 },
      heartbeatEveryMs: 100,
    });
    // a's config lists only a: it learns c, and where c listens, from gossip alone.
    await patchConfig(files.get('a')!, { members: [{ id: 'a', address: `127.0.0.1:${ports[0]}` }] });
    const nodes: ClusterNode[] = [];
    try {
      const a = await launchClusterNode(await readNodeConfig(files.get('a')!));
      nodes.push(a);
      const c = await launchClusterNode(await readNodeConfig(files.get('c')!));
      nodes.push(c);
      await until(() => a.membership.view().members.some((m) => m.id === 'c' && m.status === 'alive'), 'a to see c');
      expect(a.membership.view().members.find((m) => m.id === 'c')?.address).toBe(`127.0.0.1:${ports[1]}`);
      // c claims the shards ranked to it; a sends to an actor on one of them: the frame goes
      // to c's address, known from gossip only.
      const ofC = await until(() => a.membership.view().leases.find((l) => l.owner === 'c'), {
        timeoutMs: 20_000,
        what: 'c to own a shard',
      });
      let target = '';
      for (let i = 0; target === ''; i++) {
        if (a.placement.shardOf(`vt:counter/u${i}`) === ofC.shard) target = `vt:counter/u${i}`;
      }
      const sentBefore = a.processor.stats.sent;
      expect(await a.node.send(target, 'inc', { id: 'from-a' })).toBe('processed');
      expect(a.processor.stats.sent).toBeGreaterThan(sentBefore);
      expect(c.processor.stats.delivered).toBeGreaterThan(0);
    } finally {
      for (const n of nodes.reverse()) await n.stop();
    }
  }, 60_000);
});
