/**
 * The lease authority's host restarts while a shard owner is down (three `plexus cluster
 * node` processes from dist/, per-node journals, mutual TLS on loopback): the authority's
 * state file keeps the rule that a failed owner's shards wait for it, so none of them is
 * granted to a member whose journal lacks their entries, and no epoch is handed out twice.
 * When the owner returns it takes its shards back, with its journal (a counter continues).
 * Needs `npm run build` first.
 */
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { shardOf } from '../../ts/core/index.js';
import { initProcCluster, type Line, NodeProc, ProcRun, sleep, statusWithAllLeases } from './actor-procs.js';

const SHARDS = 16;
const TTL = 1500;
const run = new ProcRun();
afterAll(() => run.cleanup());

function iriIn(prefix: string, s: number): string {
  for (let i = 0; ; i++) if (shardOf(`${prefix}${i}`, SHARDS) === s) return `${prefix}${i}`;
}

const leasesOf = (st: Line) =>
  new Map<number, { owner: string; epoch: bigint }>(
    st.leases.map((l: Line) => [l.shard, { owner: l.owner, epoch: BigInt(l.epoch) }]),
  );

function start(id: string, file: string): NodeProc {
  const p = new NodeProc(id, file);
  run.procs.push(p);
  return p;
}

async function kill(p: NodeProc): Promise<void> {
  p.signal('SIGKILL');
  await p.exit;
}

describe.skipIf(!existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url)))(
  'a restart of the lease authority while an owner is down (per-node journals, processes)',
  () => {
    it('keeps the failed owner’s shards for it, reuses no epoch, and the owner takes them back with its journal', async () => {
      const files = await initProcCluster(run, 'plexus-authority-restart-', {
        shards: SHARDS,
        nodes: ['a', 'b', 'c'],
        journal: 'per-node',
      });
      const a = start('a', files.get('a')!);
      const b = start('b', files.get('b')!);
      const c = start('c', files.get('c')!);
      for (const p of [a, b, c]) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases', 30_000);
      const before = leasesOf(await statusWithAllLeases(a, SHARDS, 30_000));
      expect(before.size).toBe(SHARDS);
      const ofB = [...before].filter(([, l]) => l.owner === 'b').map(([s]) => s);
      expect(ofB.length).toBeGreaterThan(0);
      const maxBefore = [...before.values()].reduce((m, l) => (l.epoch > m ? l.epoch : m), 0n);

      // b's journal holds a counter at 2.
      const counter = iriIn('vt:counter/restart-', ofB[0]!);
      for (const n of [1, 2]) {
        const r = await c.cmd({ cmd: 'ask', target: counter, event: 'inc', data: { reply: true } }, 30_000);
        expect(r).toMatchObject({ name: 'counted', data: { n } });
      }

      // b goes down, then the authority's host dies and comes back: only its files remain.
      await kill(b);
      await kill(a);
      const a2 = start('a', files.get('a')!);
      await a2.wait((l) => l.ev === 'joined', 'the restarted authority', 30_000);
      const restartedAt = Date.now();

      // For three lease lengths (and until c is back and every shard of a and c with it), no
      // shard of b is granted to anyone, and every grant is at an epoch above all granted
      // before. (a2 hosts the authority: its view is the authority's.)
      const seen = new Map<number, { owner: string; epoch: bigint }>();
      for (;;) {
        const st = await a2.cmd({ cmd: 'status' });
        for (const [s, l] of leasesOf(st)) {
          expect(ofB, `shard ${s} of the failed owner b was granted to ${l.owner}`).not.toContain(s);
          expect(l.epoch, `shard ${s} got epoch ${l.epoch}, not above ${maxBefore}`).toBeGreaterThan(maxBefore);
          seen.set(s, l);
        }
        const othersBack = [...before].every(([s, l]) => l.owner === 'b' || seen.get(s)?.owner === l.owner);
        if (othersBack && Date.now() - restartedAt > 3 * TTL) break;
        if (Date.now() - restartedAt > 60_000)
          throw new Error(`shards of a and c not back: ${JSON.stringify([...seen])}`);
        await sleep(100); // the next look at the leases, for 3 TTL after the restart: the scenario's span
      }

      // b returns and takes its shards back, above every epoch so far, with its journal.
      const b2 = start('b', files.get('b')!);
      await b2.wait((l) => l.ev === 'joined', 'b again', 30_000);
      const after = leasesOf(await statusWithAllLeases(a2, SHARDS, 40_000));
      expect(after.size).toBe(SHARDS);
      let maxSeen = maxBefore;
      for (const l of seen.values()) if (l.epoch > maxSeen) maxSeen = l.epoch;
      for (const s of ofB) {
        expect(after.get(s)?.owner).toBe('b');
        expect(after.get(s)!.epoch).toBeGreaterThan(maxBefore);
      }
      expect(maxSeen).toBeGreaterThan(maxBefore);
      const r = await c.cmd({ cmd: 'ask', target: counter, event: 'inc', data: { reply: true } }, 30_000);
      expect(r).toMatchObject({ name: 'counted', data: { n: 3 } });
    }, 180_000);
  },
);
