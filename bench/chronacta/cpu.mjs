// CPU time of the Chronacta server per append: `node bench/chronacta/cpu.mjs [ROOT] [--fsync batch|never]`.
//
// Starts `plexus chronacta serve` (ROOT/dist/cli/main.js, default: this checkout) in its
// own process, drives it from this process with the grpc-js client stack of the benchmark
// (64 clients on their own HTTP/2 connections, closed loops) and reads the server's user +
// system CPU time from /proc/<pid>/stat before and after each case. CPU time per call does
// not depend on what else the machine runs, so it compares two builds on a busy machine
// better than a rate does. Prints one JSON line per case:
//   { case, calls, events, serverCpuUsPerCall, serverSystemUsPerCall, serverCpuUsPerEvent, clientCpuUsPerCall, wallMs, callsPerSec }
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const fsyncAt = args.indexOf('--fsync');
const fsync = fsyncAt >= 0 ? args[fsyncAt + 1] : 'batch';
const rootArg = args.find((a, i) => !a.startsWith('--') && (fsyncAt < 0 || i !== fsyncAt + 1));
const root = resolve(rootArg ?? join(dirname(fileURLToPath(import.meta.url)), '../..'));
const here = createRequire(join(dirname(fileURLToPath(import.meta.url)), '../../package.json'));
const grpc = here('@grpc/grpc-js');
const protoLoader = here('@grpc/proto-loader');
const CONC = 64;
const TICK_US = 1e6 / 100; // USER_HZ

/** User and system CPU time of a process in microseconds. */
function cpuOf(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return { user: Number(rest[11]) * TICK_US, system: Number(rest[12]) * TICK_US };
}

function cpuUs(pid) {
  const c = cpuOf(pid);
  return c.user + c.system;
}

const dir = mkdtempSync(join(tmpdir(), 'plexus-chronacta-cpu-'));
// PLEXUS_BENCH_CPU_PROF=DIR: the server writes a V8 CPU profile (node --cpu-prof) into DIR.
const prof = process.env.PLEXUS_BENCH_CPU_PROF;
const child = spawn(
  process.execPath,
  [
    ...(prof ? ['--cpu-prof', '--cpu-prof-dir', prof] : []),
    join(root, 'dist/cli/main.js'),
    'chronacta',
    'serve',
    '--data',
    dir,
    '--port',
    '0',
    '--metrics-port',
    '0',
    '--fsync',
    fsync,
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
try {
  const address = await new Promise((resolvePromise, reject) => {
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c) => {
      out += c;
      const m = /"address":"([^"]+)"/.exec(out);
      if (m) resolvePromise(m[1]);
    });
    child.on('close', (code) => reject(new Error(`server exited ${code}`)));
  });
  const def = protoLoader.loadSync(join(root, 'proto/chronacta.proto'), {
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const EventStore = grpc.loadPackageDefinition(def).plexus.chronacta.v1.EventStore;
  const clients = Array.from(
    { length: CONC },
    () =>
      new EventStore(address, grpc.credentials.createInsecure(), {
        'grpc.use_local_subchannel_pool': 1,
      }),
  );
  const payload = Buffer.alloc(100, 0x61);
  const append = (c, req) => new Promise((ok, no) => c.append(req, (e, r) => (e ? no(e) : ok(r))));
  let run = 0;
  for (const [batch, calls] of [
    [1, 1500],
    [1, 8000],
    [100, 300],
    [100, 2000],
  ]) {
    run++;
    const events = Array.from({ length: batch }, () => ({ type: 'bench', data: payload }));
    let left = calls;
    const c0 = cpuUs(child.pid);
    const sys0 = cpuOf(child.pid).system;
    const own0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(
      clients.map(async (c, i) => {
        while (left > 0) {
          left--;
          await append(c, { stream: `cpu-${run}-${i}`, events });
        }
      }),
    );
    const wall = performance.now() - t0;
    const cpu = cpuUs(child.pid) - c0;
    const sys = cpuOf(child.pid).system - sys0;
    const own = process.cpuUsage(own0);
    // The first, shorter run of each size warms the server up and is not reported.
    if (run % 2 === 0) {
      console.log(
        JSON.stringify({
          case: `append x${batch}, ${CONC} clients, fsync ${fsync}`,
          calls,
          events: calls * batch,
          serverCpuUsPerCall: Math.round(cpu / calls),
          serverSystemUsPerCall: Math.round(sys / calls),
          serverCpuUsPerEvent: Number((cpu / (calls * batch)).toFixed(2)),
          clientCpuUsPerCall: Math.round((own.user + own.system) / calls),
          wallMs: Math.round(wall),
          callsPerSec: Math.round((calls * 1000) / wall),
        }),
      );
    }
  }
  for (const c of clients) c.close();
} finally {
  child.kill('SIGTERM');
  await new Promise((r) => child.on('close', r));
  rmSync(dir, { recursive: true, force: true });
}
