// The runtime suites of `npm run bench` (bench/run.mjs calls them):
//
// runtime-throughput (docs/runtime.md, "Measured"): 16 actor pairs pass one message back and
// forth, every message a journaled macrostep, for 1.5 s per run, three runs per row; the median
// rate and the macrosteps per fsync; then the log engine alone, 16 appenders of 100 bytes.
//
// runtime-compaction (docs/runtime.md, "Compaction"): 32 actors append 1,000 macrosteps each (a
// snapshot every 100, as the runtime's default) into a 4-shard journal on real files (fsync
// `never`, so that the figure is CPU, not disk waits), with compaction off and at 1,024 and 4,096
// dead records (far below the default, so that it runs often), alternating, five runs each; the
// median CPU time (process.cpuUsage, user + system) per macrostep and the bytes left on disk.
// A compacting journal that leaves no fewer bytes than one that does not compact fails the run.
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function tempDir(prefix) {
  return mkdtemp(join(tmpdir(), `plexus-bench-${prefix}-`));
}

export async function runRuntimeThroughputSuite({ root, log = console.log }) {
  const { Node, openJournal } = await import(resolve(root, 'dist/runtime/index.js'));
  const { openLog } = await import(resolve(root, 'dist/storage/index.js'));
  const RUN_MS = 1500;
  const entries = [];
  const dirs = [];
  let table = '\nruntime: durable actor messages, 16 pairs, medians of 3 runs of 1.5 s\n';
  const ball = {
    initial: () => 0,
    transition: (n, _e, ctx) => {
      const partner = ctx.self.endsWith('/a') ? ctx.self.replace(/\/a$/, '/b') : ctx.self.replace(/\/b$/, '/a');
      return { state: n + 1, sends: [{ target: partner, event: 'ball' }] };
    },
  };
  try {
    for (const [shards, fsync] of [
      [1, 'batch'],
      [4, 'batch'],
      [64, 'batch'],
      [1, 'never'],
    ]) {
      const rates = [];
      const groups = [];
      for (let run = 0; run < 3; run++) {
        let steps = 0;
        let syncs = 0;
        const dir = await tempDir('runtime');
        dirs.push(dir);
        const storage = await openJournal(dir, { shardCount: shards, log: { fsync, onSync: () => syncs++ } });
        const node = Node.builder(storage)
          .chart('vt:p', ball)
          .onMacrostep(() => steps++)
          .config({ snapshotEvery: 1000 })
          .build();
        const t0 = Date.now();
        for (let i = 0; i < 16; i++) void node.send(`vt:p${i}/a`, 'ball');
        await sleep(RUN_MS); // the measured interval
        rates.push(steps / ((Date.now() - t0) / 1000));
        groups.push(syncs === 0 ? 0 : steps / syncs);
        await node.stop({ timeoutMs: 1 });
        await storage.close();
      }
      const rate = median(rates);
      if (!(rate > 0)) throw new Error(`runtime shards=${shards} fsync=${fsync}: no macrostep in ${RUN_MS} ms`);
      entries.push({
        suite: 'runtime-throughput',
        case: `16 pairs shards=${shards} fsync=${fsync}`,
        impl: 'plexus',
        opsPerSec: rate,
      });
      table += `  shards=${String(shards).padEnd(3)} fsync=${fsync.padEnd(6)} ${String(Math.round(rate)).padStart(8)} macrosteps/s (runs ${rates.map(Math.round).join(', ')}), ${median(groups).toFixed(1)} per fsync\n`;
    }
    const rates = [];
    for (let run = 0; run < 3; run++) {
      const dir = await tempDir('log');
      dirs.push(dir);
      const l = await openLog(dir, { fsync: 'batch' });
      let n = 0;
      const t0 = Date.now();
      const end = t0 + RUN_MS;
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (Date.now() < end) {
            await l.append([new Uint8Array(100)]);
            n++;
          }
        }),
      );
      rates.push(n / ((Date.now() - t0) / 1000));
      await l.close();
    }
    const rate = median(rates);
    if (!(rate > 0)) throw new Error('log engine: no append in the measured interval');
    entries.push({
      suite: 'runtime-throughput',
      case: 'log engine 16 appenders 100 B fsync=batch',
      impl: 'plexus',
      opsPerSec: rate,
    });
    table += `  log engine alone, 16 appenders      ${String(Math.round(rate)).padStart(8)} appends/s (runs ${rates.map(Math.round).join(', ')})\n`;
  } finally {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  }
  log?.(table);
  return { entries, targets: [], table };
}

async function diskBytes(dir) {
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

export async function runRuntimeCompactionSuite({ root, log = console.log }) {
  const { openJournal } = await import(resolve(root, 'dist/runtime/index.js'));
  const ACTORS = 32;
  const STEPS = 1_000;
  async function run(store, deadRecords) {
    const dir = await tempDir('compaction');
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
  const entries = [];
  let table =
    '\nruntime: journal compaction, CPU per macrostep (32 actors x 1,000 steps, 4 shards, fsync never), medians of 5\n';
  for (const store of ['shards', 'node']) {
    const thresholds = [0, 1024, 4096];
    const us = thresholds.map(() => []);
    const bytes = thresholds.map(() => 0);
    await run(store, 0); // warm-up
    for (let i = 0; i < 5; i++) {
      for (let t = 0; t < thresholds.length; t++) {
        const r = await run(store, thresholds[t]);
        us[t].push(r.us);
        bytes[t] = r.bytes;
      }
    }
    if (!(bytes[1] < bytes[0])) {
      throw new Error(
        `${store} layout: compaction at 1024 dead records left ${bytes[1]} B, not fewer than ${bytes[0]} B without`,
      );
    }
    const base = median(us[0]);
    for (let t = 0; t < thresholds.length; t++) {
      const m = median(us[t]);
      entries.push({
        suite: 'runtime-compaction',
        case: `${store} deadRecords ${thresholds[t]}`,
        impl: 'plexus',
        opsPerSec: 1e6 / m,
      });
      table += `  ${store.padEnd(6)} deadRecords ${String(thresholds[t]).padEnd(5)} ${m.toFixed(1).padStart(7)} us CPU per macrostep (${((m / base - 1) * 100).toFixed(1)}%), ${bytes[t]} B on disk\n`;
    }
  }
  log?.(table);
  return { entries, targets: [], table };
}
