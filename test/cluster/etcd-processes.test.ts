/**
 * Cluster nodes as real processes (`plexus cluster node` from dist/) whose leases come from a
 * real 3-member etcd (`--membership etcd`; no node hosts an authority, every node talks to
 * etcd): actors run across the nodes; an owner paused (SIGSTOP) past its lease loses its
 * shard to another node at a higher epoch, and after SIGCONT its appends are refused by the
 * shared store (PLX_CLUSTER_FENCED) and its frame is dropped as stale; the etcd leader is
 * killed while the nodes run and they keep serving; `plexus cluster leases --dump` reads the
 * leases from etcd while the cluster runs and after it stopped; the journals, read back from
 * disk, hold every acknowledged message once and no refused one.
 * Needs `npm run build` first and `etcd` on PATH.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initCluster } from '../../ts/cluster/init.js';
import { type EtcdCluster, etcdAvailable, startEtcd } from '../helpers/etcd.js';
import { runNode } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import {
  CLI,
  fencePausedOwner,
  freePorts,
  type Line,
  NodeProc,
  owners,
  patchConfig,
  sharedJournalHistory,
} from './actor-procs.js';

const SHARDS = 16;
const LEASE = { ttlMs: 2000, safetyMarginMs: 400, renewEveryMs: 500 };
const built = existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url));

/** The cluster command (the fixture over dist/) run to its end. */
function cli(args: string[]) {
  return runNode(CLI, args, { timeoutMs: 60_000 });
}

describe.skipIf(!etcdAvailable || !built)('cluster node processes on a real etcd (build dist first)', () => {
  let etcd: EtcdCluster | undefined;
  const procs: NodeProc[] = [];
  const dirs: string[] = [];

  beforeAll(async () => {
    etcd = await startEtcd();
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) await p.stop();
    await etcd?.stop();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  }, 120_000);

  it('init --membership etcd writes the etcd block and no authority node; gossip is accepted, kubernetes without a namespace is a usage mistake', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-etcd-init-'));
    dirs.push(dir);
    const urls = etcd!.clientUrls.join(',');
    const r = await cli([
      'init',
      '--dir',
      dir,
      '--id',
      'e1',
      '--shards',
      '8',
      '--nodes',
      'a,b',
      '--membership',
      'etcd',
      '--etcd-endpoints',
      urls,
      '--etcd-prefix',
      '/t/init/',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const cfg = JSON.parse(await readFile(join(dir, 'nodes', 'b', 'node.json'), 'utf8')) as Line;
    expect(cfg.membership).toEqual({ kind: 'etcd', endpoints: etcd!.clientUrls, prefix: '/t/init/' });
    expect(cfg.authority).toBeUndefined();
    expect(cfg.journal).toBe('shared');
    expect(cfg.storeHost).toBe('a');
    const g = await cli([
      'init',
      '--dir',
      join(dir, 'g'),
      '--id',
      'g',
      '--shards',
      '8',
      '--nodes',
      'a',
      '--membership',
      'gossip',
    ]);
    expect(g.code, g.stderr).toBe(0);
    const gossipCfg = JSON.parse(await readFile(join(dir, 'g', 'nodes', 'a', 'node.json'), 'utf8')) as Line;
    expect(gossipCfg.membership).toEqual({ kind: 'gossip', seeds: ['a'] });
    const k = await cli([
      'init',
      '--dir',
      join(dir, 'k'),
      '--id',
      'k',
      '--shards',
      '8',
      '--nodes',
      'a',
      '--membership',
      'kubernetes',
    ]);
    expect(k.code).toBe(2);
    expect(k.stderr).toContain('--kube-namespace');
    const noUrls = await cli([
      'init',
      '--dir',
      join(dir, 'n'),
      '--id',
      'n',
      '--shards',
      '8',
      '--nodes',
      'a',
      '--membership',
      'etcd',
    ]);
    expect(noUrls.code).toBe(2);
    const help = await cli(['leases', '--help']);
    expect(help.stdout).toContain('leases --config FILE --dump OUT');
  });

  it('fences a paused owner, keeps serving without the etcd leader, and dumps the leases; journals check out', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-etcd-procs-'));
    dirs.push(dir);
    const prefix = `/plexus-test/${process.pid}-${Date.now()}/`;
    const files = await initCluster({
      dir,
      id: 'c1',
      shards: SHARDS,
      nodes: ['a', 'b', 'c'],
      ports: await freePorts(3),
      membership: { kind: 'etcd', endpoints: etcd!.clientUrls, prefix },
      lease: LEASE,
      detector: { suspectAfterMs: 600, failedAfterMs: 1500 },
      heartbeatEveryMs: 100,
    });
    // b's lease clock runs at 1/10 speed: resumed after a pause, it still believes it owns its shards.
    await patchConfig(files.get('b')!, { leaseClockRate: 0.1 });
    for (const id of ['a', 'b', 'c']) procs.push(new NodeProc(id, files.get(id)!));
    const [a, b, c] = procs as [NodeProc, NodeProc, NodeProc];
    for (const p of procs) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases', 30_000);
    let view = new Map<number, { owner: string; epoch: string }>();
    await until(
      async () => {
        view = owners(await a.cmd({ cmd: 'status' }));
        return view.size === SHARDS;
      },
      { timeoutMs: 30_000, what: `a lease of every one of the ${SHARDS} shards` },
    );
    const ownedBy = (n: string) => [...view].filter(([, o]) => o.owner === n).map(([s]) => s);
    for (const n of ['a', 'b', 'c']) expect(ownedBy(n).length, n).toBeGreaterThan(0);

    // The dump of a running cluster, read from etcd.
    const dumpFile = join(dir, 'leases.json');
    const d1 = await cli(['leases', '--config', files.get('c')!, '--dump', dumpFile]);
    expect(d1.code, d1.stderr).toBe(0);
    const dump = JSON.parse(await readFile(dumpFile, 'utf8')) as Line;
    expect(dump).toMatchObject({ cluster: 'c1', shardCount: SHARDS, membership: 'etcd', source: 'etcd' });
    expect(dump.leases.map((l: Line) => l.shard)).toEqual([...Array(SHARDS).keys()]);
    for (const l of dump.leases as Line[]) {
      expect(l.owner).toBe(view.get(l.shard)!.owner);
      expect(BigInt(l.epoch)).toBeGreaterThanOrEqual(BigInt(view.get(l.shard)!.epoch));
      expect(dump.epochs[String(l.shard)]).toBe(l.epoch);
    }

    // Actors across the nodes, each acknowledgement after the durable append.
    const acked = new Map<string, string>();
    await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const from = procs[i % 3]!;
        const target = `vt:counter/x${i}`;
        const r = await from.cmd({ cmd: 'send', target, event: 'inc', id: `x-${i}` }, 30_000);
        expect(r.result, JSON.stringify(r)).toBe('processed');
        acked.set(`x-${i}`, target);
      }),
    );

    // b paused past its lease: another node takes b's shard at a higher epoch.
    const sF = ownedBy('b')[0]!;
    const e1 = BigInt(view.get(sF)!.epoch);
    const { actor, refused } = await fencePausedOwner({
      asker: a,
      owner: b,
      nodes: procs,
      shard: sF,
      epoch: e1,
      shards: SHARDS,
      acked,
    });

    // The etcd leader killed while the nodes run: leases are renewed through the other
    // members, and the cluster keeps serving.
    const before = owners(await a.cmd({ cmd: 'status' }));
    const leader = await etcd!.leader();
    await etcd!.kill(leader);
    const killedAt = Date.now();
    // A send may be refused while a lease changes hands (a fenced append is never
    // acknowledged, so the sender may send it again with the same id); each one is processed
    // in the end, and the journals below hold it once.
    const fencedRefusals: string[] = [];
    await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const from = procs[i % 3]!;
        const target = `vt:counter/y${i}`;
        await until(
          async () => {
            const r = await from.cmd({ cmd: 'send', target, event: 'inc', id: `y-${i}` }, 30_000);
            if (r.result !== 'processed') {
              expect(r.error, JSON.stringify(r)).toBe('PLX_RUNTIME_JOURNAL_FAILED');
              fencedRefusals.push(String(r.cause));
            }
            return r.result === 'processed';
          },
          { timeoutMs: 30_000, what: `y-${i} processed` },
        );
        acked.set(`y-${i}`, target);
      }),
    );
    for (const cause of fencedRefusals) expect(cause).toBe('PLX_CLUSTER_FENCED');
    // Two lease lengths later every shard is leased again (renewals and grants reach etcd
    // through the surviving members), no epoch went backwards.
    await until(() => Date.now() - killedAt >= 2 * LEASE.ttlMs, { timeoutMs: 10_000, what: 'two lease lengths' });
    const after = await until(
      async () => {
        const m = owners(await a.cmd({ cmd: 'status' }));
        return m.size === SHARDS && m;
      },
      { timeoutMs: 30_000, what: 'every shard leased after the etcd leader died' },
    );
    for (const [s, o] of before) expect(BigInt(after.get(s)!.epoch) >= BigInt(o.epoch), `shard ${s}`).toBe(true);
    const r2 = await c.cmd({ cmd: 'send', target: 'vt:counter/late', event: 'inc', id: 'late' }, 30_000);
    expect(r2.result).toBe('processed');
    acked.set('late', 'vt:counter/late');

    // Stop every node (SIGTERM drains), the store host (a) last; then read the journals.
    for (const p of [c, b, a]) await p.stop();
    for (const p of procs) expect(p.exited, `${p.id}: ${p.stderr.slice(-300)}`).toBe(0);
    const report = await sharedJournalHistory(dir, SHARDS);
    expect(report.problems).toEqual([]);
    for (const [id, target] of acked) expect(report.consumed.get(target)?.has(id), id).toBe(true);
    expect(refused.has('stale-1')).toBe(true);
    for (const id of refused) expect(report.consumed.get(actor)?.has(id), id).toBe(false);
    const epochs = report.epochs.get(sF)!;
    expect(epochs.at(-1)! > e1).toBe(true);

    // The dump of the stopped cluster still reads etcd: the epochs are all there.
    const d2 = await cli(['leases', '--config', files.get('a')!, '--dump', dumpFile]);
    expect(d2.code, d2.stderr).toBe(0);
    const stopped = JSON.parse(await readFile(dumpFile, 'utf8')) as Line;
    expect(BigInt(stopped.epochs[String(sF)])).toBeGreaterThan(e1);
  }, 240_000);
});
