// The Chronacta suite of `npm run bench` (bench/run.mjs calls runChronactaSuite;
// `--filter chronacta` runs it alone). It measures, in one run, durable appends of
// 100-byte events and reads of the whole log on three stores on this machine:
//
// - plexus Chronacta: `plexus chronacta serve` (dist/cli/main.js) in its own process,
//   fsync `batch` (group commit: an append is acknowledged once an fsync covers it);
//   appends of 1 and of 100 events per call (each client to its own stream) with 1, 16
//   and 64 concurrent clients, and ReadAll ($all) in pages of 1000 events;
// - etcd (a single member, `etcd` from PATH or PLEXUS_BENCH_ETCD; its WAL is fsynced
//   before a write is acknowledged): KV/Put of a 100-byte value, and KV/Txn of 100 puts
//   for the batches of 100, through the gRPC API (bench/chronacta/etcd.proto), and
//   KV/Range in pages of 1000 keys; "skipped: no etcd" when the binary is absent;
// - better-sqlite3 (WAL, synchronous=FULL): one INSERT per commit, and transactions of
//   100 INSERTs; SELECT in pages of 1000 rows. SQLite is a library: it runs inside the
//   load generator's process, on its thread, one connection.
//
// The load generator (bench/chronacta/load.mjs) drives both servers with the same client
// stack (grpc-js + proto-loader, one HTTP/2 connection per client, closed loops). Each
// case is a warm-up then equal sample windows: rates are the median over the windows,
// latencies (p50, p99) are over every call completed in them.
// PLEXUS_BENCH_CHRONACTA_SAMPLES and PLEXUS_BENCH_CHRONACTA_SAMPLE_MS change the windows;
// PLEXUS_BENCH_CHRONACTA_CLIENTS and PLEXUS_BENCH_CHRONACTA_READERS the client counts
// (comma-separated; READERS empty: no read cases).
//
// PLEXUS_BENCH_CHRONACTA_LOADERS=N (default 2) spreads every case's clients over N load
// processes that run each case in the same wall-clock slot (for Chronacta and etcd alike);
// their calls and latencies are added up. One load process costs about twice the server's
// CPU per single-append call (grpc-js), so it can bound the rates of every server alike.
//
// The table also gives each server's CPU time per call over the sample windows (read from
// /proc: it does not depend on the load generator) and the load processes' own, and from
// the server's figure a capacity: the events per second one core of the server would serve
// at that cost. The capacity ratio compares the servers without the load generator.
//
// Every process started here runs in its own process group, killed when the suite ends,
// when it runs past its time limit, and when this process exits or is interrupted.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { killGroups, median, run, startDaemon } from './processes.mjs';

const EVENT_BYTES = 100;
const CONCURRENCIES = [1, 16, 64];
const BATCHES = [1, 100];
const READERS = [1, 16];
const PAGE = 1000;
/** Time between the end of one case's windows and the start of the next case's slot. */
const GAP_MS = 500;
/** Load processes sharing the clients of each case (PLEXUS_BENCH_CHRONACTA_LOADERS). */
const DEFAULT_LOADERS = 2;
/** Time the load processes get to start before the first slot (with more than one). */
const STARTUP_MS = 3000;
const IMPL = {
  chronacta: 'plexus chronacta (gRPC)',
  etcd: 'etcd (gRPC)',
  sqlite: 'better-sqlite3 in-process (WAL, FULL)',
};

/** Temporary directories still present. */
const dirs = new Set();

function killAll() {
  killGroups();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs.clear();
}

function interrupted(signal) {
  killAll();
  process.exit(signal === 'SIGINT' ? 130 : 143);
}

/** A free port below the ephemeral range, from the one port picker (ts/net/ports.ts). */
async function freePort() {
  const { freePort: pick } = await import(new URL('../dist/net/ports.js', import.meta.url).href);
  return pick();
}

/** The etcd binary and its version, or undefined when there is none. */
function findEtcd() {
  const bin = process.env.PLEXUS_BENCH_ETCD ?? 'etcd';
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return undefined;
  const version = /etcd Version:\s*(\S+)/.exec(r.stdout)?.[1] ?? '?';
  return { bin, version };
}

function fmtRate(n, unit) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M${unit}`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k${unit}`;
  return `${n.toFixed(0)} ${unit}`;
}

function fmtMs(ms) {
  if (!Number.isFinite(ms)) return '-';
  return ms >= 100 ? `${ms.toFixed(0)} ms` : ms >= 10 ? `${ms.toFixed(1)} ms` : `${ms.toFixed(2)} ms`;
}

/** A comma-separated list of client counts from the environment (empty: none), or `dflt`. */
function listFromEnv(name, dflt) {
  const v = process.env[name];
  if (v === undefined) return dflt;
  const out = v === '' ? [] : v.split(',').map(Number);
  if (!out.every((n) => Number.isSafeInteger(n) && n >= 1 && n <= 1024)) {
    throw new Error(`${name} must be a comma-separated list of client counts (1 .. 1024), got "${v}"`);
  }
  return out;
}

function fmtUs(us) {
  if (!Number.isFinite(us)) return '-';
  return us >= 100 ? `${us.toFixed(0)} us` : `${us.toFixed(1)} us`;
}

function caseName(r) {
  if (r.op === 'read') return `read all, pages of ${PAGE}, ${r.conc} reader${r.conc > 1 ? 's' : ''}`;
  return `append ${EVENT_BYTES}B x${r.batch}, ${r.conc} client${r.conc > 1 ? 's' : ''}`;
}

/**
 * The cases of every load process added up: calls and events per window summed, latencies
 * pooled. A process that started a case late (after a quarter of its warm-up) is noted.
 */
function mergeParts(parts, { loaders, samples, sampleMs, warmupMs, notes }) {
  const byCase = new Map();
  for (const p of parts) {
    const k = `${p.impl}/${p.op}/${p.conc}/${p.batch}`;
    let c = byCase.get(k);
    if (!c) {
      c = {
        impl: p.impl,
        op: p.op,
        conc: p.conc,
        batch: p.batch,
        calls: [],
        events: [],
        lats: [],
        clients: 0,
        parts: 0,
        serverCpuUs: Number.NaN,
        loadCpuUs: 0,
      };
      byCase.set(k, c);
    }
    for (let w = 0; w < samples; w++) {
      c.calls[w] = (c.calls[w] ?? 0) + (p.calls[w] ?? 0);
      c.events[w] = (c.events[w] ?? 0) + (p.events[w] ?? 0);
    }
    for (const l of p.lats) c.lats.push(l);
    c.clients += p.clients;
    c.parts++;
    // Every process reads the same server over the same windows: the first reading counts.
    if (Number.isNaN(c.serverCpuUs) && Number.isFinite(p.serverCpuUs)) c.serverCpuUs = p.serverCpuUs;
    c.loadCpuUs += p.loadCpuUs;
    if (p.lateMs > warmupMs / 4) {
      notes.push(`  ${p.impl} ${p.op} x${p.batch} @${p.conc}: load process ${p.loader} started ${p.lateMs} ms late`);
    }
  }
  const out = [];
  for (const c of byCase.values()) {
    if (c.impl !== 'sqlite' && c.parts !== loaders) {
      notes.push(`  ${c.impl} ${c.op} x${c.batch} @${c.conc}: only ${c.parts} of ${loaders} load processes reported`);
    }
    const lat = Float64Array.from(c.lats).sort();
    const q = (x) => (lat.length === 0 ? Number.NaN : lat[Math.min(lat.length - 1, Math.floor(x * lat.length))]);
    out.push({
      impl: c.impl,
      op: c.op,
      conc: c.conc,
      batch: c.batch,
      callsPerSec: c.calls.map((n) => (n * 1000) / sampleMs),
      eventsPerSec: c.events.map((n) => (n * 1000) / sampleMs),
      p50Ms: q(0.5),
      p99Ms: q(0.99),
      calls: lat.length,
      // CPU time per call over the windows: the server's (from /proc) and the load processes'
      serverUsPerCall: c.serverCpuUs / lat.length,
      loadUsPerCall: c.loadCpuUs / lat.length,
    });
  }
  return out;
}

/**
 * Runs the suite. `log` prints progress lines. Resolves with the entries
 * ({suite, case, impl, opsPerSec: events/s, bytesPerSec: event bytes/s}), the targets
 * ({name, want, ratio, ok}, ratios: higher is better) and the table as text.
 */
export async function runChronactaSuite({ root, log = console.log } = {}) {
  const entries = [];
  const targets = [];
  const notes = [];
  const samples = Number(process.env.PLEXUS_BENCH_CHRONACTA_SAMPLES ?? 5);
  const sampleMs = Number(process.env.PLEXUS_BENCH_CHRONACTA_SAMPLE_MS ?? 800);
  const warmupMs = Math.max(500, sampleMs * 0.75);
  const concurrencies = listFromEnv('PLEXUS_BENCH_CHRONACTA_CLIENTS', CONCURRENCIES);
  const readers = listFromEnv('PLEXUS_BENCH_CHRONACTA_READERS', READERS);
  const loaders = Number(process.env.PLEXUS_BENCH_CHRONACTA_LOADERS ?? DEFAULT_LOADERS);
  if (!Number.isSafeInteger(loaders) || loaders < 1 || loaders > 16) {
    throw new Error(
      `PLEXUS_BENCH_CHRONACTA_LOADERS must be a whole number from 1 to 16, got ${process.env.PLEXUS_BENCH_CHRONACTA_LOADERS}`,
    );
  }
  const cli = resolve(root, 'dist/cli/main.js');
  if (!existsSync(cli)) {
    const text = 'chronacta: skipped: dist/cli/main.js is missing (npm run build)';
    log(text);
    return { entries, targets, table: text };
  }
  const etcd = findEtcd();
  if (!etcd) log('chronacta: etcd skipped: no etcd');
  const dir = mkdtempSync(join(tmpdir(), 'plexus-bench-chronacta-'));
  dirs.add(dir);
  const daemons = [];
  const results = [];
  let etcdAddr = null;
  let etcdPid;
  process.on('SIGINT', interrupted);
  process.on('SIGTERM', interrupted);
  process.once('exit', killAll);
  try {
    log('chronacta: starting plexus chronacta serve ...');
    const plexus = startDaemon(
      process.execPath,
      [
        cli,
        'chronacta',
        'serve',
        '--data',
        join(dir, 'chronacta'),
        '--port',
        '0',
        '--metrics-port',
        '0',
        '--fsync',
        'batch',
      ],
      /"event":"serving","address":"([^"]+)"/,
      { cwd: root },
    );
    daemons.push(plexus);
    const chronactaAddr = (await plexus.started)[1];
    if (etcd) {
      log(`chronacta: starting etcd ${etcd.version} (one member) ...`);
      const client = await freePort();
      const peer = await freePort();
      const e = startDaemon(
        etcd.bin,
        [
          '--name',
          'bench',
          '--data-dir',
          join(dir, 'etcd'),
          '--listen-client-urls',
          `http://127.0.0.1:${client}`,
          '--advertise-client-urls',
          `http://127.0.0.1:${client}`,
          '--listen-peer-urls',
          `http://127.0.0.1:${peer}`,
          '--initial-advertise-peer-urls',
          `http://127.0.0.1:${peer}`,
          '--initial-cluster',
          `bench=http://127.0.0.1:${peer}`,
          '--log-level',
          'info',
          '--logger',
          'zap',
        ],
        /serving client traffic|ready to serve client requests|serving insecure client requests/,
        { cwd: dir },
      );
      daemons.push(e);
      try {
        await e.started;
        etcdAddr = `127.0.0.1:${client}`;
        etcdPid = e.pid;
      } catch (err) {
        notes.push(`  etcd failed to start: ${err.message.slice(0, 500)}`);
      }
    }
    const cfg = {
      root,
      chronacta: chronactaAddr,
      etcd: etcdAddr,
      sqliteDir: join(dir, 'sqlite'),
      concurrencies,
      batches: BATCHES,
      readers,
      samples,
      sampleMs,
      warmupMs,
      eventBytes: EVENT_BYTES,
      serverPids: { chronacta: plexus.pid, etcd: etcdAddr ? etcdPid : undefined },
    };
    const slots =
      (cfg.chronacta ? BATCHES.length * concurrencies.length + readers.length : 0) +
      (cfg.etcd ? BATCHES.length * concurrencies.length + readers.length : 0);
    const slotMs = warmupMs + samples * sampleMs + GAP_MS;
    // Every load process starts its first case at the same wall-clock time, once all of
    // them have had time to load grpc-js and the protos.
    const startAt = Date.now() + (loaders > 1 ? STARTUP_MS : 0);
    log(
      `chronacta: ${loaders} load process${loaders > 1 ? 'es' : ''} (${samples} windows of ${sampleMs} ms per case after ${warmupMs} ms of warm-up) ...`,
    );
    const runs = await Promise.all(
      Array.from({ length: loaders }, (_, loader) =>
        run(
          process.execPath,
          [
            resolve(root, 'bench/chronacta/load.mjs'),
            JSON.stringify({
              ...cfg,
              sqliteDir: loader === 0 ? cfg.sqliteDir : null,
              loaders,
              loader,
              startAt: loaders > 1 ? startAt : undefined,
              gapMs: GAP_MS,
            }),
          ],
          { cwd: root, timeoutMs: STARTUP_MS + slots * slotMs + 120_000 },
        ),
      ),
    );
    const parts = [];
    for (const [loader, r] of runs.entries()) {
      for (const line of r.stdout.split('\n')) {
        const m = /^BENCH (\{.*\})\s*$/.exec(line);
        if (m) parts.push(JSON.parse(m[1]));
      }
      if (r.code !== 0 || !r.stdout.includes('DONE')) {
        const why = r.timedOut ? 'timed out' : `exit ${r.code}`;
        notes.push(`  load process ${loader} failed (${why}): ${r.stderr.trim().split('\n').slice(-8).join('\n    ')}`);
      }
    }
    results.push(...mergeParts(parts, { loaders, samples, sampleMs, warmupMs, notes }));
  } catch (err) {
    notes.push(`  failed: ${err.message.slice(0, 1500)}`);
  } finally {
    for (const d of daemons) await d.stop();
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
    process.off('exit', killAll);
    rmSync(dir, { recursive: true, force: true });
    dirs.delete(dir);
  }

  // ---------- entries and table ----------
  const rows = results.map((x) => ({
    ...x,
    case: caseName(x),
    eventsMedian: median(x.eventsPerSec),
    callsMedian: median(x.callsPerSec),
  }));
  for (const x of rows) {
    entries.push({
      suite: 'chronacta',
      case: x.case,
      impl: IMPL[x.impl],
      opsPerSec: x.eventsMedian,
      bytesPerSec: x.eventsMedian * EVENT_BYTES,
    });
  }
  let table = `\nchronacta: ${EVENT_BYTES}-byte events, durable; medians of ${samples} windows of ${sampleMs} ms; latency per call\n`;
  table += `  load: ${loaders === 1 ? 'one child process' : `${loaders} child processes sharing each case's clients`}, grpc-js for both servers; SQLite in ${loaders === 1 ? 'that' : 'the first'} process, one connection\n`;
  table += `  etcd: ${etcd ? (etcdAddr ? `${etcd.version}, one member, Put / Txn of 100 puts / Range` : 'failed to start') : 'skipped: no etcd'}\n`;
  table += `  ${'case'.padEnd(36)} ${'impl'.padEnd(38)} ${'events/s'.padStart(11)} ${'calls/s'.padStart(11)} ${'p50'.padStart(9)} ${'p99'.padStart(9)} ${'server CPU/call'.padStart(15)} ${'load CPU/call'.padStart(13)}\n`;
  for (const x of rows) {
    table += `  ${x.case.padEnd(36)} ${IMPL[x.impl].padEnd(38)} ${fmtRate(x.eventsMedian, 'ev/s').padStart(11)} ${fmtRate(x.callsMedian, '/s').padStart(11)} ${fmtMs(x.p50Ms).padStart(9)} ${fmtMs(x.p99Ms).padStart(9)} ${fmtUs(x.serverUsPerCall).padStart(15)} ${fmtUs(x.loadUsPerCall).padStart(13)}\n`;
  }
  // Capacity: events per second one core of the server would serve at the CPU cost per call
  // measured here. Unlike a rate, it does not depend on the load generator or on what else
  // the machine runs.
  const cap = (impl, batch) => {
    const x = rows.find((r) => r.impl === impl && r.op === 'append' && r.conc === 64 && r.batch === batch);
    return x && Number.isFinite(x.serverUsPerCall) && x.serverUsPerCall > 0
      ? (1e6 / x.serverUsPerCall) * batch
      : undefined;
  };
  for (const batch of BATCHES) {
    const c = cap('chronacta', batch);
    const e = cap('etcd', batch);
    if (c === undefined) continue;
    table += `  server capacity, append x${batch} @64 clients, events per CPU-second: chronacta ${fmtRate(c, 'ev/s')}`;
    table += e === undefined ? '\n' : `, etcd ${fmtRate(e, 'ev/s')}, ratio ${(c / e).toFixed(2)}x\n`;
  }
  if (notes.length > 0) table += `${notes.join('\n')}\n`;

  // ---------- targets (at 64 concurrent clients) ----------
  const get = (impl, op, conc, batch) =>
    rows.find((x) => x.impl === impl && x.op === op && x.conc === conc && x.batch === batch);
  const rate = (num, den, name, want) => {
    if (!num || !den) return;
    const ratio = num.eventsMedian / den.eventsMedian;
    targets.push({ name, want, ratio, ok: ratio >= want });
  };
  const p99 = (c, e, name) => {
    if (!c || !e) return;
    const ratio = e.p99Ms / c.p99Ms;
    targets.push({ name, want: 1, ratio, ok: ratio >= 1 });
  };
  const c1 = get('chronacta', 'append', 64, 1);
  const c100 = get('chronacta', 'append', 64, 100);
  const e1 = get('etcd', 'append', 64, 1);
  const e100 = get('etcd', 'append', 64, 100);
  rate(c1, e1, 'chronacta append x1 @64 clients vs etcd Put (events/s)', 1.5);
  rate(c100, e100, 'chronacta append x100 @64 clients vs etcd Txn of 100 puts (events/s)', 4);
  rate(c1, get('sqlite', 'append', 1, 1), 'chronacta append x1 @64 clients vs SQLite 1 insert/commit', 3);
  rate(c100, get('sqlite', 'append', 1, 100), 'chronacta append x100 @64 clients vs SQLite 100 inserts/commit', 3);
  p99(c1, e1, 'chronacta p99 append x1 @64 clients: etcd p99 / chronacta p99');
  p99(c100, e100, 'chronacta p99 append x100 @64 clients: etcd p99 / chronacta p99');
  return { entries, targets, table };
}
