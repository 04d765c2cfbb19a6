/**
 * Message order across moves with three `plexus cluster node` processes (Http2Wire, shared
 * store): a node streams numbered messages to one counter (many frames of the pair in flight,
 * taken into the counter's mailbox ahead of its macrosteps) while
 * 1. its table names a former owner, which forwards and redirects it mid-stream, and
 * 2. the counter's shard is handed from its owner to another node mid-stream;
 * then the journals are read back from disk: each counter consumed its messages in send order.
 * Needs `npx tsc -p tsconfig.build.json` first.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkHistory, readShard, type ShardHistory } from '../../ts/cluster/history.js';
import { shardOf } from '../../ts/core/index.js';
import { shardDir } from '../../ts/runtime/log-journal.js';
import { openLog } from '../../ts/storage/index.js';
import { until } from '../helpers/until.js';
import {
  initProcCluster,
  type Line,
  NodeProc,
  ProcRun,
  patchConfig,
  sleep,
  statusWithAllLeases,
} from './actor-procs.js';

const SHARDS = 16;
const run = new ProcRun();
afterAll(() => run.cleanup());

function iriIn(prefix: string, s: number): string {
  for (let i = 0; ; i++) if (shardOf(`${prefix}${i}`, SHARDS) === s) return `${prefix}${i}`;
}

/** Queues `ids` as sends to `target` on `p` at once (pipelined on the wire); their reply promises. */
function stream(p: NodeProc, target: string, ids: readonly string[]): Promise<Line>[] {
  return ids.map((id) => {
    const q = p.queue({ cmd: 'send', target, event: 'inc', id });
    return p.wait((l) => l.q === q, `send ${id}`, 60_000);
  });
}

const ids = (prefix: string, from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => `${prefix}-${from + i}`);

describe.skipIf(!existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url)))(
  'message order across moves (node processes)',
  () => {
    it('keeps a pair in send order across a forward with a redirect and across a hand-over of the shard', async () => {
      const files = await initProcCluster(run, 'plexus-move-order-', {
        shards: SHARDS,
        nodes: ['a', 'b', 'c'],
        journal: 'shared',
      });
      // No fsync: the counters work through their backlogs well inside one wire attempt (2 s).
      for (const f of files.values()) await patchConfig(f, { fsync: 'never' });
      for (const id of ['a', 'b', 'c']) run.procs.push(new NodeProc(id, files.get(id)!));
      const [a, b, c] = run.procs as [NodeProc, NodeProc, NodeProc];
      for (const p of run.procs) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases');
      const st = await statusWithAllLeases(a, SHARDS);
      const owner = new Map<number, Line>(st.leases.map((l: Line) => [l.shard, l]));
      expect(owner.size).toBe(SHARDS);
      const ofNode = (n: string) => [...owner.values()].filter((l) => l.owner === n).map((l) => l.shard as number);
      expect(ofNode('b').length).toBeGreaterThan(0);
      expect(ofNode('c').length).toBeGreaterThan(0);

      // 1. a's table names b for a shard of c: b forwards the first frames and redirects a,
      //    while the rest of the first batch is still on a's stream to b.
      const sC = ofNode('c')[0]!;
      const fwd = iriIn('vt:counter/fwd', sC);
      expect((await a.cmd({ cmd: 'route', shard: sC, owner: 'b', epoch: owner.get(sC)!.epoch })).ok).toBe(true);
      const first = stream(a, fwd, ids('f', 1, 150));
      await until(
        async () => (await a.cmd({ cmd: 'status' })).redirects.find((x: Line) => x.shard === sC)?.owner === 'c',
        {
          what: 'the redirect to c at a',
        },
      );
      const second = stream(a, fwd, ids('f', 151, 250));
      for (const r of await Promise.all([...first, ...second])) expect(r.result, JSON.stringify(r)).toBe('processed');
      expect((await b.cmd({ cmd: 'status' })).stats.forwarded).toBeGreaterThan(0);

      // 2. a streams to a counter of b; mid-stream b hands the shard to c (frames still in
      //    the counter's mailbox on b go there through b, later ones after them).
      const sB = ofNode('b')[0]!;
      const moved = iriIn('vt:counter/move', sB);
      const before = stream(a, moved, ids('m', 1, 400));
      // Mid-stream: the first 20 answered (bounded, so that a stuck stream fails below instead of hanging).
      await Promise.race([Promise.all(before.slice(0, 20)), sleep(30_000)]);
      expect((await b.cmd({ cmd: 'release', shard: sB, ms: 60_000 })).ok).toBe(true);
      const granted = await until(
        async () => {
          const g: Line = await c.cmd({ cmd: 'grant', shard: sB });
          return g.epoch !== undefined && g;
        },
        { what: `a grant of shard ${sB} to c`, intervalMs: 20 },
      );
      expect(granted.epoch).toBeDefined();
      const after = stream(a, moved, ids('m', 401, 600));
      for (const r of await Promise.all([...before, ...after])) expect(r.result, JSON.stringify(r)).toBe('processed');
      expect((await b.cmd({ cmd: 'status' })).held.some((l: Line) => l.shard === sB)).toBe(false);

      // Stop every node (the authority's, a, last) and read the shared journals back.
      for (const p of [...run.procs].reverse()) await p.stop();
      for (const p of run.procs) expect(p.exited, `${p.id}: ${p.stderr.slice(-300)}`).toBe(0);
      const histories: ShardHistory[] = [];
      for (const s of [sC, sB]) {
        const log = await openLog(shardDir(join(run.dir, 'shared'), s));
        histories.push(await readShard(s, log));
        await log.close();
      }
      const report = checkHistory(histories);
      expect(report.problems).toEqual([]);
      expect([...(report.consumed.get(fwd) ?? [])]).toEqual(ids('f', 1, 250));
      expect([...(report.consumed.get(moved) ?? [])]).toEqual(ids('m', 1, 600));
      // The shard of the second counter was written by b and then by c, at a greater epoch.
      expect(report.epochs.get(sB)!.length).toBeGreaterThanOrEqual(2);
    }, 120_000);
  },
);
