/**
 * The node config's `membership` block (ts/cluster/node-config.ts), what `initCluster` writes
 * for each kind (ts/cluster/init.ts), and the lease dump of a static cluster that is stopped
 * (ts/cluster/lease-dump.ts, from the authority's real `authority.state` file) or running (a
 * real node with mutual TLS, asked by `plexus cluster leases` from another process). Dumps from
 * etcd are in etcd-processes.test.ts.
 */
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { saveAuthorityState } from '../../ts/cluster/authority-state.js';
import { initCluster } from '../../ts/cluster/init.js';
import { readLeases, writeLeaseDump } from '../../ts/cluster/lease-dump.js';
import { launchClusterNode, readNodeConfig } from '../../ts/cluster/node.js';
import { checkNodeConfig } from '../../ts/cluster/node-config.js';
import { built, runNode } from '../helpers/processes.js';
import { refusal, thrownRefusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';
import { CLI, freePorts } from './actor-procs.js';

// biome-ignore lint/suspicious/noExplicitAny: JSON
type Json = Record<string, any>;

const ETCD: Json = {
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
  membership: {
    kind: 'etcd',
    endpoints: ['http://127.0.0.1:2379', 'http://[::1]:22379'],
    prefix: '/p/c1/',
    timeoutMs: 500,
  },
};

function problem(change: (c: Json) => void): { code: string; path: unknown; message: string } {
  const c = structuredClone(ETCD);
  change(c);
  const e = thrownRefusal(() => checkNodeConfig(c, 'node.json'));
  return { code: e.code, path: e.details.path, message: e.message };
}

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('the membership block', () => {
  it('accepts etcd without an authority member, and static as before', () => {
    expect(() => checkNodeConfig(structuredClone(ETCD), 'node.json')).not.toThrow();
    const minimal = structuredClone(ETCD);
    minimal.membership = { kind: 'etcd', endpoints: ['http://127.0.0.1:2379'] };
    expect(() => checkNodeConfig(minimal, 'node.json')).not.toThrow();
    const stat = structuredClone(ETCD);
    stat.membership = { kind: 'static' };
    stat.authority = 'b';
    expect(() => checkNodeConfig(stat, 'node.json')).not.toThrow();
  });

  it('names the bad field', () => {
    const cases: [(c: Json) => void, string, RegExp][] = [
      [(c) => (c.membership.kind = 'gossip'), 'membership.seeds', /required with "kind": "gossip"/],
      [(c) => (c.membership.kind = 'kubernetes'), 'membership.endpoints', /unknown|not a known|is not/],
      [(c) => delete c.membership.kind, 'membership.kind', /required/],
      [(c) => delete c.membership.endpoints, 'membership.endpoints', /required with "kind": "etcd"/],
      [(c) => (c.membership.endpoints = []), 'membership.endpoints', /at least 1/],
      [(c) => (c.membership.endpoints = ['http://a:1', 'https://b:2']), 'membership.endpoints[1]', /etcd client URL/],
      [(c) => (c.membership.endpoints = ['127.0.0.1:2379']), 'membership.endpoints[0]', /etcd client URL/],
      [(c) => (c.membership.prefix = 'plexus/'), 'membership.prefix', /starts and ends with \//],
      [(c) => (c.membership.prefix = '/plexus'), 'membership.prefix', /starts and ends with \//],
      [(c) => (c.membership.timeoutMs = 0), 'membership.timeoutMs', /from 1/],
      [(c) => (c.membership.extra = 1), 'membership.extra', /unknown|not a known|is not/],
      [(c) => (c.authority = 'a'), 'authority', /only for "membership": static/],
      [(c) => delete c.journal, 'journal', /must be "shared"/],
      [(c) => (c.journal = 'per-node'), 'journal', /must be "shared"/],
      [(c) => delete c.storeHost, 'storeHost', /required/],
      [
        (c) => {
          c.membership = { kind: 'static', endpoints: ['http://127.0.0.1:2379'] };
          c.authority = 'a';
        },
        'membership.endpoints',
        /only for "kind": "etcd"/,
      ],
      [(c) => (c.membership = { kind: 'static' }), 'authority', /is required/],
      [(c) => delete c.membership, 'authority', /is required/],
    ];
    for (const [change, path, message] of cases) {
      const p = problem(change);
      expect(p.code, path).toBe('PLX_CLUSTER_BAD_CONFIG');
      expect(p.path, path).toBe(path);
      expect(p.message, path).toMatch(message);
    }
  });
});

describe('initCluster with a membership', () => {
  it('writes the etcd block, a shared journal and no authority; the configs read back', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-membership-'));
    dirs.push(dir);
    const files = await initCluster({
      dir,
      id: 'c1',
      shards: 8,
      nodes: ['a', 'b'],
      membership: { kind: 'etcd', endpoints: ['http://127.0.0.1:2379'] },
    });
    const cfg = await readNodeConfig(files.get('b')!);
    expect(cfg.membership).toEqual({ kind: 'etcd', endpoints: ['http://127.0.0.1:2379'] });
    expect(cfg.authority).toBeUndefined();
    expect(cfg.journal).toBe('shared');
    expect(cfg.storeHost).toBe('a');
    const stat = await initCluster({ dir: join(dir, 's'), id: 'c1', shards: 8, nodes: ['a', 'b'] });
    const raw = JSON.parse(await readFile(stat.get('a')!, 'utf8')) as Json;
    expect(raw.membership).toBeUndefined();
    expect(raw.authority).toBe('a');
  });

  it('refuses an unknown membership kind, etcd without endpoints or with per-node journals', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-membership-'));
    dirs.push(dir);
    const base = { dir: join(dir, 'x'), id: 'c1', shards: 8, nodes: ['a'] };
    for (const kind of ['zookeeper']) {
      // biome-ignore lint/suspicious/noExplicitAny: a kind the type does not allow
      const e = await refusal(initCluster({ ...base, membership: { kind } as any }));
      expect(e.code).toBe('PLX_CLUSTER_BAD_CONFIG');
      expect(e.message).toContain('static, etcd, kubernetes or gossip');
      expect(e.details.field).toBe('membership');
    }
    const noUrls = await refusal(initCluster({ ...base, membership: { kind: 'etcd', endpoints: [] } }));
    expect(noUrls.details.field).toBe('membership.endpoints');
    const perNode = await refusal(
      initCluster({ ...base, journal: 'per-node', membership: { kind: 'etcd', endpoints: ['http://127.0.0.1:2379'] } }),
    );
    expect(perNode.details.field).toBe('journal');
  });
});

describe.skipIf(!built)('the lease dump of a static cluster (build dist first)', () => {
  it('asks the running authority over the wire, and reads authority.state once it stopped', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-dump-run-'));
    dirs.push(dir);
    const files = await initCluster({ dir, id: 'c1', shards: 8, nodes: ['a', 'b'], ports: await freePorts(2) });
    const cn = await launchClusterNode(await readNodeConfig(files.get('a')!));
    const out = join(dir, 'leases.json');
    let view: ReturnType<typeof cn.membership.view>;
    try {
      // b never joins: after the grace period a claims every shard.
      await until(() => cn.membership.view().leases.length === 8, { timeoutMs: 20_000, what: 'leases' });
      view = cn.membership.view();
      // From another process, with b's certificate: the authority's view over the wire.
      const r = await runNode(CLI, ['leases', '--config', files.get('b')!, '--dump', out], { timeoutMs: 60_000 });
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout.trim())).toMatchObject({ dump: out, source: 'authority', leases: 8 });
      const d = JSON.parse(await readFile(out, 'utf8')) as Json;
      expect(d).toMatchObject({ membership: 'static', source: 'authority' });
      expect(d.leases).toEqual(
        view.leases.map((l) => ({ shard: l.shard, owner: 'a', epoch: String(l.epoch), expiresAt: null })),
      );
    } finally {
      await cn.stop();
    }
    // Stopped: the leases ended with the authority; its state file bounds every epoch granted.
    const r = await runNode(CLI, ['leases', '--config', files.get('b')!, '--dump', out], { timeoutMs: 60_000 });
    expect(r.code, r.stderr).toBe(0);
    const d = JSON.parse(await readFile(out, 'utf8')) as Json;
    expect(d).toMatchObject({ source: 'authority.state', leases: [] });
    for (const l of view.leases) expect(BigInt(d.epochCeiling) >= l.epoch).toBe(true);
  }, 60_000);

  it('refuses without --dump (usage) and on a config that does not exist (coded)', async () => {
    const u = await runNode(CLI, ['leases', '--config', 'x.json'], { timeoutMs: 60_000 });
    expect(u.code).toBe(2);
    const m = await runNode(CLI, ['leases', '--config', join(tmpdir(), 'plexus-no-such.json'), '--dump', 'o'], {
      timeoutMs: 60_000,
    });
    expect(m.code).toBe(1);
    expect(m.stderr).toContain('PLX_CLUSTER_BAD_PATH');
  });
});

describe('the lease dump of a stopped static cluster', () => {
  it('reads the epoch ceiling and journal homes from authority.state, and refuses without one', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-dump-'));
    dirs.push(dir);
    const files = await initCluster({ dir, id: 'c1', shards: 8, nodes: ['a', 'b'] });
    const cfg = await readNodeConfig(files.get('b')!);
    const unreachable = async () => {
      throw new Error('connection refused');
    };
    // No authority node data directory yet: nothing to read.
    const none = await refusal(readLeases(cfg, unreachable));
    expect(none.code).toBe('PLX_CLUSTER_UNAVAILABLE');
    expect(none.message).toContain('connection refused');
    await mkdir(join(dir, 'nodes', 'a', 'data'));
    await saveAuthorityState(join(dir, 'nodes', 'a', 'data'), cfg.meta, {
      epochCeiling: 3n << 16n,
      viewCeiling: 1 << 16,
      homes: new Map([
        [2, 'a'],
        [5, 'b'],
      ]),
    });
    const d = await readLeases(cfg, unreachable);
    expect(d).toMatchObject({
      cluster: 'c1',
      shardCount: 8,
      membership: 'static',
      source: 'authority.state',
      leases: [],
      epochCeiling: String(3n << 16n),
      journalHomes: { '2': 'a', '5': 'b' },
    });
    const out = join(dir, 'leases.json');
    await writeLeaseDump(out, d);
    expect(JSON.parse(await readFile(out, 'utf8'))).toEqual(JSON.parse(JSON.stringify(d)));
  });
});

describe('the etcd client stays off a static node', () => {
  it('no module a static node or the command line loads imports the etcd authority statically', async () => {
    for (const f of [
      'ts/cluster/node.ts',
      'ts/cluster/lease-dump.ts',
      'ts/cli/commands/cluster.ts',
      'ts/cluster/index.ts',
    ]) {
      const text = await readFile(new URL(`../../${f}`, import.meta.url), 'utf8');
      expect(text, f).not.toMatch(/^import[^;]*from '[^']*etcd-(authority|gateway)\.js'/m);
      expect(text, f).not.toMatch(/^export[^;]*from '[^']*etcd-(authority|gateway)\.js'/m);
    }
  });
});
