/**
 * The pipelined receive path between two node processes (`plexus cluster node` from dist/,
 * Http2Wire, per-node journals with group-commit fsync): a burst of sends and asks into the
 * actors of one shard of node b reaches their mailboxes together (their macrosteps share the
 * shard's appends), b is killed with SIGKILL in the middle of it, and then:
 * - every message a saw acknowledged is in b's journal (nothing acknowledged is lost);
 * - every reply a got carries a count that b's journal holds (no reply left before its
 *   macrostep was appended);
 * - after b restarts, a's retries complete every send, and every message id is consumed once.
 * Needs `npx tsc -p tsconfig.build.json` first.
 */
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { rankedOwner } from '../../ts/cluster/authority.js';
import { shardOf } from '../../ts/core/index.js';
import { initProcCluster, journalHistory, type Line, NodeProc, ProcRun, statusWithAllLeases } from './actor-procs.js';

const SHARDS = 4;
const run = new ProcRun();
const procs = run.procs;

afterAll(() => run.cleanup());

const journalOf = (shard: number) => journalHistory(run.dir, 'b', [shard], true);

describe.skipIf(!existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url)))(
  'pipelined receive across node processes',
  () => {
    it('a burst into one shard survives SIGKILL of its owner: nothing acknowledged lost, no reply ahead of its journal, each message once', async () => {
      const files = await initProcCluster(run, 'plexus-cluster-pipelined-', {
        shards: SHARDS,
        nodes: ['a', 'b'],
        cluster: { deliveryDeadlineMs: 25_000, retryBackoffMs: 50 },
      });
      const a = new NodeProc('a', files.get('a')!);
      let b = new NodeProc('b', files.get('b')!);
      procs.push(a, b);
      for (const p of [a, b]) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases');
      const st = await statusWithAllLeases(a, SHARDS);
      // A shard of b that b ranks first for, so that b claims it again when it comes back.
      const shard = (st.leases as Line[]).find((l) => l.owner === 'b' && rankedOwner(['a', 'b'], l.shard) === 'b')
        ?.shard as number;
      expect(shard).toBeTypeOf('number');
      const targets: string[] = [];
      for (let i = 0; targets.length < 16; i++) {
        if (shardOf(`vt:counter/p${i}`, SHARDS) === shard) targets.push(`vt:counter/p${i}`);
      }

      // The burst: 8 sends to each of 16 counters (explicit ids) and one ask each.
      const sends = new Map<number, { target: string; id: string }>();
      const asks = new Map<number, string>();
      for (let k = 0; k < 8; k++) {
        for (const target of targets) {
          const id = `m-${target}-${k}`;
          sends.set(a.queue({ cmd: 'send', target, event: 'inc', id }), { target, id });
        }
        if (k === 3) {
          for (const target of targets) {
            asks.set(a.queue({ cmd: 'ask', target, event: 'inc', data: { reply: true }, timeoutMs: 30_000 }), target);
          }
        }
      }
      const acked = () => a.lines.filter((l) => l.ev === 'sent' && l.result !== undefined && sends.has(l.q));
      await a.wait(() => acked().length >= 24, 'the first acknowledgements', 20_000);
      b.signal('SIGKILL');
      await b.exit;
      const ackedBeforeKill = acked();
      const repliedBeforeKill = a.lines.filter((l) => l.ev === 'asked' && asks.has(l.q) && l.error === undefined);

      // What the crash left in b's journal.
      const left = await journalOf(shard);
      expect(left.problems).toEqual([]);
      for (const l of ackedBeforeKill) {
        const s = sends.get(l.q)!;
        expect(left.consumed.get(s.target)?.has(s.id), `${s.id} was acknowledged`).toBe(true);
      }
      const steps = (iri: string) => left.consumed.get(iri)?.size ?? 0;
      for (const l of repliedBeforeKill) {
        const target = asks.get(l.q)!;
        expect(l.data.n).toBeLessThanOrEqual(steps(target));
      }

      // b comes back; a's retries complete every send and every ask.
      b = new NodeProc('b', files.get('b')!);
      procs.push(b);
      await a.wait(
        () =>
          a.lines.filter((l) => (l.ev === 'sent' && sends.has(l.q)) || (l.ev === 'asked' && asks.has(l.q))).length ===
          sends.size + asks.size,
        'every send and ask answered',
        40_000,
      );
      const failed = a.lines.filter((l) => l.ev === 'sent' && sends.has(l.q) && l.error !== undefined);
      expect(failed).toEqual([]);
      await b.stop();
      const after = await journalOf(shard);
      expect(after.problems).toEqual([]);
      for (const { target, id } of sends.values()) {
        expect(after.consumed.get(target)?.has(id), `${id} consumed`).toBe(true);
      }
      // 8 sends and at most one ask per counter: the journal holds no message twice (checkHistory
      // reports a second consumption as a problem) and nothing else.
      for (const target of targets) expect(after.consumed.get(target)?.size).toBeGreaterThanOrEqual(8);
      for (const target of targets) expect(after.consumed.get(target)?.size).toBeLessThanOrEqual(9);
    }, 90_000);
  },
);
