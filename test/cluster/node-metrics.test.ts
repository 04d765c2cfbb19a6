/**
 * A cluster node's metrics port (ts/cluster/node-metrics.ts), on one real node launched in
 * this process (mutual-TLS wire, journal on disk): plain HTTP on loopback with counters that
 * move as actors run; beyond loopback HTTPS that takes only the cluster's client certificates.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initCluster } from '../../ts/cluster/init.js';
import { type ClusterNode, launchClusterNode, readNodeConfig } from '../../ts/cluster/node.js';
import { checkNodeConfig } from '../../ts/cluster/node-config.js';
import { isLoopbackHost } from '../../ts/cluster/node-metrics.js';
import { issueNodeCertificate } from '../../ts/net/ca.js';
import { freePorts } from '../helpers/ports.js';
import { expectRefusal, thrownRefusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';

let dir: string;
let configs: Map<string, string>;
let other: Map<string, string>;
let cn: ClusterNode | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'plexus-node-metrics-'));
  const lease = { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 };
  configs = await initCluster({
    dir: join(dir, 'c1'),
    id: 'c1',
    shards: 4,
    nodes: ['a'],
    ports: await freePorts(1),
    lease,
  });
  // Another cluster, with its own CA: its certificates may not scrape c1.
  other = await initCluster({
    dir: join(dir, 'c2'),
    id: 'c2',
    shards: 4,
    nodes: ['a'],
    ports: await freePorts(1),
    lease,
  });
});
afterAll(async () => {
  await cn?.stop();
  await rm(dir, { recursive: true, force: true });
});

/** One metric's value (summed over its labels) from Prometheus text. */
function metric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

async function launchWith(metrics: { host?: string; port: number }): Promise<ClusterNode> {
  const file = configs.get('a') as string;
  const cfg = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
  await writeFile(file, JSON.stringify({ ...cfg, metrics }));
  const node = await launchClusterNode(await readNodeConfig(file));
  cn = node;
  await until(() => node.membership.held().length === 4, { timeoutMs: 20_000, what: 'the node to hold every shard' });
  return node;
}

/** GET over HTTPS with the TLS material of a node config (or none). */
async function httpsGet(
  url: string,
  tls: { cert?: string; key?: string; ca: string },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { ...tls, servername: 'localhost', checkServerIdentity: () => undefined }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function pems(file: string): Promise<{ cert: string; key: string; ca: string }> {
  const c = await readNodeConfig(file);
  return {
    cert: await readFile(c.tls.cert, 'utf8'),
    key: await readFile(c.tls.key, 'utf8'),
    ca: await readFile(c.tls.ca, 'utf8'),
  };
}

describe('the metrics port of a node', () => {
  it('tells loopback hosts from the others', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', '::1', 'localhost', '::ffff:127.0.0.1'])
      expect(isLoopbackHost(h)).toBe(true);
    for (const h of ['0.0.0.0', '::', '10.0.0.1', 'example.org', '128.0.0.1']) expect(isLoopbackHost(h)).toBe(false);
  });

  it('on loopback: /healthz, /readyz, and counters that move when actors run', async () => {
    const [port] = await freePorts(1);
    const node = await launchWith({ port: port as number });
    expect(node.metricsAddress).toBe(`127.0.0.1:${port}`);
    const base = `http://127.0.0.1:${port}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as { checks: Record<string, { ok: boolean }> }).checks).toMatchObject({
      member: { ok: true },
      disk: { ok: true },
    });
    const before = await (await fetch(`${base}/metrics`)).text();
    expect(metric(before, 'plexus_node_leases_held')).toBe(4);
    for (let i = 0; i < 5; i++) await node.node.ask('vt:counter/m', 'inc', { reply: true }, { timeoutMs: 10_000 });
    const after = await (await fetch(`${base}/metrics`)).text();
    expect(metric(after, 'plexus_node_macrosteps_total') - metric(before, 'plexus_node_macrosteps_total')).toBe(5);
    expect(metric(after, 'plexus_node_journal_appends_total')).toBeGreaterThanOrEqual(
      metric(before, 'plexus_node_journal_appends_total') + 5,
    );
    expect(metric(after, 'plexus_node_journal_append_duration_seconds_count')).toBeGreaterThanOrEqual(5);
    expect(metric(after, 'plexus_node_fsync_duration_seconds_count')).toBeGreaterThanOrEqual(1);
    expect(after).toMatch(/^plexus_node_dead_letters_total 0$/m);
    expect((await fetch(`${base}/nothing`)).status).toBe(404);
    await node.stop();
    cn = undefined;
    // Stopped: the port is closed.
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
  }, 60_000);

  it('beyond loopback: HTTPS with mutual TLS, only for certificates of the cluster', async () => {
    const [port] = await freePorts(1);
    await launchWith({ host: '0.0.0.0', port: port as number });
    const url = `https://127.0.0.1:${port}/metrics`;
    const mine = await pems(configs.get('a') as string);
    const ok = await httpsGet(url, mine);
    expect(ok.status).toBe(200);
    expect(ok.body).toMatch(/^plexus_node_leases_held 4$/m);
    // No client certificate: refused at the handshake.
    await expect(httpsGet(url, { ca: mine.ca })).rejects.toThrow();
    // A certificate of another cluster's CA: refused at the handshake too.
    const theirs = await pems(other.get('a') as string);
    await expect(httpsGet(url, { ...theirs, ca: mine.ca })).rejects.toThrow();
    // A certificate the cluster's CA signed that names no node of this cluster: 403.
    const ca = { cluster: 'c9', cert: mine.ca, key: await readFile(join(dir, 'c1/ca-key.pem'), 'utf8') };
    const stranger = await issueNodeCertificate(ca, 'x');
    const forbidden = await httpsGet(url, { cert: stranger.cert, key: stranger.key, ca: mine.ca });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body).not.toMatch(/plexus_node/);
    // Plain HTTP gets no answer.
    await expect(fetch(`http://127.0.0.1:${port}/metrics`)).rejects.toThrow();
    await cn?.stop();
    cn = undefined;
  }, 60_000);

  it('refuses a metrics port that is taken (PLX_CLUSTER_LISTEN), and closes what it opened', async () => {
    const [port] = await freePorts(1);
    const first = await launchWith({ port: port as number });
    const cfg = await readNodeConfig(other.get('a') as string);
    const e = await expectRefusal(
      launchClusterNode({ ...cfg, metrics: { port: port as number } }),
      'PLX_CLUSTER_LISTEN',
    );
    expect(e.details.field).toBe('metrics');
    await first.stop();
    cn = undefined;
    // The refused node closed its wire: its cluster starts on the same config now.
    const again = await launchClusterNode({ ...cfg, metrics: { port: port as number } });
    expect(again.metricsAddress).toBe(`127.0.0.1:${port}`);
    await again.stop();
  }, 60_000);
});

describe('the node config keys charts and metrics', () => {
  const base = {
    meta: { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 },
    self: 'a',
    members: [{ id: 'a', address: '127.0.0.1:7400' }],
    authority: 'a',
    dataDir: 'data',
    tls: { cert: 'cert.pem', key: 'key.pem', ca: 'ca.pem' },
  };
  const pathOf = (extra: Record<string, unknown>) =>
    thrownRefusal(() => checkNodeConfig({ ...base, ...extra }, 'node.json')).details.path;

  it('accepts a chart module path and a metrics host and port', () => {
    expect(() =>
      checkNodeConfig({ ...base, charts: '../../charts.mjs', metrics: { host: '0.0.0.0', port: 9400 } }, 'node.json'),
    ).not.toThrow();
    expect(() => checkNodeConfig({ ...base, metrics: { port: 0 } }, 'node.json')).not.toThrow();
    expect(() => checkNodeConfig({ ...base, metrics: { host: '::1', port: 9400 } }, 'node.json')).not.toThrow();
  });

  it('names the bad value (PLX_CLUSTER_BAD_CONFIG)', () => {
    expect(thrownRefusal(() => checkNodeConfig({ ...base, charts: 7 }, 'node.json')).code).toBe(
      'PLX_CLUSTER_BAD_CONFIG',
    );
    expect(pathOf({ charts: 7 })).toBe('charts');
    expect(pathOf({ metrics: { host: '127.0.0.1' } })).toBe('metrics.port');
    expect(pathOf({ metrics: { port: 65_536 } })).toBe('metrics.port');
    expect(pathOf({ metrics: { port: 9400, host: 'not a host!' } })).toBe('metrics.host');
    expect(pathOf({ metrics: { port: 9400, tls: true } })).toBe('metrics.tls');
  });
});
