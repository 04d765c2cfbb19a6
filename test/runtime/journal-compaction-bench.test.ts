/**
 * The CPU cost of journal compaction (docs/runtime.md, "Compaction"), run only with
 * PLEXUS_COMPACTION_BENCH=1:
 *
 *   PLEXUS_COMPACTION_BENCH=1 npx vitest run test/runtime/journal-compaction-bench.test.ts
 *
 * 32 actors append 1,000 macrosteps each (a snapshot every 100, as the runtime's default)
 * into a 4-shard journal on real files (fsync `never`, so that the figure is CPU, not disk
 * waits), with compaction off and at 1,024 and 4,096 dead records (far below the default,
 * so that it runs often), alternating, five runs each; it prints the median CPU time
 * (process.cpuUsage, user + system) per macrostep and the bytes left on disk.
 */
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openJournal } from '../../ts/runtime/log-journal.js';

const ACTORS = 32;
const STEPS = 1_000;

async function diskBytes(dir: string): Promise<number> {
  let n = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    n += e.isDirectory()
      ? await diskBytes(p)
      : await stat(p).then(
          (st) => st.size,
          () => 0,
        );
  }
  return n;
}

async function run(store: 'shards' | 'node', deadRecords: number): Promise<{ us: number; bytes: number }> {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-compaction-bench-'));
  try {
    const j = await openJournal(dir, {
      shardCount: 4,
      store,
      log: { fsync: 'never', segmentBytes: 1024 * 1024 },
      compaction: { deadRecords },
    });
    const actors = Array.from({ length: ACTORS }, (_, i) => `vt:bench/${i}`);
    const t = process.cpuUsage();
    await Promise.all(
      actors.map(async (iri) => {
        for (let seq = 1; seq <= STEPS; seq++) {
          await j.append(
            iri,
            {
              seq,
              time: seq,
              dispatchedThrough: seq - 1,
              messageId: `${iri}#${seq}`,
              event: { name: 'inc', data: { n: seq } },
              state: { count: seq, note: 'x'.repeat(64) },
              sends: [],
            },
            { expectedSeq: seq - 1 },
          );
          if (seq % 100 === 0) {
            await j.snapshot(iri, {
              seq,
              time: seq,
              dispatchedThrough: seq,
              state: { count: seq, note: 'x'.repeat(64) },
              dedup: [`${iri}#${seq}`],
              pending: [],
            });
          }
        }
      }),
    );
    await j.close();
    const d = process.cpuUsage(t);
    return { us: (d.user + d.system) / (ACTORS * STEPS), bytes: await diskBytes(dir) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

describe.skipIf(process.env.PLEXUS_COMPACTION_BENCH !== '1')(
  'journal compaction CPU cost (a measurement, skipped unless PLEXUS_COMPACTION_BENCH=1)',
  () => {
    it.each(['shards', 'node'] as const)(
      '%s layout',
      async (store) => {
        const thresholds = [0, 1024, 4096];
        const us = thresholds.map(() => [] as number[]);
        const bytes = thresholds.map(() => 0);
        await run(store, 0); // warm-up
        for (let i = 0; i < 5; i++) {
          for (let t = 0; t < thresholds.length; t++) {
            const r = await run(store, thresholds[t] as number);
            us[t]?.push(r.us);
            bytes[t] = r.bytes;
          }
        }
        const base = median(us[0] as number[]);
        for (let t = 0; t < thresholds.length; t++) {
          const m = median(us[t] as number[]);
          process.stdout.write(
            `${store} deadRecords ${thresholds[t]}: ${m.toFixed(1)} us CPU per macrostep (${((m / base - 1) * 100).toFixed(1)}%), ${bytes[t]} B on disk\n`,
          );
        }
        expect(bytes[1]).toBeLessThan(bytes[0] as number);
      },
      600_000,
    );
  },
);
