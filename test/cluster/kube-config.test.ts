/**
 * The `kubernetes` membership block of a node config (ts/cluster/node-config.ts), what
 * `initCluster` and `plexus cluster init --membership kubernetes` write for it, and that
 * `@kubernetes/client-node` (and the authority modules) are loaded only when such a membership
 * is opened: a child process importing every package entry point, the cluster node module and
 * the cluster CLI command, and running the CLI, with a module-resolution hook recording what it
 * loads (checked against a control that does open the Kubernetes client).
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { initCluster } from '../../ts/cluster/init.js';
import { readNodeConfig } from '../../ts/cluster/node.js';
import { checkNodeConfig } from '../../ts/cluster/node-config.js';
import { built, runNode } from '../helpers/processes.js';
import { refusal, thrownRefusal } from '../helpers/refusal.js';
import { CLI } from './actor-procs.js';

// biome-ignore lint/suspicious/noExplicitAny: JSON
type Json = Record<string, any>;

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

const KUBE: Json = {
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
    kind: 'kubernetes',
    namespace: 'plexus',
    prefix: 'plexus-c1',
    kubeconfig: '../kube.yaml',
    timeoutMs: 500,
  },
};

function problem(change: (c: Json) => void): { code: string; path: unknown; message: string } {
  const c = structuredClone(KUBE);
  change(c);
  const e = thrownRefusal(() => checkNodeConfig(c, 'node.json'));
  return { code: e.code, path: e.details.path, message: e.message };
}

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('the kubernetes membership block', () => {
  it('accepts a namespace with an optional prefix, kubeconfig and timeout, and no authority member', () => {
    expect(() => checkNodeConfig(structuredClone(KUBE), 'node.json')).not.toThrow();
    const minimal = structuredClone(KUBE);
    minimal.membership = { kind: 'kubernetes', namespace: 'default' };
    expect(() => checkNodeConfig(minimal, 'node.json')).not.toThrow();
  });

  it('names the bad field', () => {
    const cases: [(c: Json) => void, string, RegExp][] = [
      [(c) => delete c.membership.namespace, 'membership.namespace', /required/],
      [(c) => (c.membership.namespace = 'Plexus'), 'membership.namespace', /namespace name/],
      [(c) => (c.membership.namespace = 'a'.repeat(64)), 'membership.namespace', /namespace name/],
      [(c) => (c.membership.prefix = '/plexus/'), 'membership.prefix', /Lease name prefix/],
      [(c) => (c.membership.prefix = 'p'.repeat(41)), 'membership.prefix', /Lease name prefix/],
      [(c) => (c.membership.kubeconfig = 7), 'membership.kubeconfig', /string/],
      [(c) => (c.membership.timeoutMs = 0), 'membership.timeoutMs', /from 1/],
      [
        (c) => (c.membership.endpoints = ['http://127.0.0.1:2379']),
        'membership.endpoints',
        /unknown|not a known|is not/,
      ],
      [(c) => (c.authority = 'a'), 'authority', /only for "membership": static \(with kubernetes/],
      [(c) => (c.journal = 'per-node'), 'journal', /must be "shared" with kubernetes membership/],
      [(c) => delete c.storeHost, 'storeHost', /required/],
      [
        (c) => {
          c.membership = { kind: 'static', namespace: 'plexus' };
          c.authority = 'a';
        },
        'membership.namespace',
        /unknown|not a known|is not/,
      ],
    ];
    for (const [change, path, message] of cases) {
      const p = problem(change);
      expect(p.code, path).toBe('PLX_CLUSTER_BAD_CONFIG');
      expect(p.path, path).toBe(path);
      expect(p.message, path).toMatch(message);
    }
  });

  it('initCluster writes the kubernetes block, a shared journal and no authority; kubeconfig resolves beside the config', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-kube-cfg-'));
    dirs.push(dir);
    const files = await initCluster({
      dir,
      id: 'c1',
      shards: 8,
      nodes: ['a', 'b'],
      membership: { kind: 'kubernetes', namespace: 'plexus', kubeconfig: '../../kube.yaml' },
    });
    const raw = JSON.parse(await readFile(files.get('b')!, 'utf8')) as Json;
    expect(raw.membership).toEqual({ kind: 'kubernetes', namespace: 'plexus', kubeconfig: '../../kube.yaml' });
    expect(raw.authority).toBeUndefined();
    expect(raw.journal).toBe('shared');
    expect(raw.storeHost).toBe('a');
    const cfg = await readNodeConfig(files.get('b')!);
    expect(cfg.membership).toEqual({ kind: 'kubernetes', namespace: 'plexus', kubeconfig: join(dir, 'kube.yaml') });
    const base = { dir: join(dir, 'x'), id: 'c1', shards: 8, nodes: ['a'] };
    // biome-ignore lint/suspicious/noExplicitAny: a block without its namespace
    const noNs = await refusal(initCluster({ ...base, membership: { kind: 'kubernetes' } as any }));
    expect(noNs.details.field).toBe('membership.namespace');
    const perNode = await refusal(
      initCluster({ ...base, journal: 'per-node', membership: { kind: 'kubernetes', namespace: 'plexus' } }),
    );
    expect(perNode.details.field).toBe('journal');
    expect(perNode.message).toContain('kubernetes');
  });
});

describe.skipIf(!built)('plexus cluster init --membership kubernetes (build dist first)', () => {
  it('writes the block with an absolute kubeconfig, and refuses what does not fit', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-kube-cli-'));
    dirs.push(dir);
    const r = await runNode(
      CLI,
      [
        'init',
        '--dir',
        join(dir, 'c'),
        '--id',
        'k1',
        '--shards',
        '8',
        '--nodes',
        'a,b',
        '--membership',
        'kubernetes',
        '--kube-namespace',
        'plexus',
        '--kubeconfig',
        'kube.yaml',
      ],
      { timeoutMs: 60_000, cwd: dir },
    );
    expect(r.code, r.stderr).toBe(0);
    const cfg = JSON.parse(await readFile(join(dir, 'c', 'nodes', 'a', 'node.json'), 'utf8')) as Json;
    expect(cfg.membership).toEqual({ kind: 'kubernetes', namespace: 'plexus', kubeconfig: join(dir, 'kube.yaml') });
    expect(cfg.authority).toBeUndefined();
    expect(cfg.journal).toBe('shared');
    const init = (extra: string[]) =>
      runNode(CLI, ['init', '--dir', join(dir, 'n'), '--id', 'n', '--shards', '8', '--nodes', 'a', ...extra], {
        timeoutMs: 60_000,
      });
    const noNs = await init(['--membership', 'kubernetes']);
    expect(noNs.code).toBe(2);
    expect(noNs.stderr).toContain('--kube-namespace');
    const mixed = await init([
      '--membership',
      'etcd',
      '--etcd-endpoints',
      'http://127.0.0.1:2379',
      '--kube-namespace',
      'x',
    ]);
    expect(mixed.code).toBe(2);
    const help = await runNode(CLI, ['init', '--help'], { timeoutMs: 60_000 });
    expect(help.stdout).toContain('--membership static|etcd|kubernetes');
    expect(help.stdout).toContain('--kube-namespace NS');
  });
});

describe.skipIf(!built)(
  'the Kubernetes client is loaded only when the kubernetes membership is opened (build dist first)',
  () => {
    it('is not loaded by the package entry points, the node module or the cluster CLI', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'plexus-kube-load-'));
      dirs.push(dir);
      const hooks = join(dir, 'hooks.mjs');
      const register = join(dir, 'register.mjs');
      await writeFile(
        hooks,
        [
          "import { appendFileSync } from 'node:fs';",
          'export async function resolve(specifier, context, next) {',
          '  const r = await next(specifier, context);',
          '  if (/@kubernetes|kube-authority|etcd-authority|etcd-gateway/.test(r.url)) {',
          '    appendFileSync(process.env.PLEXUS_LOAD_LOG, r.url + "\\n");',
          '  }',
          '  return r;',
          '}',
        ].join('\n'),
      );
      await writeFile(
        register,
        `import { register } from 'node:module';\nregister(${JSON.stringify(`file://${hooks}`)});\n`,
      );
      const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as Json;
      const entries = Object.values(pkg.exports as Json)
        .filter((e): e is Json => typeof e === 'object' && typeof e.default === 'string')
        .map((e) => resolve(ROOT, e.default as string));
      expect(entries.length).toBeGreaterThan(5);
      const modules = [...entries, join(ROOT, 'dist/cluster/node.js'), join(ROOT, 'dist/cli/commands/cluster.js')];
      const run = (log: string, args: string[]) => {
        const r = spawnSync(process.execPath, ['--import', register, ...args], {
          env: { ...process.env, PLEXUS_LOAD_LOG: log },
          encoding: 'utf8',
          timeout: 60_000,
        });
        expect(r.status, r.stderr).toBe(0);
      };
      const loaded = async (log: string) => (await readFile(log, 'utf8').catch(() => '')).split('\n').filter(Boolean);

      const importLog = join(dir, 'import.log');
      const imports = modules.map((m) => `await import(${JSON.stringify(`file://${m}`)});`).join('\n');
      run(importLog, ['--input-type=module', '-e', imports]);
      expect(await loaded(importLog)).toEqual([]);

      // The CLI: its help, and a static cluster's init, load neither.
      const cliLog = join(dir, 'cli.log');
      const main = join(ROOT, 'dist/cli/main.js');
      run(cliLog, [main, 'cluster', '--help']);
      run(cliLog, [main, 'cluster', 'init', '--dir', join(dir, 's'), '--id', 's', '--shards', '8', '--nodes', 'a']);
      expect(await loaded(cliLog)).toEqual([]);

      // The control: opening the Kubernetes client's path is seen by the same hook.
      const controlLog = join(dir, 'control.log');
      const open = [
        `const { kubeLeaseApi } = await import(${JSON.stringify(`file://${join(ROOT, 'dist/cluster/kube-authority.js')}`)});`,
        `await kubeLeaseApi(${JSON.stringify(join(dir, 'no-such-kubeconfig'))}, 1000).catch((e) => { if (e.code !== 'PLX_CLUSTER_BAD_CONFIG') throw e; });`,
      ].join('\n');
      run(controlLog, ['--input-type=module', '-e', open]);
      const seen = await loaded(controlLog);
      expect(seen.some((u) => u.includes('kube-authority.js'))).toBe(true);
      expect(seen.some((u) => u.includes('@kubernetes/client-node'))).toBe(true);
    });
  },
);
