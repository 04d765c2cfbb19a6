/**
 * ActorClient from a separate process (test/cluster/fixtures/actor-client.mjs over dist/)
 * against three cluster node processes (`plexus cluster node` from dist/, mutual TLS on
 * loopback, a shared journal store), sending and asking steadily while one member is
 * SIGKILLed: every ask answers or fails with PLX_CLUSTER_DEADLINE after the deadline, none
 * hangs, and every acknowledged send is in the journals exactly once. Needs `npm run build`.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { runNode, type Started, startNode } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import {
  CLI,
  initProcCluster,
  type Line,
  NodeProc,
  ProcRun,
  sharedJournalHistory,
  sleep,
  statusWithAllLeases,
} from './actor-procs.js';

const CLIENT = fileURLToPath(new URL('./fixtures/actor-client.mjs', import.meta.url));
const SHARDS = 8;
const DEADLINE_MS = 4000;
const run = new ProcRun();
let client: Started | undefined;

afterAll(async () => {
  await client?.stop('SIGKILL');
  await run.cleanup();
}, 60_000);

describe.skipIf(!existsSync(new URL('../../dist/cluster/client.js', import.meta.url)))(
  'ActorClient in its own process while a member is SIGKILLed',
  () => {
    it('every ask answers or fails with the stable code after the deadline; acknowledged sends are journaled once', async () => {
      const files = await initProcCluster(run, 'plexus-client-procs-', {
        shards: SHARDS,
        nodes: ['a', 'b', 'c'],
        journal: 'shared',
      });
      const members: string[] = [];
      for (const id of ['a', 'b', 'c']) {
        const cfg = JSON.parse(await readFile(files.get(id)!, 'utf8')) as Line;
        members.push(cfg.members.find((m: Line) => m.id === id).address);
        run.procs.push(new NodeProc(id, files.get(id)!));
      }
      const [a, b, c] = run.procs as [NodeProc, NodeProc, NodeProc];
      await statusWithAllLeases(a, SHARDS, 20_000);
      // The client's certificate, from `plexus cluster client-cert`.
      const made = await runNode(CLI, ['client-cert', '--dir', run.dir, '--name', 'loadgen'], { timeoutMs: 30_000 });
      expect(made.code).toBe(0);
      const files_ = JSON.parse(made.stdout.trim()) as Line;
      expect(files_.name).toBe('loadgen.client.c1.plexus.internal');
      // A second time is refused: the files are there.
      const again = await runNode(CLI, ['client-cert', '--dir', run.dir, '--name', 'loadgen'], { timeoutMs: 30_000 });
      expect([again.code, again.stderr.split(' ')[0]]).toEqual([1, 'PLX_CLUSTER_EXISTS']);
      client = startNode(CLIENT, [
        JSON.stringify({
          members,
          cert: files_.cert,
          key: files_.key,
          ca: files_.ca,
          deadlineMs: DEADLINE_MS,
          workers: 6,
          actors: 24,
        }),
      ]);
      await client.line(/"ready":true/);
      const results = () =>
        client!
          .stdout()
          .split('\n')
          .filter((l) => l.startsWith('{"op"'))
          .map((l) => JSON.parse(l) as Line);
      await until(() => results().filter((r) => r.ok).length >= 60, { timeoutMs: 30_000, what: '60 answered calls' });
      const beforeKill = results().length;
      c.signal('SIGKILL');
      await c.exit;
      // The killed member's leases expire and a and b take its shards; the client keeps going.
      await sleep(6000);
      await until(() => results().filter((r) => r.ok).length >= beforeKill + 60, {
        timeoutMs: 30_000,
        what: '60 more answered calls after the kill',
      });
      client.child.stdin?.write('stop\n');
      // None hangs: the workers finish their last call within the deadline and the process ends.
      const exit = await Promise.race([client.ended, sleep(DEADLINE_MS + 15_000).then(() => 'hung' as const)]);
      expect(exit).not.toBe('hung');
      expect((exit as { code: number | null }).code).toBe(0);
      const done = client
        .stdout()
        .split('\n')
        .find((l) => l.includes('"done":true'));
      expect(done).toBeDefined();

      const all = results();
      const asks = all.filter((r) => r.op === 'ask');
      const sends = all.filter((r) => r.op === 'send');
      expect(asks.filter((r) => r.ok).length).toBeGreaterThan(30);
      expect(sends.filter((r) => r.ok).length).toBeGreaterThan(30);
      for (const r of asks) {
        if (r.ok) expect(r.name).toBe('counted');
        else {
          // The stable code, and only after the deadline (not much later: nothing hung).
          expect(r.code).toBe('PLX_CLUSTER_DEADLINE');
          expect(r.ms).toBeGreaterThanOrEqual(DEADLINE_MS - 50);
          expect(r.ms).toBeLessThan(DEADLINE_MS + 5000);
        }
      }
      for (const r of sends) if (!r.ok) expect(r.code).toBe('PLX_CLUSTER_DEADLINE');
      // Calls made to c while it died went to another member.
      expect(JSON.parse(done!).stats.failovers).toBeGreaterThan(0);

      await a.cmd({ cmd: 'status' });
      await b.stop();
      await a.stop();
      const report = await sharedJournalHistory(run.dir, SHARDS);
      // No message id consumed twice by its actor ...
      expect(report.problems).toEqual([]);
      // ... and every acknowledged send is there.
      const missing = sends
        .filter((r) => r.ok)
        .filter((r) => !(report.consumed.get(r.iri)?.has(r.id) ?? false))
        .map((r) => r.id);
      expect(missing).toEqual([]);
    }, 120_000);
  },
);
