/**
 * Compaction is crash safe, with real processes and real files (fsync on): a child node
 * (the built dist/, written out below) sends to 12 counter actors from eight loops, with a
 * snapshot every 7 macrosteps and a compaction threshold of 40 dead records on segments of
 * 8 KiB, so that it compacts shards (and node-log lanes) all the time; it is killed with
 * SIGKILL at a seeded moment, several times on the same directory, in both layouts. After
 * each kill this process opens the journal and checks that every shard reads, that every
 * acknowledged message is in its actor's history once, and that each history is whole
 * (the snapshot's dedup window and the later macrosteps cover seq 1 .. last exactly once).
 * Needs `npx tsc -p tsconfig.build.json` first.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openJournal, shardDir } from '../../ts/runtime/log-journal.js';
import { openLog } from '../../ts/storage/index.js';
import { ROOT } from '../helpers/paths.js';
import { startNode, stopStarted } from '../helpers/processes.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';

const DIST = join(ROOT, 'dist/runtime/index.js');
const ACTORS = Array.from({ length: 12 }, (_, i) => `vt:k/${i}`);

const CHILD = `
const [distUrl, dir, store, tag] = process.argv.slice(2);
const { Node, openJournal } = await import(distUrl);
const storage = await openJournal(dir, {
  shardCount: 4,
  store,
  log: { fsync: 'batch', segmentBytes: 8192, logger: { warn() {} } },
  compaction: { deadRecords: 40 },
});
const chart = { initial: () => ({ count: 0 }), transition: (s) => ({ state: { count: s.count + 1 } }) };
const node = Node.builder(storage)
  .chart('vt:k/', chart)
  .config({ snapshotEvery: 7, dedupWindow: 1000000, idleAfter: 0 })
  .build();
process.stdout.write('ready\\n');
setInterval(() => process.stdout.write('stats ' + JSON.stringify(storage.compactionStats) + '\\n'), 20);
let i = 0;
await Promise.all(
  Array.from({ length: 8 }, async (_, w) => {
    for (;;) {
      const k = i++;
      const id = tag + '-' + k;
      const target = 'vt:k/' + ((k * 7 + w) % 12);
      await node.send(target, 'inc', { id });
      process.stdout.write('ack ' + id + ' ' + target + '\\n');
    }
  }),
);
`;

let work = '';
let child = '';

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'plexus-compaction-crash-'));
  child = join(work, 'child.mjs');
  await writeFile(child, CHILD);
});

afterAll(async () => {
  await stopStarted();
  if (work) await rm(work, { recursive: true, force: true });
});

interface Run {
  readonly acks: { id: string; target: string }[];
  readonly copied: number;
}

/** Runs the child on `dir` until it acknowledged `acks` messages (or 10 s passed), then kills it. */
async function runAndKill(dir: string, store: string, tag: string, acks: number, extraMs: number): Promise<Run> {
  const p = startNode(child, [pathToFileURL(DIST).href, dir, store, tag]);
  let count = 0;
  p.child.stdout?.on('data', (d: string) => {
    for (let i = d.indexOf('ack '); i >= 0; i = d.indexOf('ack ', i + 1)) count++;
  });
  try {
    const deadline = Date.now() + 10_000;
    await until(() => count >= acks || !p.running() || Date.now() >= deadline, {
      timeoutMs: 15_000,
      what: `${acks} acknowledgements or 10 s`,
    });
    // The kill comes a seeded few milliseconds later: this wait is the crash point.
    await new Promise((r) => setTimeout(r, extraMs));
  } finally {
    await p.stop('SIGKILL');
  }
  const { signal } = await p.ended;
  expect(signal, `child failed before the kill: ${p.stderr()}`).toBe('SIGKILL');
  const out = p.stdout();
  const lines = out.split('\n');
  lines.pop(); // a line cut by the kill
  const run: { acks: { id: string; target: string }[]; copied: number } = { acks: [], copied: 0 };
  for (const line of lines) {
    const parts = line.split(' ');
    if (parts[0] === 'ack' && parts.length === 3) run.acks.push({ id: parts[1] as string, target: parts[2] as string });
    else if (parts[0] === 'stats') run.copied = (JSON.parse(parts[1] as string) as { copied: number }).copied;
  }
  return run;
}

describe.skipIf(!existsSync(DIST))('journal compaction under SIGKILL, child processes', () => {
  it.each(['shards', 'node'] as const)(
    '%s layout: every acknowledged macrostep survives kills at any moment of a compaction',
    async (store) => {
      const dir = join(work, store);
      const r = rng(store === 'node' ? 11 : 7);
      const acked = new Map<string, Set<string>>();
      let copied = 0;
      for (let round = 0; round < 6; round++) {
        const run = await runAndKill(dir, store, `${store}${round}`, 300 + (r() % 500), r() % 15);
        copied += run.copied;
        for (const a of run.acks) {
          let s = acked.get(a.target);
          if (s === undefined) {
            s = new Set();
            acked.set(a.target, s);
          }
          s.add(a.id);
        }
        const j = await openJournal(dir, { log: { logger: { warn() {} } }, compaction: { deadRecords: 0 } });
        try {
          for (const iri of ACTORS) {
            const h = await j.history(iri);
            const ids = [...(h.snapshot?.dedup ?? []), ...h.records.map((x) => x.messageId)];
            // seq 1 .. last, each consumed by one message, none twice
            expect(ids.length).toBe(h.lastSeq);
            expect(new Set(ids).size).toBe(ids.length);
            const from = h.snapshot?.seq ?? 0;
            expect(h.records.map((x) => x.seq)).toEqual(
              Array.from({ length: h.records.length }, (_, k) => from + k + 1),
            );
            const last = h.records[h.records.length - 1];
            expect(last === undefined ? h.snapshot?.state : last.state).toEqual(
              h.lastSeq === 0 ? undefined : { count: h.lastSeq },
            );
            const have = new Set(ids);
            for (const id of acked.get(iri) ?? []) expect(have.has(id), `${iri} lost ${id}`).toBe(true);
          }
        } finally {
          await j.close();
        }
      }
      // the children did compact (copies were written, stores dropped their first segments)
      expect(copied).toBeGreaterThan(0);
      const stores =
        store === 'node'
          ? (await readdir(join(dir, 'node'))).filter((n) => n.startsWith('lane-')).map((n) => join(dir, 'node', n))
          : [0, 1, 2, 3].map((i) => shardDir(dir, i));
      let dropped = 0;
      for (const d of stores) {
        const log = await openLog(d, { logger: { warn() {} } });
        if (log.first > 1n) dropped++;
        await log.close();
      }
      expect(dropped).toBeGreaterThan(0);
    },
    120_000,
  );
});
