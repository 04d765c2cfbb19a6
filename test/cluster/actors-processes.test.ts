/**
 * Three cluster nodes as real processes (`plexus cluster node` from dist/) on loopback with
 * mutual TLS and a shared journal store: actors on different nodes message each other,
 * forwarding with a redirect, the hop limit, the delivery deadline, and a SIGSTOPped owner
 * fenced on SIGCONT; then the journals are read back from disk and checked.
 * Needs `npm run build` first.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkHistory, readShard, type ShardHistory } from '../../ts/cluster/history.js';
import { initCluster } from '../../ts/cluster/init.js';
import { shardOf } from '../../ts/core/index.js';
import { openJournalShards } from '../../ts/runtime/journal-dir.js';
import { runNode } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import { CLI, dataDirOf, freePorts, type Line, NodeProc, patchConfig, sharedJournalHistory } from './actor-procs.js';

/** The cluster command (the fixture over dist/) run to its end; fails unless it exits 0. */
async function run(args: string[]): Promise<{ stdout: string }> {
  const r = await runNode(CLI, args, { timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`cluster ${args.join(' ')} ended with ${r.code ?? r.signal}: ${r.stderr}`);
  return r;
}
const SHARDS = 16;
const procs: NodeProc[] = [];
let dir = '';

afterAll(async () => {
  for (const p of procs) await p.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const shard = (iri: string) => shardOf(iri, SHARDS);

function iriIn(prefix: string, s: number): string {
  for (let i = 0; ; i++) if (shard(`${prefix}${i}`) === s) return `${prefix}${i}`;
}

async function status(p: NodeProc): Promise<Line> {
  return p.cmd({ cmd: 'status' });
}

function owners(st: Line): Map<number, { owner: string; epoch: string }> {
  return new Map(st.leases.map((l: Line) => [l.shard, { owner: l.owner, epoch: l.epoch }]));
}

describe.skipIf(!existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url)))(
  'actors across node processes (Http2Wire, shared store)',
  () => {
    it('delivers, forwards, refuses, times out and fences, with every acknowledged message journaled once', async () => {
      dir = await mkdtemp(join(tmpdir(), 'plexus-cluster-actors-'));
      const files = await initCluster({
        dir,
        id: 'c1',
        shards: SHARDS,
        nodes: ['a', 'b', 'c'],
        ports: await freePorts(3),
        journal: 'shared',
        lease: { ttlMs: 2000, safetyMarginMs: 400, renewEveryMs: 500 },
        detector: { suspectAfterMs: 600, failedAfterMs: 1500 },
        heartbeatEveryMs: 100,
      });
      // a: short delivery deadline; b: forwards nothing (hop limit 0) and its lease clock runs at 1/10 speed.
      await patchConfig(files.get('a')!, { cluster: { deliveryDeadlineMs: 800 } });
      await patchConfig(files.get('b')!, { cluster: { hopLimit: 0 }, leaseClockRate: 0.1 });
      for (const id of ['a', 'b', 'c']) procs.push(new NodeProc(id, files.get(id)!));
      const [a, b, c] = procs as [NodeProc, NodeProc, NodeProc];
      for (const p of procs) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases');
      let view = owners(await status(a));
      await until(
        async () => {
          view = owners(await status(a));
          return view.size === SHARDS;
        },
        { what: `a lease of every one of the ${SHARDS} shards` },
      );
      expect(view.size).toBe(SHARDS);
      const ownedBy = (n: string) => [...view].filter(([, o]) => o.owner === n).map(([s]) => s);
      for (const n of ['a', 'b', 'c']) expect(ownedBy(n).length).toBeGreaterThan(0);

      // `plexus cluster status` answers from another process.
      const st = await run(['status', '--config', files.get('c')!]);
      const lines = st.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Line);
      expect(lines.at(-1)).toMatchObject({ leased: SHARDS, free: 0 });

      // 1. cross-node messages, each acknowledged once processed durably
      const acked = new Map<string, string>();
      const sends: Promise<void>[] = [];
      for (let i = 0; i < 30; i++) {
        const from = procs[i % 3]!;
        const target = `vt:counter/x${i}`;
        const id = `x-${i}`;
        sends.push(
          from.cmd({ cmd: 'send', target, event: 'inc', id }).then((r) => {
            expect(r.result).toBe('processed');
            acked.set(id, target);
          }),
        );
      }
      await Promise.all(sends);
      const relayC = iriIn('vt:relay/c', ownedBy('c')[0]!);
      const counterB = iriIn('vt:counter/b', ownedBy('b')[0]!);
      await a.cmd({
        cmd: 'send',
        target: relayC,
        event: 'relay',
        data: { to: counterB, event: 'inc', data: { reply: true } },
      });
      await until(async () => (await a.cmd({ cmd: 'ask', target: relayC, event: 'report' })).data?.got?.counted === 1, {
        what: 'the reply at the relay',
      });

      // 2. a stale route on a (shard of b -> c): c forwards, and a's table learns b
      const sB = ownedBy('b')[1] ?? ownedBy('b')[0]!;
      expect((await a.cmd({ cmd: 'route', shard: sB, owner: 'c', epoch: view.get(sB)!.epoch })).ok).toBe(true);
      const fwdTarget = iriIn('vt:counter/fwd', sB);
      expect((await a.cmd({ cmd: 'send', target: fwdTarget, event: 'inc', id: 'fwd-1' })).result).toBe('processed');
      acked.set('fwd-1', fwdTarget);
      expect((await status(c)).stats.forwarded).toBeGreaterThanOrEqual(1);
      await until(async () => (await status(a)).redirects.find((x: Line) => x.shard === sB)?.owner === 'b', {
        what: 'the redirect to b at a',
      });

      // 3. a stale route on a (shard of c -> b): b may not forward (hop limit 0), a's actor gets error.communication
      const sC = ownedBy('c')[0]!;
      await a.cmd({ cmd: 'route', shard: sC, owner: 'b', epoch: view.get(sC)!.epoch });
      const relayA = iriIn('vt:relay/a', ownedBy('a')[0]!);
      await a.cmd({
        cmd: 'send',
        target: relayA,
        event: 'relay',
        data: { to: iriIn('vt:counter/h', sC), event: 'inc', id: 'hop' },
      });
      let errors: Line[] = [];
      errors = await until(
        async () => {
          const e: Line[] = (await a.cmd({ cmd: 'ask', target: relayA, event: 'report' })).data.errors;
          return e.length > 0 && e;
        },
        { what: 'error.communication for the hop limit' },
      );
      expect(errors[0]).toMatchObject({ code: 'PLX_CLUSTER_HOP_LIMIT', sendid: 'hop' });

      // 4. c paused: a's send to c's shard fails after a's 800 ms deadline, before c's lease ends
      const sC2 = ownedBy('c').find((s) => s !== sC) ?? sC;
      await a.cmd({ cmd: 'route', shard: sC, owner: 'c', epoch: view.get(sC)!.epoch });
      c.signal('SIGSTOP');
      const t0 = Date.now();
      await a.cmd({
        cmd: 'send',
        target: relayA,
        event: 'relay',
        data: { to: iriIn('vt:counter/late', sC2), event: 'inc', id: 'late' },
      });
      errors = await until(
        async () => {
          const e: Line[] = (await a.cmd({ cmd: 'ask', target: relayA, event: 'report' })).data.errors;
          return e.length >= 2 && e;
        },
        { what: 'error.communication for the deadline' },
      );
      expect(Date.now() - t0).toBeGreaterThanOrEqual(700);
      expect(errors[1]).toMatchObject({ code: 'PLX_CLUSTER_DEADLINE', sendid: 'late' });
      c.signal('SIGCONT');

      // 5. b paused past its lease while another node takes its shard; on SIGCONT b still
      //    believes it owns it (its lease clock is slow): its append is refused, its frame dropped.
      view = owners(await status(a));
      const sF = ownedBy('b')[0]!;
      const e1 = BigInt(view.get(sF)!.epoch);
      const actor = iriIn('vt:relay/z', sF);
      expect((await b.cmd({ cmd: 'send', target: actor, event: 'ping', id: 'before' })).result).toBe('processed');
      acked.set('before', actor);
      b.signal('SIGSTOP');
      let moved: { owner: string; epoch: string } | undefined;
      await until(
        async () => {
          moved = owners(await status(a)).get(sF);
          return moved !== undefined && moved.owner !== 'b' && BigInt(moved.epoch) > e1;
        },
        { timeoutMs: 20_000, what: 'the shard to move off b with a higher epoch' },
      );
      expect((await a.cmd({ cmd: 'send', target: actor, event: 'ping', id: 'after' })).result).toBe('processed');
      acked.set('after', actor);
      // Several stale sends are queued while b is stopped; b takes them before any heartbeat
      // answer can tell it the lease is gone, so its appends reach the store with epoch e1.
      const qSends = [1, 2, 3].map((k) => b.queue({ cmd: 'send', target: actor, event: 'ping', id: `stale-${k}` }));
      const qFrame = b.queue({
        cmd: 'frame',
        to: 'a',
        shard: sF,
        target: iriIn('vt:counter/zombie', ownedBy('a')[0]!),
      });
      b.signal('SIGCONT');
      const staleSends = await Promise.all(qSends.map((q) => b.wait((l) => l.q === q, 'stale send')));
      // A later one may already go to the new owner once b learnt the lease was lost: that is
      // a proper delivery. A refused one must never be in the journal.
      const refused = new Set<string>();
      staleSends.forEach((r, k) => {
        if (r.result === 'processed') acked.set(`stale-${k + 1}`, actor);
        else refused.add(`stale-${k + 1}`);
      });
      expect(staleSends[0]!.error).toBe('PLX_RUNTIME_JOURNAL_FAILED');
      expect(staleSends.some((r) => r.cause === 'PLX_CLUSTER_FENCED')).toBe(true);
      const frame = await b.wait((l) => l.q === qFrame, 'stale frame');
      expect(frame).toMatchObject({ verdict: 'stale', epoch: `${e1}` });

      // stop every node (SIGTERM drains) and read the journals back from disk
      // The authority's node (a) last, so the others can hand their shards over.
      for (const p of [...procs].reverse()) await p.stop();
      for (const p of procs)
        expect(p.exited, `${p.id}: ${JSON.stringify(p.lines.slice(-4))} ${p.stderr.slice(-300)}`).toBe(0);
      const report = await sharedJournalHistory(dir, SHARDS);
      expect(report.problems).toEqual([]);
      for (const [id, target] of acked) expect(report.consumed.get(target)?.has(id), id).toBe(true);
      expect(refused.has('stale-1')).toBe(true);
      for (const id of refused) expect(report.consumed.get(actor)?.has(id)).toBe(false);
      const epochs = report.epochs.get(sF)!;
      expect(epochs.length).toBeGreaterThanOrEqual(2);
      expect(epochs.at(-1)! > e1).toBe(true);

      // the dead-letter logs, listed by `plexus cluster dead-letters`
      const deadA = (await run(['dead-letters', dataDirOf(dir, 'a')])).stdout;
      expect(deadA).toContain('"reason":"stale-epoch"');
      const deadB = (await run(['dead-letters', dataDirOf(dir, 'b')])).stdout;
      expect(deadB).toContain('"reason":"hop-limit"');
    }, 120_000);

    it('answers --help for every subcommand', async () => {
      for (const sub of ['init', 'node', 'status', 'dead-letters']) {
        const r = await run([sub, '--help']);
        expect(r.stdout).toContain(`plexus cluster`);
        expect(r.stdout).toContain(sub);
      }
    });
  },
);

describe.skipIf(!existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url)))(
  'five node processes (per-node journals)',
  () => {
    it('spreads the shards, delivers across nodes, holds a paused owner’s messages until it returns, drains on SIGTERM; journals check out', async () => {
      const d = await mkdtemp(join(tmpdir(), 'plexus-cluster-five-'));
      const five: NodeProc[] = [];
      try {
        const ids = ['a', 'b', 'c', 'd', 'e'];
        const files = await initCluster({
          dir: d,
          id: 'c5',
          shards: SHARDS,
          nodes: ids,
          ports: await freePorts(5),
          heartbeatEveryMs: 100,
          lease: { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 },
          detector: { suspectAfterMs: 500, failedAfterMs: 1000 },
        });
        for (const id of ids) five.push(new NodeProc(id, files.get(id)!));
        for (const p of five) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases');
        const acked = new Map<string, string>();
        await Promise.all(
          five.flatMap((p, k) =>
            Array.from({ length: 20 }, async (_, i) => {
              const target = `vt:counter/v${(i * 7 + k) % 40}`;
              const id = `${p.id}-${i}`;
              const r = await p.cmd({ cmd: 'send', target, event: 'inc', id });
              expect(r.result).toBe('processed');
              acked.set(id, target);
            }),
          ),
        );
        const st = await five[0]!.cmd({ cmd: 'status' });
        expect(new Set(st.leases.map((l: Line) => l.owner)).size).toBe(5);
        // e paused: with per-node journals nobody else may take its shards, so a message to
        // one of them is held (not lost, not failed) until e is back.
        const [a5, e5] = [five[0]!, five[4]!];
        const eShard = st.leases.find((l: Line) => l.owner === 'e').shard as number;
        let heldTarget = '';
        for (let i = 0; ; i++) {
          heldTarget = `vt:counter/held${i}`;
          if (shard(heldTarget) === eShard) break;
        }
        e5.signal('SIGSTOP');
        await until(async () => !(await a5.cmd({ cmd: 'status' })).leases.some((l: Line) => l.shard === eShard), {
          what: "e's lease to expire",
        });
        const qHeld = a5.queue({ cmd: 'send', target: heldTarget, event: 'inc', id: 'held-1' });
        // Held by a's runtime until the shard has an owner; and no other member may be that
        // owner while e is away: the authority refuses them the shard, whose journal is in e's store.
        await until(async () => (await status(a5)).heldMessages === 1, { what: 'the message held on a' });
        const grant = await five[1]!.cmd({ cmd: 'grant', shard: eShard });
        expect([grant.error, grant.message]).toEqual([
          'PLX_CLUSTER_LEASE_HELD',
          expect.stringMatching(/waits for e\b/),
        ]);
        expect(a5.lines.some((l) => l.q === qHeld)).toBe(false);
        expect((await a5.cmd({ cmd: 'status' })).leases.some((l: Line) => l.shard === eShard)).toBe(false);
        e5.signal('SIGCONT');
        expect((await a5.wait((l) => l.q === qHeld, 'held delivery')).result).toBe('processed');
        acked.set('held-1', heldTarget);
        for (const p of [...five].reverse()) await p.stop();
        for (const p of five) expect(p.exited).toBe(0);
        const histories: ShardHistory[] = [];
        for (const id of ids) {
          const stores = await openJournalShards(join(dataDirOf(d, id), 'journal'));
          for (let s = 0; s < SHARDS; s++) {
            const log = await stores.shard(s);
            if (log === undefined) continue;
            const h = await readShard(s, log);
            if (h.records.length > 0) histories.push(h);
          }
          await stores.close();
        }
        // each shard's journal lives on one node only
        const perShard = new Map<number, number>();
        for (const h of histories) perShard.set(h.shard, (perShard.get(h.shard) ?? 0) + 1);
        for (const n of perShard.values()) expect(n).toBe(1);
        const report = checkHistory(histories);
        expect(report.problems).toEqual([]);
        expect(report.macrosteps).toBe(101);
        for (const [id, target] of acked) expect(report.consumed.get(target)?.has(id)).toBe(true);
      } finally {
        for (const p of five) await p.stop();
        await rm(d, { recursive: true, force: true });
      }
    }, 120_000);
  },
);
