/**
 * Your own actors on a cluster node (ts/cluster/user-charts.ts): chart modules imported from
 * real files, their refusals with stable codes, how they join the built-in charts, and a real
 * single-node cluster (mutual-TLS wire, journal on disk) launched in this process with them.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_CHARTS, counterChart } from '../../ts/cluster/charts.js';
import { initCluster } from '../../ts/cluster/init.js';
import { type ClusterNode, launchClusterNode, readNodeConfig } from '../../ts/cluster/node.js';
import { checkChartModule, loadChartModule, nodeCharts } from '../../ts/cluster/user-charts.js';
import { freePorts } from '../helpers/ports.js';
import { expectRefusal, thrownRefusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'plexus-user-charts-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Writes a module file under the test directory and returns its path. */
async function moduleFile(name: string, text: string): Promise<string> {
  const f = join(dir, name);
  await writeFile(f, text);
  return f;
}

const ECHO = `export const charts = {
  'vt:echo/': {
    initial: () => ({ n: 0 }),
    transition: (s, e) => e.name === 'say' && e.origin
      ? { state: { n: s.n + 1 }, sends: [{ target: e.origin, event: 'said', data: { n: s.n + 1, text: e.data.text } }] }
      : { state: s },
  },
};
`;

describe('chart modules', () => {
  it('loads a module exporting charts, and keeps the built-ins next to them', async () => {
    const m = await loadChartModule(await moduleFile('echo.mjs', ECHO));
    expect(Object.keys(m.charts)).toEqual(['vt:echo/']);
    const all = nodeCharts(m);
    expect(Object.keys(all).sort()).toEqual(['vt:counter/', 'vt:echo/', 'vt:relay/']);
    expect(all['vt:counter/']).toBe(counterChart);
  });

  it('loads a path relative to the given base, and a CommonJS module', async () => {
    await moduleFile(
      'cjs-charts.cjs',
      `module.exports = { charts: { 'vt:c/': { initial: () => 0, transition: (s) => ({ state: s }) } }, builtins: false };`,
    );
    const m = await loadChartModule('./cjs-charts.cjs', dir);
    expect(Object.keys(m.charts)).toEqual(['vt:c/']);
    expect(m.builtins).toBe(false);
    expect(Object.keys(nodeCharts(m))).toEqual(['vt:c/']);
  });

  it('refuses a module that does not load, naming the file (PLX_CLUSTER_CHARTS_LOAD)', async () => {
    const missing = await expectRefusal(loadChartModule(join(dir, 'nope.mjs')), 'PLX_CLUSTER_CHARTS_LOAD');
    expect(missing.message).toMatch(/nope\.mjs: no such file/);
    expect(missing.details.file).toBe(join(dir, 'nope.mjs'));
    await expectRefusal(loadChartModule(dir), 'PLX_CLUSTER_CHARTS_LOAD');
    const syntax = await expectRefusal(
      loadChartModule(await moduleFile('syntax.mjs', 'export const charts = {')),
      'PLX_CLUSTER_CHARTS_LOAD',
    );
    // The import's own error is kept (a SyntaxError under node; the test runner parses it itself).
    expect(syntax.cause).toBeInstanceOf(Error);
    expect(syntax.message).toMatch(/syntax\.mjs/);
    const throws = await expectRefusal(
      loadChartModule(await moduleFile('throws.mjs', 'throw new Error("no database here");')),
      'PLX_CLUSTER_CHARTS_LOAD',
    );
    expect(throws.message).toMatch(/no database here/);
  });

  it('refuses exports of the wrong shape, naming the bad value (PLX_CLUSTER_CHARTS_SHAPE)', async () => {
    const path = async (text: string) =>
      (
        await expectRefusal(
          loadChartModule(await moduleFile(`shape-${Math.random()}.mjs`, text)),
          'PLX_CLUSTER_CHARTS_SHAPE',
        )
      ).details.path;
    expect(await path('export const chart = {};')).toBe('charts');
    expect(await path('export const charts = [];')).toBe('charts');
    expect(await path('export const charts = {};')).toBe('charts');
    expect(await path("export const charts = { 'vt:a/': { initial: () => 0 } };")).toBe('charts["vt:a/"]');
    expect(await path("export const charts = { 'vt:a/': 42 };")).toBe('charts["vt:a/"]');
    expect(
      await path("export const charts = { 'no colon': { initial: () => 0, transition: (s) => ({ state: s }) } };"),
    ).toBe('charts["no colon"]');
    expect(
      await path(
        "export const charts = { 'vt:a/': { initial: () => 0, transition: (s) => ({ state: s }), journal: 'all' } };",
      ),
    ).toBe('charts["vt:a/"].journal');
    expect(
      await path(
        "export const charts = { 'vt:a/': { initial: () => 0, transition: (s) => ({ state: s }) } }; export const builtins = 'no';",
      ),
    ).toBe('builtins');
    expect(
      await path(
        "export const charts = { 'vt:a/': { initial: () => 0, transition: (s) => ({ state: s }) } }; export const replaces = 'vt:counter/';",
      ),
    ).toBe('replaces');
  });

  it('tells an XState machine to be wrapped with xstateChart', async () => {
    const { createMachine } = await import('xstate');
    const e = thrownRefusal(() =>
      checkChartModule({ charts: { 'vt:m/': createMachine({ initial: 'a', states: { a: {} } }) } }, 'm.mjs'),
    );
    expect(e.code).toBe('PLX_CLUSTER_CHARTS_SHAPE');
    expect(e.message).toMatch(/xstateChart/);
  });

  it('refuses a built-in prefix redefined without replaces (PLX_CLUSTER_CHARTS_BUILTIN), and takes it with replaces', () => {
    const mine = { initial: () => ({ n: 100 }), transition: counterChart.transition };
    const e = thrownRefusal(() => nodeCharts({ charts: { 'vt:counter/': mine } }));
    expect(e.code).toBe('PLX_CLUSTER_CHARTS_BUILTIN');
    expect(e.details.prefix).toBe('vt:counter/');
    const replaced = nodeCharts({ charts: { 'vt:counter/': mine }, replaces: ['vt:counter/'] });
    expect(replaced['vt:counter/']).toBe(mine);
    expect(replaced['vt:relay/']).toBe(BUILTIN_CHARTS['vt:relay/']);
    // Without the built-ins nothing is replaced, so nothing clashes.
    expect(Object.keys(nodeCharts({ charts: { 'vt:counter/': mine }, builtins: false }))).toEqual(['vt:counter/']);
    // A replaces entry that is no built-in, or that no chart of yours defines, is a mistake.
    expect(thrownRefusal(() => nodeCharts({ charts: { 'vt:counter/': mine }, replaces: ['vt:countr/'] })).code).toBe(
      'PLX_CLUSTER_CHARTS_SHAPE',
    );
    expect(thrownRefusal(() => nodeCharts({ charts: { 'vt:x/': mine }, replaces: ['vt:relay/'] })).code).toBe(
      'PLX_CLUSTER_CHARTS_SHAPE',
    );
    // No charts of yours: the built-ins alone, as before.
    expect(nodeCharts()).toEqual(BUILTIN_CHARTS);
  });
});

describe('a node launched with your charts (one real node: mutual-TLS wire, journal on disk)', () => {
  let config: string;
  let cn: ClusterNode | undefined;

  beforeAll(async () => {
    const files = await initCluster({
      dir: join(dir, 'c1'),
      id: 'c1',
      shards: 4,
      nodes: ['a'],
      ports: await freePorts(1),
      lease: { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 },
    });
    config = files.get('a') as string;
  });
  afterAll(async () => {
    await cn?.stop();
  });

  async function launch(opts: Parameters<typeof launchClusterNode>[1] = {}): Promise<ClusterNode> {
    cn = await launchClusterNode(await readNodeConfig(config), opts);
    const node = cn;
    await until(() => node.membership.held().length === 4, { timeoutMs: 20_000, what: 'the node to hold every shard' });
    return node;
  }

  it('from code: your chart and the built-in counter both answer', async () => {
    const { charts } = await loadChartModule(join(dir, 'echo.mjs'));
    const node = await launch({ charts });
    const said = await node.node.ask('vt:echo/one', 'say', { text: 'hi' }, { timeoutMs: 10_000 });
    expect(said.name).toBe('said');
    expect(said.data).toEqual({ n: 1, text: 'hi' });
    const counted = await node.node.ask('vt:counter/k', 'inc', { reply: true }, { timeoutMs: 10_000 });
    expect(counted.data).toEqual({ n: 1 });
    await node.stop();
    cn = undefined;
  }, 60_000);

  it('from the config key (relative to the config file), and without built-ins on purpose', async () => {
    const cfg = JSON.parse(await readFile(config, 'utf8')) as Record<string, unknown>;
    await writeFile(config, JSON.stringify({ ...cfg, charts: '../../../echo.mjs' }));
    expect((await readNodeConfig(config)).charts).toBe(join(dir, 'echo.mjs'));
    const node = await launch({ builtins: false });
    // State from the journal of the first launch: the same actor continues.
    const said = await node.node.ask('vt:echo/one', 'say', { text: 'again' }, { timeoutMs: 10_000 });
    expect(said.data).toEqual({ n: 2, text: 'again' });
    await expect(node.node.ask('vt:counter/k', 'inc', { reply: true }, { timeoutMs: 2_000 })).rejects.toThrow(
      /no chart is registered for vt:counter\/k/,
    );
    await node.stop();
    cn = undefined;
  }, 60_000);

  it('refuses a config whose chart module does not load, before it listens', async () => {
    const cfg = JSON.parse(await readFile(config, 'utf8')) as Record<string, unknown>;
    await writeFile(config, JSON.stringify({ ...cfg, charts: 'missing.mjs' }));
    const e = await expectRefusal(launchClusterNode(await readNodeConfig(config)), 'PLX_CLUSTER_CHARTS_LOAD');
    expect(e.details.file).toBe(join(dir, 'c1/nodes/a/missing.mjs'));
    // Nothing was left listening: the node starts once the config is right.
    await writeFile(config, JSON.stringify({ ...cfg, charts: undefined }));
    const node = await launch();
    expect((await node.node.ask('vt:counter/k', 'inc', { reply: true }, { timeoutMs: 10_000 })).data).toEqual({ n: 2 });
    await node.stop();
    cn = undefined;
  }, 60_000);
});
