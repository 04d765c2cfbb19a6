// Durable appends to plexus Chronacta and to etcd, both driven by h2load (Debian
// `nghttp2-client`) with pre-encoded gRPC request bodies: the load generator is a C program
// that sends the same bytes again and again, so it costs far less per call than either
// server, and the rates describe the servers. Run: `node bench/chronacta/h2load.mjs`.
//
// - plexus: `plexus chronacta serve --fsync batch` (dist/cli/main.js), Append of 1 event and
//   of 100 events of 100 bytes to one stream (ids left empty: the server picks them);
// - etcd (one member, `etcd` from PATH or PLEXUS_BENCH_ETCD): KV/Put of a 100-byte value,
//   and KV/Txn of 100 puts (100 distinct keys) for the batches of 100.
//
// Each case runs h2load with C connections and one call in flight on each (C concurrent
// clients), first a warm-up of H2LOAD_WARM calls, then H2LOAD_CALLS measured calls; the two
// servers run in turns, ROUNDS times (H2LOAD_ROUNDS, default 3), and the medians are
// printed. For every run it prints the server's CPU time per call (utime + stime from
// /proc/<pid>/stat over the measured calls) and h2load's own (from its parent's cutime and
// cstime). Every run is checked: h2load must report every call succeeded and each server's
// own counter (Chronacta's chronacta_appended_events_total, etcd's etcd_mvcc_put_total, from /metrics)
// must have grown by the events sent, so a call refused inside a 200 response is caught.
//
// Environment: H2LOAD_CLIENTS (comma-separated, default 1,16,64), H2LOAD_BATCHES (default
// 1,100), H2LOAD_CALLS (default 20000; batches of 100 use a fifth), H2LOAD_WARM (default
// 2000), H2LOAD_ROUNDS (default 3), PLEXUS_BENCH_ROOT (the plexus build to run, default this
// checkout). Every process started here runs in its own process group, killed at the end.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePorts } from '../../dist/net/ports.js';
import { killGroups, median, run, startDaemon } from '../processes.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(process.env.PLEXUS_BENCH_ROOT ?? resolve(here, '../..'));
const cli = join(root, 'dist/cli/main.js');
const EVENT_BYTES = 100;
const list = (name, dflt) => (process.env[name] ?? dflt).split(',').map(Number);
const CLIENTS = list('H2LOAD_CLIENTS', '1,16,64');
const BATCHES = list('H2LOAD_BATCHES', '1,100');
const CALLS = Number(process.env.H2LOAD_CALLS ?? 20000);
const WARM = Number(process.env.H2LOAD_WARM ?? 2000);
const ROUNDS = Number(process.env.H2LOAD_ROUNDS ?? 3);
const TICK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100);

// --- protobuf and gRPC framing: only what the two request bodies need --------------------

function varint(n) {
  const out = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}

/** A length-delimited field (wire type 2). */
function field(no, bytes) {
  const b = typeof bytes === 'string' ? Buffer.from(bytes) : bytes;
  return Buffer.concat([varint((no << 3) | 2), varint(b.length), b]);
}

/** The 5-byte gRPC message prefix (not compressed, big-endian length) and the message. */
function grpcFrame(msg) {
  const h = Buffer.alloc(5);
  h.writeUInt32BE(msg.length, 1);
  return Buffer.concat([h, msg]);
}

const payload = Buffer.alloc(EVENT_BYTES, 0x61);

/** plexus.chronacta.v1.AppendRequest: stream = 1, events = 2 (EventData: type = 2, data = 3). */
function chronactaAppend(stream, n) {
  const event = field(2, Buffer.concat([field(2, 'bench'), field(3, payload)]));
  return grpcFrame(Buffer.concat([field(1, stream), ...Array.from({ length: n }, () => event)]));
}

/** etcdserverpb.PutRequest (key = 1, value = 2), or a TxnRequest of n puts (success = 2, RequestOp.request_put = 2). */
function etcdBody(n) {
  const put = (k) => Buffer.concat([field(1, k), field(2, payload)]);
  if (n === 1) return grpcFrame(put('bench/k'));
  const ops = Array.from({ length: n }, (_, i) => field(2, field(2, put(`bench/k${String(i).padStart(3, '0')}`))));
  return grpcFrame(Buffer.concat(ops));
}

// --- measurement ---------------------------------------------------------------------------

function cpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]); // utime, stime (fields 14 and 15)
}

async function metric(url, re) {
  const text = await (await fetch(url)).text();
  let sum = 0;
  for (const m of text.matchAll(re)) sum += Number(m[1]); // Go's client prints large counters as 1.2e+06
  return sum;
}

/** Runs h2load under a shell that reports its child's CPU (cutime + cstime) when it ends. */
async function h2load(url, bodyFile, clients, calls) {
  const cmd = [
    'h2load',
    '-n',
    String(calls),
    '-c',
    String(clients),
    '-m',
    '1',
    '-t',
    '1',
    '-d',
    bodyFile,
    '-H',
    "'content-type: application/grpc'",
    '-H',
    "'te: trailers'",
    url,
  ].join(' ');
  const r = await run('sh', ['-c', `${cmd}; s=$?; cat /proc/$$/stat; exit $s`], { timeoutMs: 600_000 });
  if (r.code !== 0) throw new Error(`h2load failed (${r.code}): ${r.stdout.slice(-800)}${r.stderr.slice(-800)}`);
  const done = /requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored/.exec(
    r.stdout,
  );
  const rate = /finished in [\d.]+m?s, ([\d.]+) req\/s/.exec(r.stdout);
  const lat = /time for request:\s+(\S+)\s+(\S+)\s+(\S+)/.exec(r.stdout);
  const lines = r.stdout.trim().split('\n');
  const stat = lines[lines.length - 1];
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(f[13]) + Number(f[14]); // cutime, cstime (fields 16 and 17)
  if (!done || !rate) throw new Error(`cannot read h2load's output: ${r.stdout.slice(-800)}`);
  return {
    succeeded: Number(done[3]),
    failed: Number(done[4]) + Number(done[5]),
    rate: Number(rate[1]),
    mean: lat ? lat[3] : '?',
    cpuUs: ((ticks / TICK) * 1e6) / calls,
  };
}

function findEtcd() {
  const bin = process.env.PLEXUS_BENCH_ETCD ?? 'etcd';
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return undefined;
  return { bin, version: /etcd Version:\s*(\S+)/.exec(r.stdout)?.[1] ?? '?' };
}

async function main() {
  if (spawnSync('h2load', ['--version']).status !== 0) {
    console.log('chronacta-h2load: skipped: no h2load (apt-get install nghttp2-client)');
    return;
  }
  const etcd = findEtcd();
  if (!etcd) {
    console.log('chronacta-h2load: skipped: no etcd (apt-get install etcd-server)');
    return;
  }
  if (!existsSync(cli)) throw new Error(`${cli} not found: build plexus first (npm run build)`);
  const dir = mkdtempSync(join(tmpdir(), 'plexus-h2load-'));
  const stop = () => {
    killGroups();
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', stop);
  process.once('SIGINT', () => process.exit(130));
  process.once('SIGTERM', () => process.exit(143));
  const [cport, mport, eport, pport] = await freePorts(4);
  const plexus = startDaemon(
    process.execPath,
    [cli, 'chronacta', 'serve', '--data', join(dir, 'chronacta'), '--port', String(cport)].concat([
      '--metrics-port',
      String(mport),
      '--fsync',
      'batch',
    ]),
    /"event":"serving"/,
  );
  const e = startDaemon(
    etcd.bin,
    ['--name', 'bench', '--data-dir', join(dir, 'etcd'), '--logger', 'zap', '--log-level', 'info']
      .concat([
        '--listen-client-urls',
        `http://127.0.0.1:${eport}`,
        '--advertise-client-urls',
        `http://127.0.0.1:${eport}`,
      ])
      .concat([
        '--listen-peer-urls',
        `http://127.0.0.1:${pport}`,
        '--initial-advertise-peer-urls',
        `http://127.0.0.1:${pport}`,
      ])
      .concat(['--initial-cluster', `bench=http://127.0.0.1:${pport}`]),
    /serving client|ready to serve|serving insecure client/,
  );
  await Promise.all([plexus.started, e.started]);
  const servers = {
    plexus: {
      pid: plexus.pid,
      url: () => `http://127.0.0.1:${cport}/plexus.chronacta.v1.EventStore/Append`,
      body: (n) => chronactaAppend(`h2load-${n}`, n),
      // events the server stored
      count: () =>
        metric(`http://127.0.0.1:${mport}/metrics`, /^chronacta_appended_events_total(?:\{[^}]*\})? ([0-9.e+]+)$/gm),
    },
    etcd: {
      pid: e.pid,
      url: (n) => `http://127.0.0.1:${eport}/etcdserverpb.KV/${n === 1 ? 'Put' : 'Txn'}`,
      body: (n) => etcdBody(n),
      // keys written: one per put (a transaction of n puts counts n)
      count: () => metric(`http://127.0.0.1:${eport}/metrics`, /^etcd_mvcc_put_total ([0-9.e+]+)$/gm),
    },
  };
  console.log(
    `chronacta-h2load: plexus ${root}, etcd ${etcd.version}; ${CALLS} calls per run (batches of 100: ${CALLS / 5}), ` +
      `${ROUNDS} rounds in turns; load average ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`,
  );
  const rows = [];
  for (const batch of BATCHES) {
    for (const clients of CLIENTS) {
      const calls = batch === 1 ? CALLS : Math.max(1000, CALLS / 5);
      const res = { plexus: [], etcd: [] };
      for (let round = 0; round < ROUNDS; round++) {
        for (const name of round % 2 ? ['etcd', 'plexus'] : ['plexus', 'etcd']) {
          const s = servers[name];
          const bodyFile = join(dir, `${name}-${batch}.bin`);
          writeFileSync(bodyFile, s.body(batch));
          await h2load(s.url(batch), bodyFile, clients, WARM);
          const before = await s.count();
          const cpu0 = cpuTicks(s.pid);
          const r = await h2load(s.url(batch), bodyFile, clients, calls);
          const cpu1 = cpuTicks(s.pid);
          const stored = (await s.count()) - before;
          if (r.failed > 0 || r.succeeded !== calls || stored !== calls * batch) {
            throw new Error(
              `${name}: ${r.succeeded} of ${calls} calls succeeded, ${r.failed} failed, ` +
                `${stored} events stored where ${calls * batch} were sent`,
            );
          }
          r.serverUs = (((cpu1 - cpu0) / TICK) * 1e6) / calls;
          res[name].push(r);
          console.log(
            `  ${name.padEnd(6)} batch ${String(batch).padStart(3)}, ${String(clients).padStart(2)} clients: ` +
              `${r.rate.toFixed(0)} calls/s (${(r.rate * batch).toFixed(0)} events/s), mean ${r.mean}, ` +
              `server CPU ${r.serverUs.toFixed(0)} us/call, h2load CPU ${r.cpuUs.toFixed(0)} us/call`,
          );
        }
      }
      const m = (name, k) => median(res[name].map((r) => r[k]));
      rows.push({
        batch,
        clients,
        plexus: m('plexus', 'rate'),
        etcd: m('etcd', 'rate'),
        plexusCpu: m('plexus', 'serverUs'),
        etcdCpu: m('etcd', 'serverUs'),
        genCpu: median([...res.plexus, ...res.etcd].map((r) => r.cpuUs)),
        ratios: res.plexus.map((r, i) => r.rate / res.etcd[i].rate),
      });
    }
  }
  console.log(
    '\n| events per call | clients | plexus calls/s | etcd calls/s | ratio (median; each round) | server CPU per call, plexus / etcd | h2load CPU per call |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  for (const r of rows) {
    console.log(
      `| ${r.batch} | ${r.clients} | ${r.plexus.toFixed(0)} | ${r.etcd.toFixed(0)} | ` +
        `${(r.plexus / r.etcd).toFixed(2)}x (${r.ratios.map((x) => x.toFixed(2)).join(' / ')}) | ` +
        `${r.plexusCpu.toFixed(0)} / ${r.etcdCpu.toFixed(0)} us | ${r.genCpu.toFixed(0)} us |`,
    );
  }
  await Promise.all([plexus.stop(), e.stop()]);
}

main().catch((err) => {
  console.error(`chronacta-h2load: ${err.message}`);
  process.exitCode = 1;
});
