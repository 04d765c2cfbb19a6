/**
 * Offline resharding with real node processes (`plexus cluster node` from dist/) on loopback
 * with mutual TLS and per-node journals: 1,000 counters on 64 shards take 1 to 3 `inc` each;
 * `plexus cluster reshard` is refused while the nodes run; the nodes are stopped by PID and
 * the cluster resharded to 128 shards; the nodes start again from the new directory's
 * configs, and every counter answers with its count plus one. The new journals, read back
 * from disk, are checked too. Needs `npm run build` first.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { shardOf } from '../../ts/core/index.js';
import { runNode } from '../helpers/processes.js';
import {
  CLI,
  initProcCluster,
  journalHistory,
  type Line,
  NodeProc,
  ProcRun,
  statusWithAllLeases,
} from './actor-procs.js';

const ACTORS = 1000;
const SHARDS = 64;
const built = existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url));
const run = new ProcRun();
let outRoot = '';

afterAll(async () => {
  await run.cleanup();
  if (outRoot) await rm(outRoot, { recursive: true, force: true });
});

const target = (i: number) => `vt:counter/r${i}`;
const incs = (i: number) => (i % 3) + 1;

/** Runs `work` over 0..n-1, `width` at a time. */
async function pool(n: number, width: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) await work(next++);
    }),
  );
}

describe.skipIf(!built)('plexus cluster reshard with node processes', () => {
  it(`reshards a stopped cluster of ${ACTORS} actors from ${SHARDS} to ${2 * SHARDS} shards; every actor resumes its state`, async () => {
    const files = await initProcCluster(run, 'plexus-reshard-procs-', { shards: SHARDS, nodes: ['a', 'b'] });
    for (const id of ['a', 'b']) run.procs.push(new NodeProc(id, files.get(id) as string));
    const [a, b] = run.procs as [NodeProc, NodeProc];
    await statusWithAllLeases(a, SHARDS, 30_000);

    await pool(ACTORS, 32, async (i) => {
      for (let k = 0; k < incs(i); k++) {
        const r = await a.cmd({ cmd: 'send', target: target(i), event: 'inc', id: `r${i}-${k}` }, 60_000);
        expect(r.result, JSON.stringify(r)).toBe('processed');
      }
    });

    // While the nodes run, their logs are held open: refused, nothing written.
    outRoot = await mkdtemp(join(tmpdir(), 'plexus-reshard-out-'));
    const out = join(outRoot, 'c1-128');
    const refused = await runNode(CLI, ['reshard', run.dir, out, '--json'], { timeoutMs: 60_000 });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('PLX_CLUSTER_RESHARD_RUNNING');
    expect(existsSync(out)).toBe(false);

    for (const p of [a, b]) await p.stop();
    const r = await runNode(CLI, ['reshard', run.dir, out, '--json'], { timeoutMs: 240_000 });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout.trim()) as Line;
    const sent = Array.from({ length: ACTORS }, (_, i) => incs(i)).reduce((x, y) => x + y, 0);
    expect(summary).toMatchObject({
      actors: ACTORS,
      shardsBefore: SHARDS,
      shardsAfter: 2 * SHARDS,
      layout: 'per-node',
    });
    expect(summary.entries).toBeGreaterThanOrEqual(sent);
    expect(summary.bytes).toBeGreaterThan(0);
    expect(r.stderr).toBe(''); // not a terminal: no progress bar

    // The new journals: every actor in its shard of 128, each journal linear.
    const all = Array.from({ length: 2 * SHARDS }, (_, s) => s);
    const ha = await journalHistory(out, 'a', all);
    const hb = await journalHistory(out, 'b', all);
    expect([...ha.problems, ...hb.problems]).toEqual([]);
    expect(ha.actors + hb.actors).toBe(ACTORS);
    expect(ha.macrosteps + hb.macrosteps).toBe(sent);

    // Restart on the new directory: its node configs are all a user needs.
    const a2 = new NodeProc('a', join(out, 'nodes/a/node.json'));
    const b2 = new NodeProc('b', join(out, 'nodes/b/node.json'));
    run.procs.push(a2, b2);
    const st = await statusWithAllLeases(a2, 2 * SHARDS, 30_000);
    // Each shard went back to the node whose journal holds it.
    const homeOf = new Map<number, string>();
    for (let i = 0; i < ACTORS; i++) {
      const s = shardOf(target(i), 2 * SHARDS);
      if (!homeOf.has(s)) homeOf.set(s, ha.consumed.has(target(i)) ? 'a' : 'b');
    }
    for (const l of st.leases as Line[]) {
      // Every lease of the new cluster is above every epoch the old one used.
      expect(BigInt(l.epoch)).toBeGreaterThan(BigInt(summary.epochCeiling));
      if (homeOf.has(l.shard)) expect(l.owner, `shard ${l.shard}`).toBe(homeOf.get(l.shard));
    }

    const wrong: string[] = [];
    await pool(ACTORS, 32, async (i) => {
      const via = i % 2 === 0 ? a2 : b2;
      const reply = await via.cmd(
        { cmd: 'ask', target: target(i), event: 'inc', data: { reply: true }, timeoutMs: 30_000 },
        60_000,
      );
      if (reply.name !== 'counted' || reply.data?.n !== incs(i) + 1)
        wrong.push(`${target(i)}: ${JSON.stringify(reply)}`);
    });
    expect(wrong).toEqual([]);
    for (const p of [a2, b2]) await p.stop();
    expect(a2.exited).toBe(0);
  }, 600_000);
});
