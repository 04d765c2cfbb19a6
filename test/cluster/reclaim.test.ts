/**
 * Per-node journals across real node processes: a member that comes back after SIGKILL takes
 * back every shard whose journal its store holds, also the shards it does not rank first for
 * (it got them while a member was missing); until then their messages are held, and no other
 * member takes them. Needs `npx tsc -p tsconfig.build.json` first.
 */
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { rankedOwner } from '../../ts/cluster/authority.js';
import { shardOf } from '../../ts/core/index.js';
import { until } from '../helpers/until.js';
import { initProcCluster, type Line, NodeProc, ProcRun } from './actor-procs.js';

const SHARDS = 16;
const run = new ProcRun();
const procs = run.procs;

afterAll(() => run.cleanup());

function iriIn(s: number): string {
  for (let i = 0; ; i++) if (shardOf(`vt:counter/r${i}`, SHARDS) === s) return `vt:counter/r${i}`;
}

async function leases(p: NodeProc): Promise<Map<number, string>> {
  const st = await p.cmd({ cmd: 'status' });
  return new Map((st.leases as Line[]).map((l) => [l.shard as number, l.owner as string]));
}

describe.skipIf(!existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url)))(
  'per-node journals: a restarted member takes its shards back',
  () => {
    it('after SIGKILL and restart, b owns again every shard it journaled, also those c ranks first for', async () => {
      const files = await initProcCluster(run, 'plexus-cluster-reclaim-', {
        shards: SHARDS,
        nodes: ['a', 'b', 'c'],
        detector: { suspectAfterMs: 500, failedAfterMs: 1000 },
      });
      // c is missing at first: after the grace period a and b claim every shard between them.
      const a = new NodeProc('a', files.get('a')!);
      let b = new NodeProc('b', files.get('b')!);
      procs.push(a, b);
      let view = await leases(a);
      await until(
        async () => {
          view = await leases(a);
          return view.size === SHARDS;
        },
        { timeoutMs: 20_000, what: 'a and b to hold every shard' },
      );
      expect(view.size).toBe(SHARDS);
      const ofB = [...view].filter(([, o]) => o === 'b').map(([s]) => s);
      // Every shard gets a journal (one message each).
      for (let s = 0; s < SHARDS; s++) {
        expect((await a.cmd({ cmd: 'send', target: iriIn(s), event: 'inc', id: `first-${s}` })).result).toBe(
          'processed',
        );
      }
      const c = new NodeProc('c', files.get('c')!);
      procs.push(c);
      await c.wait((l) => l.ev !== undefined, 'c started');
      await until(
        async () =>
          ((await a.cmd({ cmd: 'status' })).members as Line[]).some((m) => m.id === 'c' && m.status === 'alive'),
        { timeoutMs: 15_000, what: 'c alive in the view of a' },
      );
      // The shards of b that c now ranks first for: b does not rank first for them.
      const cFirst = ofB.filter((s) => rankedOwner(['a', 'b', 'c'], s) === 'c');
      expect(cFirst.length).toBeGreaterThan(0);

      b.signal('SIGKILL');
      await b.exit;
      await until(
        async () => {
          const v = await leases(a);
          return !ofB.some((s) => v.has(s));
        },
        { timeoutMs: 20_000, what: "b's leases to expire" },
      );
      // While b is down its shards stay free (no other member may take a journal it lacks),
      // and a message to one of them is held, not failed.
      const target = iriIn(cFirst[0] as number);
      const qHeld = a.queue({ cmd: 'send', target, event: 'inc', id: 'held-1' });
      // Held by a's runtime until the shard has an owner; and c, ranked first for it, may not
      // be that owner: the authority refuses it the shard, whose journal is in b's store.
      await until(async () => (await a.cmd({ cmd: 'status' })).heldMessages === 1, {
        what: 'the message held on a',
      });
      const grant = await c.cmd({ cmd: 'grant', shard: cFirst[0] });
      expect([grant.error, grant.message]).toEqual(['PLX_CLUSTER_LEASE_HELD', expect.stringMatching(/waits for b\b/)]);
      expect(a.lines.some((l) => l.q === qHeld)).toBe(false);
      const during = await leases(a);
      for (const s of ofB) expect(during.has(s)).toBe(false);

      b = new NodeProc('b', files.get('b')!);
      procs.push(b);
      let back = await leases(a);
      await until(
        async () => {
          back = await leases(a);
          return !ofB.some((s) => back.get(s) !== 'b');
        },
        { timeoutMs: 15_000, what: 'b to hold its shards again' },
      );
      for (const s of ofB) expect(back.get(s), `shard ${s}`).toBe('b');
      expect((await a.wait((l) => l.q === qHeld, 'the held message', 20_000)).result).toBe('processed');
      const r = await a.cmd({ cmd: 'ask', target, event: 'inc', data: { reply: true }, timeoutMs: 10_000 });
      expect(r.data.n).toBe(3);
    }, 90_000);
  },
);
