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
// The load generator (bench/chronacta/load.mjs) is one child process that drives both
// servers with the same client stack (grpc-js + proto-loader, one HTTP/2 connection per
// client, closed loops). Each case is a warm-up then equal sample windows: rates are the
// median over the windows, latencies (p50, p99) are over every call completed in them.
// PLEXUS_BENCH_CHRONACTA_SAMPLES and PLEXUS_BENCH_CHRONACTA_SAMPLE_MS change the windows.
//
// Every process started here runs in its own process group, killed when the suite ends,
// when it runs past its time limit, and when this process exits or is interrupted.
//
// The load generator is one thread: at 64 clients its own CPU time per call (grpc-js +
// protobufjs) can bound the rates of every server alike. bench/chronacta/cpu.mjs measures
// the Chronacta server's CPU time per append (and the client's), which does not depend on
// what else the machine runs.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { groups, killGroup, killGroups, median, run, track } from './processes.mjs';

const EVENT_BYTES = 100;
const CONCURRENCIES = [1, 16, 64];
const BATCHES = [1, 100];
const READERS = [1, 16];
const PAGE = 1000;
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

/**
 * Starts a long-running command in its own process group and resolves once `ready`
 * matches a line of its stdout or stderr (with the match), or rejects when it exits or
 * `timeoutMs` passes first. `stop()` ends the group: SIGTERM, then SIGKILL.
 */
function startDaemon(cmd, args, ready, { cwd, timeoutMs = 30_000 } = {}) {
  const child = spawn(cmd, args, { cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  track(child.pid);
  let out = '';
  let exited = false;
  const closed = new Promise((r) => child.on('close', r));
  child.on('close', () => {
    exited = true;
  });
  const stop = async () => {
    if (child.pid === undefined) return;
    if (!exited) {
      killGroup(child.pid, 'SIGTERM');
      await Promise.race([closed, new Promise((r) => setTimeout(r, 5000))]);
    }
    killGroup(child.pid);
    groups.delete(child.pid);
  };
  const started = new Promise((resolvePromise, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`not ready after ${timeoutMs} ms: ${out.slice(-1500)}`)),
      timeoutMs,
    );
    let seen = false;
    const onData = (c) => {
      out = (out + c).slice(-65536);
      if (seen) return;
      const m = ready.exec(out);
      if (m) {
        seen = true;
        clearTimeout(timer);
        resolvePromise(m);
      }
    };
    child.stdout.setEncoding('utf8').on('data', onData);
    child.stderr.setEncoding('utf8').on('data', onData);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited (${code}) before it was ready: ${out.slice(-1500)}`));
    });
  });
  return { started, stop, output: () => out };
}

/** A free TCP port on 127.0.0.1 (bound then released). */
async function freePort() {
  const { createServer } = await import('node:net');
  return new Promise((resolvePromise, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolvePromise(port));
    });
  });
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

function caseName(r) {
  if (r.op === 'read') return `read all, pages of ${PAGE}, ${r.conc} reader${r.conc > 1 ? 's' : ''}`;
  return `append ${EVENT_BYTES}B x${r.batch}, ${r.conc} client${r.conc > 1 ? 's' : ''}`;
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
      } catch (err) {
        notes.push(`  etcd failed to start: ${err.message.slice(0, 500)}`);
      }
    }
    const cfg = {
      root,
      chronacta: chronactaAddr,
      etcd: etcdAddr,
      sqliteDir: join(dir, 'sqlite'),
      concurrencies: CONCURRENCIES,
      batches: BATCHES,
      readers: READERS,
      samples,
      sampleMs,
      warmupMs,
      eventBytes: EVENT_BYTES,
    };
    log(
      `chronacta: load generator (${samples} windows of ${sampleMs} ms per case after ${warmupMs} ms of warm-up) ...`,
    );
    const r = await run(process.execPath, [resolve(root, 'bench/chronacta/load.mjs'), JSON.stringify(cfg)], {
      cwd: root,
      timeoutMs: 240_000,
    });
    for (const line of r.stdout.split('\n')) {
      const m = /^BENCH (\{.*\})\s*$/.exec(line);
      if (m) results.push(JSON.parse(m[1]));
    }
    if (r.code !== 0 || !r.stdout.includes('DONE')) {
      const why = r.timedOut ? 'timed out' : `exit ${r.code}`;
      notes.push(`  load generator failed (${why}): ${r.stderr.trim().split('\n').slice(-8).join('\n    ')}`);
    }
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
  table += `  load: one child process, grpc-js for both servers; SQLite in that process, one connection\n`;
  table += `  etcd: ${etcd ? (etcdAddr ? `${etcd.version}, one member, Put / Txn of 100 puts / Range` : 'failed to start') : 'skipped: no etcd'}\n`;
  table += `  ${'case'.padEnd(36)} ${'impl'.padEnd(38)} ${'events/s'.padStart(11)} ${'calls/s'.padStart(11)} ${'p50'.padStart(9)} ${'p99'.padStart(9)}\n`;
  for (const x of rows) {
    table += `  ${x.case.padEnd(36)} ${IMPL[x.impl].padEnd(38)} ${fmtRate(x.eventsMedian, 'ev/s').padStart(11)} ${fmtRate(x.callsMedian, '/s').padStart(11)} ${fmtMs(x.p50Ms).padStart(9)} ${fmtMs(x.p99Ms).padStart(9)}\n`;
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
