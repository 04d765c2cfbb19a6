/**
 * Group commit across the shards of a node (the node-wide journal log) between two node
 * processes: a burst of sends into actors of every shard node b owns, so that macrosteps of
 * many shards share writes; b is killed with SIGKILL in the middle. Every message a saw
 * acknowledged is in b's journal, each shard's history checks out, and after b restarts a's
 * retries complete every send, each message consumed exactly once.
 * Needs `npx tsc -p tsconfig.build.json` first.
 */
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { shardOf } from '../../ts/core/index.js';
import { NODE_LOG_DIR } from '../../ts/runtime/journal-dir.js';
import {
  dataDirOf,
  initProcCluster,
  journalHistory,
  type Line,
  NodeProc,
  ProcRun,
  statusWithAllLeases,
} from './actor-procs.js';

const SHARDS = 16;
const run = new ProcRun();
const procs = run.procs;

afterAll(() => run.cleanup());

const journalOfB = (shards: number[]) => journalHistory(run.dir, 'b', shards);

describe.skipIf(!existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url)))(
  'group commit across shards, node processes',
  () => {
    it('a burst into every shard of b survives SIGKILL of b: nothing acknowledged lost, each message once', async () => {
      const files = await initProcCluster(run, 'plexus-cluster-group-commit-', { shards: SHARDS, nodes: ['a', 'b'] });
      const a = new NodeProc('a', files.get('a')!);
      let b = new NodeProc('b', files.get('b')!);
      procs.push(a, b);
      for (const p of [a, b]) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases');
      const st = await statusWithAllLeases(a, SHARDS);
      const ofB = (st.leases as Line[]).filter((l) => l.owner === 'b').map((l) => l.shard as number);
      expect(ofB.length).toBeGreaterThan(1);
      // 4 counters in each shard of b
      const targets: string[] = [];
      for (const s of ofB) {
        let n = 0;
        for (let i = 0; n < 4; i++) {
          if (shardOf(`vt:counter/g${i}`, SHARDS) === s) {
            targets.push(`vt:counter/g${i}`);
            n++;
          }
        }
      }
      const sends = new Map<number, { target: string; id: string }>();
      for (let k = 0; k < 12; k++) {
        for (const target of targets) {
          const id = `m-${target}-${k}`;
          sends.set(a.queue({ cmd: 'send', target, event: 'inc', id }), { target, id });
        }
      }
      const acked = () => a.lines.filter((l) => l.ev === 'sent' && l.result !== undefined && sends.has(l.q));
      await a.wait(() => acked().length >= targets.length * 2, 'the first acknowledgements', 20_000);
      b.signal('SIGKILL');
      await b.exit;
      const ackedBeforeKill = acked();
      expect(ackedBeforeKill.length).toBeGreaterThanOrEqual(targets.length * 2);

      // b's journal is one node-wide log, and it holds every acknowledged message.
      expect((await readdir(join(dataDirOf(run.dir, 'b'), 'journal', NODE_LOG_DIR))).length).toBeGreaterThan(0);
      const left = await journalOfB(ofB);
      expect(left.problems).toEqual([]);
      for (const l of ackedBeforeKill) {
        const s = sends.get(l.q)!;
        expect(left.consumed.get(s.target)?.has(s.id), `${s.id} was acknowledged`).toBe(true);
      }

      b = new NodeProc('b', files.get('b')!);
      procs.push(b);
      await a.wait(
        () => a.lines.filter((l) => l.ev === 'sent' && sends.has(l.q)).length === sends.size,
        'every send answered',
        45_000,
      );
      expect(a.lines.filter((l) => l.ev === 'sent' && sends.has(l.q) && l.error !== undefined)).toEqual([]);
      await b.stop();
      const after = await journalOfB(ofB);
      expect(after.problems).toEqual([]);
      for (const { target, id } of sends.values()) {
        expect(after.consumed.get(target)?.has(id), `${id} consumed`).toBe(true);
      }
      // exactly the 12 sends per counter: none twice (checkHistory reports a second consumption), none else
      for (const target of targets) expect(after.consumed.get(target)?.size).toBe(12);
    }, 120_000);
  },
);
