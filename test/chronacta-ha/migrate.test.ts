/**
 * `plexus chronacta migrate` (ts/chronacta/migrate.ts): data format 1 -> 2 of a stopped
 * node's data directory (node.json gains the cluster id), read by both formats, refused on a
 * running node (in this process and in another one), on a newer format and on a directory
 * without cluster files; idempotent and crash-safe. The rolling upgrade of a cluster with
 * this migration is TestHACommercialRollingUpgradeWithMigrateThreeNode (commercial.test.ts).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  clusterFiles,
  DATA_FORMAT,
  DATA_FORMAT_UNSUPPORTED,
  prepareDataDir,
  writeClusterFiles,
} from '../../ts/chronacta/layout.js';
import { migrateDataDir } from '../../ts/chronacta/migrate.js';
import { EventStore } from '../../ts/chronacta/store.js';
import { ROOT } from '../helpers/paths.js';
import { built, type Started, startNode, startPlexus, stopStarted } from '../helpers/processes.js';
import { quiet } from './helpers.js';

/** `plexus chronacta serve` (standalone) on `dir`; resolves once it serves. */
async function serveProcess(dir: string): Promise<Started> {
  const p = startPlexus(['chronacta', 'serve', '--data', dir, '--port', '0', '--metrics-port', '0']);
  await p.line((l) => l.includes('"serving"'), { timeoutMs: 20_000, what: 'serve to start' });
  return p;
}

let root = '';
afterEach(async () => {
  await stopStarted();
  if (root) rmSync(root, { recursive: true, force: true });
  root = '';
});

const members = [1, 2, 3].map((id) => ({
  id,
  advertise: `127.0.0.1:${7100 + id}`,
  raftAddress: `127.0.0.1:${7200 + id}`,
}));

const readJson = (f: string) => JSON.parse(readFileSync(f, 'utf8')) as Record<string, unknown>;

/** A standalone data directory as a format-1 plexus left it: a log with events, node.json without clusterId. */
async function formatOneStandalone(dir: string): Promise<{ clusterId: string; nodeId: string }> {
  const store = await EventStore.open({ dataDir: dir, logger: quiet });
  await store.append('orders-1', [{ type: 'placed', data: new TextEncoder().encode('one') }]);
  await store.close();
  const node = readJson(join(dir, 'cluster/node.json'));
  const cluster = readJson(join(dir, 'cluster/cluster.json'));
  writeFileSync(
    join(dir, 'cluster/node.json'),
    `${JSON.stringify({ version: 1, id: node.id, advertiseAddress: node.advertiseAddress }, null, 2)}\n`,
  );
  return { clusterId: cluster.clusterId as string, nodeId: node.id as string };
}

describe('plexus chronacta migrate: data format 1 -> 2', () => {
  it('writes new directories in format 2 (fresh and cluster init), bound to their cluster', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-migrate-'));
    const fresh = await prepareDataDir(join(root, 'fresh'));
    expect(fresh.node).toMatchObject({ version: DATA_FORMAT, clusterId: fresh.cluster.clusterId });
    expect(readJson(join(root, 'fresh/cluster/node.json')).clusterId).toBe(fresh.cluster.clusterId);
    await writeClusterFiles(join(root, 'm2'), clusterFiles('c1', members, 2));
    const m2 = await prepareDataDir(join(root, 'm2'));
    expect(m2.node).toMatchObject({ version: 2, id: '2', clusterId: 'c1' });
    expect(await migrateDataDir(join(root, 'm2'))).toEqual({
      dataDir: join(root, 'm2'),
      from: 2,
      to: 2,
      changed: false,
    });
  });

  it('migrates a format-1 directory once, keeps its data and fields, and the store opens it before and after', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-migrate-'));
    const dir = join(root, 'node');
    const { clusterId, nodeId } = await formatOneStandalone(dir);
    // Format 1 is still read as it is (a node of the new build beside old ones).
    const old = await prepareDataDir(dir);
    expect(old.node).toEqual({ version: 1, id: nodeId, advertiseAddress: '' });
    const store1 = await EventStore.open({ dataDir: dir, logger: quiet });
    expect(store1.lastPosition).toBe(1n);
    await store1.close();
    expect(readJson(join(dir, 'cluster/node.json')).version).toBe(1);
    // An extra field written by someone else survives the migration.
    const withExtra = { ...readJson(join(dir, 'cluster/node.json')), note: 'kept' };
    writeFileSync(join(dir, 'cluster/node.json'), JSON.stringify(withExtra));
    const clusterBefore = readFileSync(join(dir, 'cluster/cluster.json'), 'utf8');

    expect(await migrateDataDir(dir)).toEqual({ dataDir: dir, from: 1, to: 2, changed: true });
    expect(readJson(join(dir, 'cluster/node.json'))).toEqual({
      version: 2,
      id: nodeId,
      advertiseAddress: '',
      note: 'kept',
      clusterId,
    });
    expect(readFileSync(join(dir, 'cluster/cluster.json'), 'utf8')).toBe(clusterBefore);
    const bytes = readFileSync(join(dir, 'cluster/node.json'));
    // Idempotent: a second run changes nothing.
    expect(await migrateDataDir(dir)).toEqual({ dataDir: dir, from: 2, to: 2, changed: false });
    expect(readFileSync(join(dir, 'cluster/node.json'))).toEqual(bytes);
    const store2 = await EventStore.open({ dataDir: dir, logger: quiet });
    try {
      expect(store2.lastPosition).toBe(1n);
      const all = await store2.readAll();
      expect(all.events.map((e) => new TextDecoder().decode(e.data))).toEqual(['one']);
    } finally {
      await store2.close();
    }
  });

  it('format 2 refuses a cluster.json of another cluster; format 1 cannot tell', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-migrate-'));
    const dir = join(root, 'm1');
    await writeClusterFiles(dir, clusterFiles('c1', members, 1));
    const other = clusterFiles('c2', members, 1).cluster;
    writeFileSync(join(dir, 'cluster/cluster.json'), JSON.stringify(other));
    await expect(prepareDataDir(dir)).rejects.toMatchObject({
      code: 'PLX_CHRONACTA_BAD_DATA_DIR',
      details: { nodeClusterId: 'c1', clusterId: 'c2' },
      message: expect.stringContaining('belongs to cluster "c1"'),
    });
    await expect(migrateDataDir(dir)).rejects.toMatchObject({ code: 'PLX_CHRONACTA_BAD_DATA_DIR' });
    writeFileSync(join(dir, 'cluster/node.json'), JSON.stringify({ version: 1, id: '1', advertiseAddress: '' }));
    expect((await prepareDataDir(dir)).cluster.clusterId).toBe('c2');
    // A format-2 node.json must name its cluster.
    writeFileSync(join(dir, 'cluster/node.json'), JSON.stringify({ version: 2, id: '1', advertiseAddress: '' }));
    await expect(prepareDataDir(dir)).rejects.toMatchObject({
      code: 'PLX_CHRONACTA_BAD_DATA_DIR',
      message: expect.stringContaining('clusterId'),
    });
  });

  it('refuses a newer format, a bad version, and a directory without cluster files', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-migrate-'));
    const dir = join(root, 'node');
    await formatOneStandalone(dir);
    const nodeFile = join(dir, 'cluster/node.json');
    const node = readJson(nodeFile);
    writeFileSync(nodeFile, JSON.stringify({ ...node, version: 3, clusterId: 'x' }));
    for (const attempt of [
      () => migrateDataDir(dir),
      () => prepareDataDir(dir),
      () => EventStore.open({ dataDir: dir, logger: quiet }),
    ]) {
      await expect(attempt()).rejects.toMatchObject({
        code: DATA_FORMAT_UNSUPPORTED,
        details: { version: 3, supported: DATA_FORMAT },
        message: expect.stringContaining('newer than this plexus reads'),
      });
    }
    expect(readJson(nodeFile).version).toBe(3); // untouched
    writeFileSync(nodeFile, JSON.stringify({ ...node, version: 'two' }));
    await expect(migrateDataDir(dir)).rejects.toMatchObject({ code: 'PLX_CHRONACTA_BAD_DATA_DIR' });
    writeFileSync(nodeFile, JSON.stringify(node));
    const clusterFile = join(dir, 'cluster/cluster.json');
    writeFileSync(clusterFile, JSON.stringify({ ...readJson(clusterFile), version: 2 }));
    await expect(migrateDataDir(dir)).rejects.toMatchObject({ code: DATA_FORMAT_UNSUPPORTED });
    await expect(migrateDataDir(join(root, 'nothing-here'))).rejects.toMatchObject({
      code: 'PLX_CHRONACTA_BAD_DATA_DIR',
      message: expect.stringContaining('not a Chronacta data directory'),
    });
    await expect(migrateDataDir('')).rejects.toMatchObject({ code: 'PLX_CHRONACTA_BAD_INPUT' });
  });

  it('refuses a node that is running, in this process or another, and leaves its files alone', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-migrate-'));
    const dir = join(root, 'node');
    await formatOneStandalone(dir);
    const before = readFileSync(join(dir, 'cluster/node.json'));
    const store = await EventStore.open({ dataDir: dir, logger: quiet });
    await expect(migrateDataDir(dir)).rejects.toMatchObject({
      code: 'PLX_CHRONACTA_LOCKED',
      message: expect.stringContaining('stop the node, then migrate'),
    });
    await store.close();
    expect(readFileSync(join(dir, 'cluster/node.json'))).toEqual(before);
    // Another live process holds the log's lock.
    const child = startNode(join(ROOT, 'test/fixtures/wait-forever.mjs'));
    writeFileSync(join(dir, 'log/LOCK'), `${child.pid}\n`);
    await expect(migrateDataDir(dir)).rejects.toMatchObject({
      code: 'PLX_CHRONACTA_LOCKED',
      details: { pid: child.pid },
    });
    expect(readFileSync(join(dir, 'cluster/node.json'))).toEqual(before);
    // Once it is gone, its stale lock is taken over and the migration goes through, releasing the lock.
    await child.stop('SIGKILL');
    expect((await migrateDataDir(dir)).changed).toBe(true);
    const reopened = await EventStore.open({ dataDir: dir, logger: quiet });
    await reopened.close();
  });

  it.skipIf(!built)(
    'refuses a running `plexus chronacta serve` process; the migrated directory serves again',
    async () => {
      root = mkdtempSync(join(tmpdir(), 'plexus-migrate-'));
      const dir = join(root, 'node');
      const { clusterId } = await formatOneStandalone(dir);
      const first = await serveProcess(dir);
      await expect(migrateDataDir(dir)).rejects.toMatchObject({
        code: 'PLX_CHRONACTA_LOCKED',
        details: { pid: first.pid },
      });
      expect(readJson(join(dir, 'cluster/node.json')).version).toBe(1);
      await first.stop();
      expect(await migrateDataDir(dir)).toMatchObject({ from: 1, to: 2, changed: true });
      const second = await serveProcess(dir);
      await second.stop();
      expect(readJson(join(dir, 'cluster/node.json'))).toMatchObject({ version: 2, clusterId });
      const store = await EventStore.open({ dataDir: dir, logger: quiet });
      try {
        expect(store.lastPosition).toBe(1n);
      } finally {
        await store.close();
      }
    },
    60_000,
  );

  it('is crash-safe: a half-written temporary file from an interrupted run does not matter', async () => {
    root = mkdtempSync(join(tmpdir(), 'plexus-migrate-'));
    const dir = join(root, 'node');
    const { clusterId } = await formatOneStandalone(dir);
    // A run that died before its rename: the old node.json is whole, node.json.tmp is garbage.
    writeFileSync(join(dir, 'cluster/node.json.tmp'), '{"version": 2, "id"');
    expect((await prepareDataDir(dir)).node.version).toBe(1);
    expect(await migrateDataDir(dir)).toMatchObject({ from: 1, to: 2, changed: true });
    expect(readJson(join(dir, 'cluster/node.json'))).toMatchObject({ version: 2, clusterId });
  });
});
