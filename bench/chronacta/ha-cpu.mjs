// CPU time and syscalls per committed append of a 3-member Chronacta cluster:
// `node bench/chronacta/ha-cpu.mjs [ROOT ...] [--rounds N] [--prof DIR] [--strace] [--batches 1,100]
// [--clients N]`.
//
// For each ROOT (ROOT/dist/cli/main.js; default: this checkout) it runs `plexus chronacta
// cluster init --members 3` into a temporary directory and starts three `plexus chronacta
// serve --cluster` processes, as bench/chronacta-ha.mjs does. Then it drives the leader from
// this process with the benchmark's client stack (grpc-js + proto-loader, 64 clients (--clients) on their
// own HTTP/2 connections, closed loops) and reads each member's user + system CPU time from
// /proc/<pid>/stat before and after a fixed number of calls. CPU time per committed append,
// summed over the three members, is what decides throughput when the members and the load
// share a few cores; it depends little on what else the machine runs.
//
// With several ROOTs the clusters run side by side and the cases take turns (ROOT 1, ROOT 2,
// ... then again, `--rounds` times): builds compared in turns see the same machine.
//
// --prof DIR     the members run with `node --cpu-prof --cpu-prof-dir DIR` (written on exit)
// --strace       counts write/fsync syscalls of every member during the measured calls
//                (strace -c -f on each PID; slows the members down: ignore rates then)
// --perf DIR     records every member with `perf record -g` during the measured calls
//                (CPU samples, kernel included; the members run with --perf-basic-prof so
//                JavaScript frames have names): DIR/<case>-<n>-<leader|follower>-m<id>.data,
//                read with `perf report -i FILE --no-children --sort sym`
//
// Prints one JSON line per case and root:
//   { root, case, calls, events, wallMs, eventsPerSec, p50Ms, p99Ms,
//     cpuUsPerCall: { leader, followers (sum of both), total, load (this process, the clients) },
//     cpuUsPerEvent: total,
//     syscallsPerCall?: { leader: {fsync, fdatasync, write, writev, pwrite64}, follower: {...} } }
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { killGroups, startDaemon } from '../processes.mjs';

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const rounds = Number(flag('--rounds') ?? 1);
const prof = flag('--prof');
const perfDir = flag('--perf');
const useStrace = args.includes('--strace');
const batches = (flag('--batches') ?? '1,100').split(',').map(Number);
const valued = new Set(['--rounds', '--prof', '--batches', '--perf', '--clients']);
const roots = args.filter((a, i) => !a.startsWith('--') && !valued.has(args[i - 1])).map((r) => resolve(r));
const here = dirname(fileURLToPath(import.meta.url));
if (roots.length === 0) roots.push(resolve(here, '../..'));
const require = createRequire(join(here, '../../package.json'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const CONC = Number(flag('--clients') ?? 64);
if (!Number.isInteger(CONC) || CONC < 1) throw new Error(`--clients ${flag('--clients')}: a whole number, 1 or more`);
const CALLS = { 1: 6000, 100: 1200 };
const WARM = { 1: 1500, 100: 300 };
const TICK_US = 1e6 / 100; // USER_HZ
const payload = Buffer.alloc(100, 0x61);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function cpuUs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) * TICK_US;
}

/** Ports the nodes bind after they are written into their configs: below the ephemeral range (ts/net/ports.ts). */
const { freePorts } = await import(new URL('../../dist/net/ports.js', import.meta.url).href);

async function startCluster(root) {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-ha-cpu-'));
  const ports = await freePorts(6);
  const adv = ports.slice(0, 3).map((p) => `127.0.0.1:${p}`);
  const raft = ports.slice(3).map((p) => `127.0.0.1:${p}`);
  const cli = join(root, 'dist/cli/main.js');
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
  const members = [1, 2, 3].map((id) => {
    const node = prof
      ? ['--cpu-prof', '--cpu-prof-dir', prof, '--cpu-prof-name', `m${id}-${Date.now()}.cpuprofile`]
      : [];
    if (perfDir) node.push('--perf-basic-prof');
    // HA_CPU_NODE_ARGS: more node arguments for the members (e.g. V8 tracing flags).
    if (process.env.HA_CPU_NODE_ARGS) node.push(...process.env.HA_CPU_NODE_ARGS.split(' ').filter(Boolean));
    const d = startDaemon(
      process.execPath,
      [...node, cli, 'chronacta', 'serve', '--cluster', '--data', join(dir, `node-${id}`), '--metrics-port', '0'],
      /"event":"serving","address":"([^"]+)"/,
      { cwd: root },
    );
    return { id, address: adv[id - 1], daemon: d, pid: d.pid };
  });
  await Promise.all(members.map((m) => m.daemon.started));
  const { ChronactaClient } = await import(pathToFileURL(join(root, 'dist/chronacta/client.js')).href);
  for (const m of members) m.client = new ChronactaClient(m.address, { deadlineMs: 2000 });
  let leader;
  for (let i = 0; i < 400 && !leader; i++) {
    for (const m of members) {
      const s = await m.client.clusterStatus().catch(() => undefined);
      if (s?.acceptingWrites) leader = m;
    }
    if (!leader) await sleep(50);
  }
  if (!leader) throw new Error(`${root}: no leader accepting writes`);
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
    () => new EventStore(leader.address, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 }),
  );
  return {
    root,
    members,
    leader,
    clients,
    async stop() {
      for (const c of clients) c.close();
      for (const m of members) m.client.close();
      // SIGTERM: the members exit on their own (and write their CPU profiles).
      await Promise.all(members.map((m) => m.daemon.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** strace -c on one PID until stopped; resolves with { syscall: calls }. */
function straceOn(pid) {
  const out = join(tmpdir(), `plexus-ha-strace-${pid}-${Date.now()}.txt`);
  const child = spawn(
    'strace',
    ['-c', '-f', '-e', 'trace=fsync,fdatasync,write,writev,pwrite64,pwritev', '-o', out, '-p', String(pid)],
    {
      stdio: 'ignore',
    },
  );
  return {
    async stop() {
      child.kill('SIGINT');
      await new Promise((r) => child.on('close', r));
      const counts = {};
      for (const line of readFileSync(out, 'utf8').split('\n')) {
        const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line);
        if (m) counts[m[2]] = Number(m[1]);
      }
      rmSync(out, { force: true });
      return counts;
    },
  };
}

/** perf record -g on one PID until stopped. */
function perfOn(pid, file) {
  const child = spawn('perf', ['record', '-g', '-F', '2000', '-o', file, '-p', String(pid)], { stdio: 'ignore' });
  return {
    async stop() {
      child.kill('SIGINT');
      await new Promise((r) => child.on('close', r));
    },
  };
}

let perfCase = 0;
async function runCase(c, batch, tag, calls, measured = false) {
  const events = Array.from({ length: batch }, () => ({ type: 'bench', data: payload }));
  let left = calls;
  const lats = [];
  const before = c.members.map((m) => cpuUs(m.pid));
  const traces = useStrace ? c.members.map((m) => straceOn(m.pid)) : undefined;
  const n = perfCase++;
  const perfs =
    perfDir && measured
      ? c.members.map((m) =>
          perfOn(m.pid, join(perfDir, `x${batch}-${n}-${m === c.leader ? 'leader' : 'follower'}-m${m.id}.data`)),
        )
      : undefined;
  if (traces || perfs) await sleep(300);
  const load0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    c.clients.map(async (cl, i) => {
      while (left > 0) {
        left--;
        const t = performance.now();
        await new Promise((ok, no) =>
          cl.append({ stream: `ha-cpu-${tag}-${i}`, events }, (e, r) => (e ? no(e) : ok(r))),
        );
        lats.push(performance.now() - t);
      }
    }),
  );
  const wall = performance.now() - t0;
  const load = process.cpuUsage(load0);
  const counts = traces ? await Promise.all(traces.map((t) => t.stop())) : undefined;
  if (perfs) await Promise.all(perfs.map((p) => p.stop()));
  const used = c.members.map((m, i) => cpuUs(m.pid) - before[i]);
  lats.sort((a, b) => a - b);
  const li = c.members.indexOf(c.leader);
  const leader = used[li];
  const followers = used.reduce((a, b) => a + b, 0) - leader;
  const out = {
    root: c.root,
    case: `append x${batch}, ${CONC} clients`,
    calls,
    events: calls * batch,
    wallMs: Math.round(wall),
    eventsPerSec: Math.round((calls * batch * 1000) / wall),
    p50Ms: Number(lats[Math.floor(lats.length / 2)].toFixed(2)),
    p99Ms: Number(lats[Math.floor(lats.length * 0.99)].toFixed(2)),
    cpuUsPerCall: {
      leader: Math.round(leader / calls),
      followers: Math.round(followers / calls),
      total: Math.round((leader + followers) / calls),
      load: Math.round((load.user + load.system) / calls),
    },
    cpuUsPerEvent: Number(((leader + followers) / (calls * batch)).toFixed(2)),
  };
  if (counts) {
    const per = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Number((v / calls).toFixed(3))]));
    const fi = c.members.findIndex((_, i) => i !== li);
    out.syscallsPerCall = { leader: per(counts[li]), follower: per(counts[fi]) };
  }
  return out;
}

process.on('SIGINT', () => {
  killGroups();
  process.exit(130);
});
const clusters = [];
try {
  for (const r of roots) clusters.push(await startCluster(r));
  let tag = 0;
  for (const batch of batches) {
    for (const c of clusters) await runCase(c, batch, `warm${tag++}`, WARM[batch] ?? 1000);
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? clusters : [...clusters].reverse();
      for (const c of order)
        console.log(JSON.stringify(await runCase(c, batch, `${tag++}`, CALLS[batch] ?? 2000, true)));
    }
  }
} finally {
  for (const c of clusters) await c.stop();
}
