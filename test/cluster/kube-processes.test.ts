/**
 * Cluster nodes as real processes (`plexus cluster node` from dist/) whose leases are
 * Kubernetes Lease objects: `plexus cluster init --membership kubernetes` writes the configs,
 * every node opens its own KubeAuthority through `@kubernetes/client-node` against the
 * Lease-API stand-in (HTTPS, bearer token; test/helpers/kube-lease-server.ts) that keeps the
 * objects in a real 3-member etcd. Actors run across the nodes; an owner paused (SIGSTOP) past
 * its lease loses its shard to another node at a higher epoch (the others saw its Lease
 * unchanged for a whole lease length), and after SIGCONT its appends are refused by the shared
 * store (PLX_CLUSTER_FENCED) and its frame is dropped as stale; `plexus cluster leases --dump`
 * reads the Lease objects; the journals, read back from disk, hold every acknowledged message
 * once and no refused one. Every process is stopped by its PID.
 * Needs `npm run build` first and `etcd` on PATH.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EtcdCluster, etcdAvailable, startEtcd } from '../helpers/etcd.js';
import { KubeLeaseServer } from '../helpers/kube-lease-server.js';
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
const NS = 'plexus-procs';
const LEASE = { ttlMs: 2000, safetyMarginMs: 400, renewEveryMs: 500 };
const built = existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url));

function cli(args: string[]) {
  return runNode(CLI, args, { timeoutMs: 60_000 });
}

describe.skipIf(!etcdAvailable || !built)(
  'cluster node processes on Kubernetes Leases (the stand-in on a real etcd; build dist first)',
  () => {
    let etcd: EtcdCluster | undefined;
    let server: KubeLeaseServer | undefined;
    const procs: NodeProc[] = [];
    let dir = '';

    beforeAll(async () => {
      etcd = await startEtcd();
      server = await KubeLeaseServer.start({ etcdEndpoints: etcd.clientUrls });
      dir = await mkdtemp(join(tmpdir(), 'plexus-kube-procs-'));
    }, 60_000);

    afterAll(async () => {
      for (const p of procs) await p.stop();
      await server?.close();
      await etcd?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
    }, 120_000);

    it('fences a paused owner and dumps the Lease objects; journals check out', async () => {
      const s = server as KubeLeaseServer;
      const kubeconfig = await s.writeKubeconfig(join(dir, 'kubeconfig'));
      const cdir = join(dir, 'c');
      const init = await cli([
        'init',
        '--dir',
        cdir,
        '--id',
        'c1',
        '--shards',
        String(SHARDS),
        '--nodes',
        'a,b,c',
        '--membership',
        'kubernetes',
        '--kube-namespace',
        NS,
        '--kubeconfig',
        kubeconfig,
      ]);
      expect(init.code, init.stderr).toBe(0);
      const files = new Map(
        init.stdout
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as Line)
          .map((l) => [l.node as string, l.config as string]),
      );
      const ports = await freePorts(3);
      const members = ['a', 'b', 'c'].map((id, i) => ({ id, address: `127.0.0.1:${ports[i]}` }));
      for (const [id, file] of files) {
        const cfg = JSON.parse(await readFile(file, 'utf8')) as Line;
        expect(cfg.membership).toEqual({ kind: 'kubernetes', namespace: NS, kubeconfig });
        expect(cfg.authority).toBeUndefined();
        await patchConfig(file, {
          members,
          membership: { ...cfg.membership, prefix: `p${process.pid}` },
          lease: LEASE,
          detector: { suspectAfterMs: 600, failedAfterMs: 1500 },
          heartbeatEveryMs: 100,
          cluster: { deliveryDeadlineMs: 30_000, retryBackoffMs: 50 },
          // b's lease clock runs at 1/10 speed: resumed after a pause, it still believes it owns its shards.
          ...(id === 'b' ? { leaseClockRate: 0.1 } : {}),
        });
      }
      for (const id of ['a', 'b', 'c']) procs.push(new NodeProc(id, files.get(id) as string));
      const [a, b, c] = procs as [NodeProc, NodeProc, NodeProc];
      for (const p of procs) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases', 60_000);
      let view = new Map<number, { owner: string; epoch: string }>();
      await until(
        async () => {
          view = owners(await a.cmd({ cmd: 'status' }));
          return view.size === SHARDS;
        },
        { timeoutMs: 30_000, what: `a lease of every one of the ${SHARDS} shards` },
      );
      const ownedBy = (n: string) => [...view].filter(([, o]) => o.owner === n).map(([x]) => x);
      for (const n of ['a', 'b', 'c']) expect(ownedBy(n).length, n).toBeGreaterThan(0);

      // The dump of the running cluster, read from the Lease objects.
      const dumpFile = join(dir, 'leases.json');
      const d1 = await cli(['leases', '--config', files.get('c') as string, '--dump', dumpFile]);
      expect(d1.code, d1.stderr).toBe(0);
      const dump = JSON.parse(await readFile(dumpFile, 'utf8')) as Line;
      expect(dump).toMatchObject({ cluster: 'c1', shardCount: SHARDS, membership: 'kubernetes', source: 'kubernetes' });
      expect(dump.leases.map((l: Line) => l.shard)).toEqual([...Array(SHARDS).keys()]);
      for (const l of dump.leases as Line[]) {
        expect(l.owner).toBe(view.get(l.shard)?.owner);
        expect(BigInt(l.epoch)).toBeGreaterThanOrEqual(BigInt(view.get(l.shard)?.epoch as string));
        expect(l.renewTime).toMatch(/\.\d{6}Z$/);
        expect(l.leaseDurationSeconds).toBe(2);
      }

      // Status from another process: the owners as the Lease objects hold them.
      const st = await cli(['status', '--config', files.get('b') as string]);
      expect(st.code, st.stderr).toBe(0);
      const stLines = st.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Line);
      expect(stLines[0]).toMatchObject({ cluster: 'c1', shardCount: SHARDS, membership: 'kubernetes' });
      expect(stLines.at(-1)).toMatchObject({ leased: SHARDS, free: 0 });

      // Actors across the nodes, each acknowledgement after the durable append.
      const acked = new Map<string, string>();
      await Promise.all(
        Array.from({ length: 18 }, async (_, i) => {
          const from = procs[i % 3] as NodeProc;
          const target = `vt:counter/x${i}`;
          const r = await from.cmd({ cmd: 'send', target, event: 'inc', id: `x-${i}` }, 30_000);
          expect(r.result, JSON.stringify(r)).toBe('processed');
          acked.set(`x-${i}`, target);
        }),
      );

      // b paused past its lease: another node takes b's shard at a higher epoch, once its own
      // authority has seen b's Lease unchanged for a whole lease length.
      const sF = ownedBy('b')[0] as number;
      const e1 = BigInt(view.get(sF)?.epoch as string);
      const { actor, refused } = await fencePausedOwner({
        asker: a,
        owner: b,
        nodes: procs,
        shard: sF,
        epoch: e1,
        shards: SHARDS,
        acked,
      });

      // The authorities raced on the shared objects and re-read after each 409.
      expect(s.count('PUT', 409)).toBeGreaterThan(0);
      expect(s.count('PUT', 200)).toBeGreaterThan(s.count('PUT', 409));

      // Stop every node by PID (SIGTERM drains), the store host (a) last; then read the journals.
      for (const p of [c, b, a]) await p.stop();
      for (const p of procs) expect(p.exited, `${p.id}: ${p.stderr.slice(-300)}`).toBe(0);
      const report = await sharedJournalHistory(cdir, SHARDS);
      expect(report.problems).toEqual([]);
      for (const [id, target] of acked) expect(report.consumed.get(target)?.has(id), id).toBe(true);
      expect(refused.has('stale-1')).toBe(true);
      for (const id of refused) expect(report.consumed.get(actor)?.has(id), id).toBe(false);
      expect(((report.epochs.get(sF) as bigint[]).at(-1) as bigint) > e1).toBe(true);

      // The Lease objects outlive the cluster: the dump of the stopped cluster keeps every epoch.
      const d2 = await cli(['leases', '--config', files.get('a') as string, '--dump', dumpFile]);
      expect(d2.code, d2.stderr).toBe(0);
      const stopped = JSON.parse(await readFile(dumpFile, 'utf8')) as Line;
      expect(BigInt(stopped.epochs[String(sF)])).toBeGreaterThan(e1);
      expect(Object.keys(stopped.epochs).length).toBe(SHARDS);
    }, 240_000);
  },
);
