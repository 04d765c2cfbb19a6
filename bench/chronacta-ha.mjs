// The Chronacta HA suite of `npm run bench` (bench/run.mjs calls runChronactaHaSuite;
// `--filter chronacta-ha` runs it alone; `node bench/chronacta-ha.mjs` too). It measures,
// in one run on this machine, two 3-member clusters on loopback:
//
// - plexus Chronacta in cluster mode: `plexus chronacta cluster init --members 3` into a
//   temporary directory, then three `plexus chronacta serve --cluster` processes
//   (dist/cli/main.js) with the default Raft timeouts (tick 100 ms);
// - etcd (`etcd` from PATH or PLEXUS_BENCH_ETCD), three members, each with its own data
//   directory, `--initial-cluster` on loopback ports, default timeouts (heartbeat 100 ms,
//   election 1000 ms); "skipped: no etcd" when the binary is absent.
//
// Throughput and latency: the leader of each cluster (found through Chronacta's
// ClusterService.GetStatus and etcd's maintenance status) is driven by the Chronacta
// suite's load generator (bench/chronacta/load.mjs, grpc-js for both, in its own
// processes): appends of 1 and of 100 100-byte events per call (etcd: Put, and Txn of 100
// puts) with 1, 16 and 64 concurrent clients; rates are medians over the sample windows,
// p50/p99 over every call completed in them. Committed means acknowledged by the leader
// once a majority holds it.
//
// Failover (bench/chronacta/failover.mjs, its own process): a writer appends through a
// client addressed to a follower (Chronacta: keyed appends, following NOT_LEADER
// redirects; etcd: puts, which followers forward); the leader is SIGKILLed by its PID, and
// the time from the kill to the first acknowledged append after it is the failover time.
//
// PLEXUS_BENCH_CHRONACTA_HA_SAMPLES, PLEXUS_BENCH_CHRONACTA_HA_SAMPLE_MS,
// PLEXUS_BENCH_CHRONACTA_HA_CLIENTS (comma-separated) and PLEXUS_BENCH_CHRONACTA_HA_LOADERS
// (load processes sharing each case's clients, default 2) change the windows;
// PLEXUS_BENCH_CHRONACTA_HA_GROUP_COMMIT_BYTES=N starts the members with --group-commit-bytes N.
//
// Every process started here runs in its own process group, killed when the suite ends,
// when it runs past its time limit, and when this process exits or is interrupted.
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { killGroups, median, run, startDaemon } from './processes.mjs';

const EVENT_BYTES = 100;
const CONCURRENCIES = [1, 16, 64];
const BATCHES = [1, 100];
const GAP_MS = 500;
const DEFAULT_LOADERS = 2;
// Warm-up slots per cluster before its first measured case: appends at 64 clients, batches of
// 1, 100, 1 (about 15 s). A Chronacta member reaches its steady CPU per append only after
// V8 has optimised its hot functions, which takes seconds of load (docs/chronacta-ha.md).
const DEFAULT_WARM_SLOTS = 3;
const STARTUP_MS = 3000;
const FAILOVER_TARGET_MS = 3000;
const IMPL = {
  chronacta: 'plexus chronacta, 3 members (gRPC)',
  etcd: 'etcd, 3 members (gRPC)',
};

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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Ports the nodes bind after they are written into their configs: below the ephemeral range (ts/net/ports.ts). */
const { freePorts } = await import(new URL('../dist/net/ports.js', import.meta.url).href);

/** `--group-commit-bytes` of the members (PLEXUS_BENCH_CHRONACTA_HA_GROUP_COMMIT_BYTES; default: not given, off). */
const GROUP_COMMIT_BYTES = process.env.PLEXUS_BENCH_CHRONACTA_HA_GROUP_COMMIT_BYTES ?? '';

function findEtcd() {
  const bin = process.env.PLEXUS_BENCH_ETCD ?? 'etcd';
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return undefined;
  const version = /etcd Version:\s*(\S+)/.exec(r.stdout)?.[1] ?? '?';
  return { bin, version };
}

function listFromEnv(name, dflt) {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const out = v.split(',').map(Number);
  if (!out.every((n) => Number.isSafeInteger(n) && n >= 1 && n <= 1024)) {
    throw new Error(`${name} must be a comma-separated list of client counts (1 .. 1024), got "${v}"`);
  }
  return out;
}

function fmtRate(n, unit) {
  if (!Number.isFinite(n)) return '-';
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M${unit}`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k${unit}`;
  return `${n.toFixed(0)} ${unit}`;
}

function fmtMs(ms) {
  if (!Number.isFinite(ms)) return '-';
  return ms >= 100 ? `${ms.toFixed(0)} ms` : ms >= 10 ? `${ms.toFixed(1)} ms` : `${ms.toFixed(2)} ms`;
}

/** Polls `f` until it returns something other than undefined, or throws after `ms`. */
async function until(f, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

// ---------- the Chronacta cluster ----------

async function startChronacta(root, cli, dir, log) {
  const ports = await freePorts(6);
  const adv = ports.slice(0, 3).map((p) => `127.0.0.1:${p}`);
  const raft = ports.slice(3).map((p) => `127.0.0.1:${p}`);
  await promisify(execFile)(process.execPath, [
    cli,
    'chronacta',
    'cluster',
    'init',
    '--members',
    '3',
    '--root',
    dir,
    '--advertise',
    adv.join(','),
    '--raft',
    raft.join(','),
  ]);
  log('chronacta-ha: starting three plexus chronacta serve --cluster ...');
  const members = [1, 2, 3].map((id) => {
    const d = startDaemon(
      process.execPath,
      [
        cli,
        'chronacta',
        'serve',
        '--cluster',
        '--data',
        join(dir, `node-${id}`),
        '--metrics-port',
        '0',
        ...(GROUP_COMMIT_BYTES ? ['--group-commit-bytes', GROUP_COMMIT_BYTES] : []),
      ],
      /"event":"serving","address":"([^"]+)"/,
      { cwd: root },
    );
    return { id, address: adv[id - 1], daemon: d, pid: d.pid };
  });
  await Promise.all(members.map((m) => m.daemon.started));
  const { ChronactaClient } = await import(pathToFileURL(resolve(root, 'dist/chronacta/client.js')).href);
  for (const m of members) m.client = new ChronactaClient(m.address, { deadlineMs: 2000 });
  return members;
}

async function chronactaLeader(members, ms = 20_000) {
  return until(
    async () => {
      for (const m of members) {
        const s = await m.client.clusterStatus().catch(() => undefined);
        if (s?.acceptingWrites) return m;
      }
      return undefined;
    },
    ms,
    'a Chronacta leader accepting writes',
  );
}

// ---------- the etcd cluster ----------

async function startEtcd(etcd, dir, log) {
  const ports = await freePorts(6);
  const names = ['m1', 'm2', 'm3'];
  const peer = (i) => `http://127.0.0.1:${ports[3 + i]}`;
  const initial = names.map((n, i) => `${n}=${peer(i)}`).join(',');
  log(`chronacta-ha: starting etcd ${etcd.version}, three members ...`);
  const members = names.map((name, i) => {
    const client = `http://127.0.0.1:${ports[i]}`;
    const d = startDaemon(
      etcd.bin,
      [
        '--name',
        name,
        '--data-dir',
        join(dir, `etcd-${name}`),
        '--listen-client-urls',
        client,
        '--advertise-client-urls',
        client,
        '--listen-peer-urls',
        peer(i),
        '--initial-advertise-peer-urls',
        peer(i),
        '--initial-cluster',
        initial,
        '--initial-cluster-state',
        'new',
        '--initial-cluster-token',
        `plexus-bench-${process.pid}`,
        '--logger',
        'zap',
        '--log-level',
        'info',
      ],
      /ready to serve client requests|serving client traffic|serving insecure client requests/,
      { cwd: dir },
    );
    return { name, address: `127.0.0.1:${ports[i]}`, url: client, daemon: d, pid: d.pid };
  });
  await Promise.all(members.map((m) => m.daemon.started));
  return members;
}

/** The etcd member that is the leader, from the members' maintenance status (HTTP gateway). */
async function etcdLeader(members, ms = 20_000) {
  return until(
    async () => {
      const seen = [];
      for (const m of members) {
        const r = await fetch(`${m.url}/v3/maintenance/status`, {
          method: 'POST',
          body: '{}',
          signal: AbortSignal.timeout(1000),
        }).catch(() => undefined);
        if (!r?.ok) continue;
        const s = await r.json();
        seen.push({ m, id: s.header?.member_id, leader: s.leader });
      }
      const leaderId = seen.find((x) => x.leader && x.leader !== '0')?.leader;
      return seen.find((x) => x.id === leaderId)?.m;
    },
    ms,
    'an etcd leader',
  );
}

// ---------- the suite ----------

/**
 * Runs the suite. Resolves with the entries ({suite, case, impl, opsPerSec: events/s,
 * bytesPerSec}), the targets ({name, want, ratio, ok}; higher is better) and the table.
 */
export async function runChronactaHaSuite({ root, log = console.log } = {}) {
  const entries = [];
  const targets = [];
  const notes = [];
  const samples = Number(process.env.PLEXUS_BENCH_CHRONACTA_HA_SAMPLES ?? 5);
  const sampleMs = Number(process.env.PLEXUS_BENCH_CHRONACTA_HA_SAMPLE_MS ?? 800);
  const warmupMs = Math.max(500, sampleMs * 0.75);
  // Slots of appends each cluster gets before its first measured case (load.mjs warmSlots).
  const warmSlots = Number(process.env.PLEXUS_BENCH_CHRONACTA_HA_WARM_SLOTS ?? DEFAULT_WARM_SLOTS);
  if (!Number.isSafeInteger(warmSlots) || warmSlots < 0 || warmSlots > 20) {
    throw new Error(`PLEXUS_BENCH_CHRONACTA_HA_WARM_SLOTS must be a whole number from 0 to 20, got ${warmSlots}`);
  }
  const concurrencies = listFromEnv('PLEXUS_BENCH_CHRONACTA_HA_CLIENTS', CONCURRENCIES);
  const loaders = Number(process.env.PLEXUS_BENCH_CHRONACTA_HA_LOADERS ?? DEFAULT_LOADERS);
  if (!Number.isSafeInteger(loaders) || loaders < 1 || loaders > 16) {
    throw new Error(`PLEXUS_BENCH_CHRONACTA_HA_LOADERS must be a whole number from 1 to 16, got ${loaders}`);
  }
  if (!Number.isSafeInteger(samples) || samples < 1 || !(sampleMs >= 50)) {
    throw new Error('PLEXUS_BENCH_CHRONACTA_HA_SAMPLES must be >= 1 and PLEXUS_BENCH_CHRONACTA_HA_SAMPLE_MS >= 50');
  }
  const cli = resolve(root, 'dist/cli/main.js');
  if (!existsSync(cli) || !existsSync(resolve(root, 'dist/chronacta/client.js'))) {
    const text = 'chronacta-ha: skipped: dist/ is missing (npm run build)';
    log(text);
    return { entries, targets, table: text };
  }
  const etcd = findEtcd();
  if (!etcd) log('chronacta-ha: etcd skipped: no etcd binary (PLEXUS_BENCH_ETCD or etcd on PATH)');
  const dir = mkdtempSync(join(tmpdir(), 'plexus-bench-chronacta-ha-'));
  dirs.add(dir);
  const results = [];
  const failover = {};
  let chronacta = [];
  let etcdMembers = [];
  let etcdError;
  process.on('SIGINT', interrupted);
  process.on('SIGTERM', interrupted);
  process.once('exit', killAll);
  try {
    chronacta = await startChronacta(root, cli, join(dir, 'chronacta'), log);
    const cLeader = await chronactaLeader(chronacta);
    let eLeader;
    if (etcd) {
      try {
        etcdMembers = await startEtcd(etcd, dir, log);
        eLeader = await etcdLeader(etcdMembers);
      } catch (err) {
        etcdError = err.message.slice(0, 300);
        notes.push(`  etcd failed to start: ${err.message.slice(0, 500)}`);
      }
    }
    log(
      `chronacta-ha: leaders: chronacta member ${cLeader.id} (${cLeader.address})${eLeader ? `, etcd ${eLeader.name} (${eLeader.address})` : ''}`,
    );

    // ---- throughput and latency at the leaders ----
    const cfg = {
      root,
      chronacta: cLeader.address,
      etcd: eLeader ? eLeader.address : null,
      sqliteDir: null,
      concurrencies,
      batches: BATCHES,
      readers: [],
      samples,
      sampleMs,
      warmupMs,
      warmSlots,
      eventBytes: EVENT_BYTES,
      serverPids: { chronacta: cLeader.pid, etcd: eLeader?.pid },
    };
    const slots = (BATCHES.length * concurrencies.length + warmSlots) * (eLeader ? 2 : 1);
    const slotMs = warmupMs + samples * sampleMs + GAP_MS;
    const startAt = Date.now() + (loaders > 1 ? STARTUP_MS : 0);
    log(
      `chronacta-ha: ${loaders} load process${loaders > 1 ? 'es' : ''}, ${warmSlots} warm-up slot${warmSlots === 1 ? '' : 's'} per cluster, then ${slots - warmSlots * (eLeader ? 2 : 1)} cases of ${samples} windows of ${sampleMs} ms after ${warmupMs} ms of warm-up each (~${Math.round((slots * slotMs) / 1000)} s) ...`,
    );
    const runs = await Promise.all(
      Array.from({ length: loaders }, (_, loader) =>
        run(
          process.execPath,
          [
            resolve(root, 'bench/chronacta/load.mjs'),
            JSON.stringify({ ...cfg, loaders, loader, startAt: loaders > 1 ? startAt : undefined, gapMs: GAP_MS }),
          ],
          { cwd: root, timeoutMs: STARTUP_MS + slots * slotMs + 60_000 },
        ),
      ),
    );
    const parts = [];
    for (const [loader, r] of runs.entries()) {
      for (const line of r.stdout.split('\n')) {
        if (line.startsWith('BENCH ')) parts.push(JSON.parse(line.slice(6)));
      }
      if (r.code !== 0 || r.timedOut) {
        notes.push(
          `  load process ${loader} ${r.timedOut ? 'timed out' : `exited ${r.code}`}: ${r.stderr.trim().slice(-600)}`,
        );
      }
    }
    results.push(...merge(parts, samples, sampleMs, loaders, notes));

    // ---- failover: SIGKILL the leader, time the first acknowledged append after it ----
    const probe = async (impl, target, leaderPid) => {
      const r = await run(
        process.execPath,
        [
          resolve(root, 'bench/chronacta/failover.mjs'),
          JSON.stringify({ root, impl, target, leaderPid, eventBytes: EVENT_BYTES, timeoutMs: 20_000 }),
        ],
        { cwd: root, timeoutMs: 60_000 },
      );
      const line = r.stdout.split('\n').find((l) => l.startsWith('FAILOVER '));
      if (!line) {
        notes.push(`  ${impl} failover probe failed (exit ${r.code}): ${r.stderr.trim().slice(-600)}`);
        return undefined;
      }
      const f = JSON.parse(line.slice(9));
      if (f.failoverMs === null) notes.push(`  ${impl} failover: no append acknowledged: ${f.error}`);
      return f;
    };
    // The leader may have moved under load: look again just before the kill.
    log('chronacta-ha: failover: SIGKILL of the chronacta leader ...');
    const cNow = await chronactaLeader(chronacta);
    const cFollower = chronacta.find((m) => m !== cNow);
    failover.chronacta = await probe('chronacta', cFollower.address, cNow.pid);
    if (failover.chronacta?.failoverMs != null) {
      const survivors = chronacta.filter((m) => m !== cNow);
      const next = await chronactaLeader(survivors, 5000).catch(() => undefined);
      failover.chronacta.newLeader = next?.id;
    }
    if (eLeader) {
      log('chronacta-ha: failover: SIGKILL of the etcd leader ...');
      const eNow = await etcdLeader(etcdMembers);
      const eFollower = etcdMembers.find((m) => m !== eNow);
      failover.etcd = await probe('etcd', eFollower.address, eNow.pid);
    }
  } catch (err) {
    notes.push(`  failed: ${err.message.slice(0, 1500)}`);
  } finally {
    for (const m of chronacta) m.client?.close();
    await Promise.all([...chronacta, ...etcdMembers].map((m) => m.daemon.stop()));
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
    process.off('exit', killAll);
    rmSync(dir, { recursive: true, force: true });
    dirs.delete(dir);
  }

  // ---------- entries and table ----------
  const rows = results.map((x) => ({
    ...x,
    case: `append ${EVENT_BYTES}B x${x.batch}, ${x.conc} client${x.conc > 1 ? 's' : ''}`,
    eventsMedian: median(x.eventsPerSec),
    callsMedian: median(x.callsPerSec),
  }));
  for (const x of rows) {
    entries.push({
      suite: 'chronacta-ha',
      case: x.case,
      impl: IMPL[x.impl],
      opsPerSec: x.eventsMedian,
      bytesPerSec: x.eventsMedian * EVENT_BYTES,
    });
  }
  const etcdLine = etcd
    ? etcdError
      ? `failed to start (${etcdError})`
      : `${etcd.version}, 3 members, Put / Txn of 100 puts`
    : 'skipped: no etcd binary';
  let table = `\nchronacta-ha: 3-member clusters on loopback, ${EVENT_BYTES}-byte events, committed appends at the leader; medians of ${samples} windows of ${sampleMs} ms; latency per call\n`;
  table += `  load: ${loaders} child process${loaders > 1 ? 'es' : ''} sharing each case's clients, grpc-js for both; ${warmSlots} warm-up slot${warmSlots === 1 ? '' : 's'} of appends per cluster first; etcd: ${etcdLine}\n`;
  table += `  ${'case'.padEnd(30)} ${'impl'.padEnd(36)} ${'events/s'.padStart(11)} ${'calls/s'.padStart(11)} ${'p50'.padStart(9)} ${'p99'.padStart(9)}\n`;
  for (const x of rows) {
    table += `  ${x.case.padEnd(30)} ${IMPL[x.impl].padEnd(36)} ${fmtRate(x.eventsMedian, 'ev/s').padStart(11)} ${fmtRate(x.callsMedian, '/s').padStart(11)} ${fmtMs(x.p50Ms).padStart(9)} ${fmtMs(x.p99Ms).padStart(9)}\n`;
  }
  for (const impl of ['chronacta', 'etcd']) {
    const f = failover[impl];
    if (!f) continue;
    table += `  failover (leader SIGKILL to first acknowledged append): ${IMPL[impl].padEnd(36)} ${f.failoverMs === null ? 'none' : fmtMs(f.failoverMs)}`;
    table += ` (${f.attempts} attempt${f.attempts === 1 ? '' : 's'} after the kill${f.newLeader ? `, new leader member ${f.newLeader}` : ''})\n`;
    if (f.failoverMs !== null) {
      entries.push({
        suite: 'chronacta-ha',
        case: 'failover, leader SIGKILL to first acknowledged append (1/s)',
        impl: IMPL[impl],
        opsPerSec: 1000 / f.failoverMs,
        bytesPerSec: 0,
      });
    }
  }
  if (notes.length > 0) table += `${notes.join('\n')}\n`;

  // ---------- targets (at 64 concurrent clients) ----------
  const get = (impl, batch) => rows.find((x) => x.impl === impl && x.conc === 64 && x.batch === batch);
  const c1 = get('chronacta', 1);
  const c100 = get('chronacta', 100);
  const e1 = get('etcd', 1);
  const e100 = get('etcd', 100);
  const add = (name, want, ratio) => {
    if (Number.isFinite(ratio)) targets.push({ name, want, ratio, ok: ratio >= want });
  };
  if (c1 && e1)
    add('chronacta HA append x1 @64 clients vs 3-member etcd Put (events/s)', 1.5, c1.eventsMedian / e1.eventsMedian);
  if (c100 && e100) {
    add(
      'chronacta HA append x100 @64 clients vs etcd Txn of 100 puts (events/s)',
      4,
      c100.eventsMedian / e100.eventsMedian,
    );
  }
  if (c1 && e1) add('chronacta HA p99 append x1 @64 clients: etcd p99 / chronacta p99', 1, e1.p99Ms / c1.p99Ms);
  if (c100 && e100)
    add('chronacta HA p99 append x100 @64 clients: etcd p99 / chronacta p99', 1, e100.p99Ms / c100.p99Ms);
  const cf = failover.chronacta?.failoverMs;
  if (failover.chronacta) {
    add('chronacta HA failover < 3 s: 3000 ms / failover time', 1, cf == null ? 0 : FAILOVER_TARGET_MS / cf);
  }
  return { entries, targets, table };
}

/** Adds up the load processes' parts of each case: calls and events per window, latencies pooled. */
function merge(parts, samples, sampleMs, loaders, notes) {
  const byCase = new Map();
  for (const p of parts) {
    const k = `${p.impl}/${p.conc}/${p.batch}`;
    let c = byCase.get(k);
    if (!c) {
      c = { impl: p.impl, conc: p.conc, batch: p.batch, calls: [], events: [], lats: [], parts: 0 };
      byCase.set(k, c);
    }
    for (let w = 0; w < samples; w++) {
      c.calls[w] = (c.calls[w] ?? 0) + (p.calls[w] ?? 0);
      c.events[w] = (c.events[w] ?? 0) + (p.events[w] ?? 0);
    }
    for (const l of p.lats) c.lats.push(l);
    c.parts++;
  }
  const out = [];
  for (const c of byCase.values()) {
    if (c.parts !== loaders)
      notes.push(`  ${c.impl} x${c.batch} @${c.conc}: ${c.parts} of ${loaders} load processes reported`);
    const lat = Float64Array.from(c.lats).sort();
    const q = (x) => (lat.length === 0 ? Number.NaN : lat[Math.min(lat.length - 1, Math.floor(x * lat.length))]);
    out.push({
      impl: c.impl,
      conc: c.conc,
      batch: c.batch,
      callsPerSec: c.calls.map((n) => (n * 1000) / sampleMs),
      eventsPerSec: c.events.map((n) => (n * 1000) / sampleMs),
      p50Ms: q(0.5),
      p99Ms: q(0.99),
    });
  }
  return out;
}

// `node bench/chronacta-ha.mjs`: the suite alone, with its targets.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(fileURLToPath(import.meta.url), '../..');
  const r = await runChronactaHaSuite({ root });
  console.log(r.table);
  for (const t of r.targets) {
    console.log(`  ${t.ok ? 'met ' : 'MISS'}  ${t.name.padEnd(72)} ${t.ratio.toFixed(2)}x (want >= ${t.want}x)`);
  }
}
