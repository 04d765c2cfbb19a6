// Two builds of plexus side by side on one allreduce size, alternating, with the floors
// measured in the same rounds: the node:tls round trip between two processes
// (tls-ceiling.mjs --mode latency) and Open MPI over TCP on loopback (mpi-bench.c, when
// mpicc and mpirun are installed):
//
//   node bench/sperli/compare.mjs [--old DIR] [--new DIR] [--bytes N] [--iters N] [--rounds N]
//
// DIR is a checkout (or a copy of one) with dist/ built and bench/sperli/allreduce-cpu.mjs;
// --new defaults to this checkout, and without --old only the one build runs. Each round
// runs `plexus sperli launch -n 2 -- node bench/sperli/allreduce-cpu.mjs BYTES ITERS` with
// the old build, then the new one, then the TLS round trip (8 bytes, only when BYTES is 8)
// and Open MPI's allreduce of BYTES. One line per run, then the medians over the rounds:
// per call, the median call and each rank's CPU (user + system); for the round trip its
// median and the timing side's CPU per round trip; for Open MPI its median call.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { median, run } from '../processes.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { values: o } = parseArgs({
  options: {
    old: { type: 'string' },
    new: { type: 'string', default: resolve(here, '..', '..') },
    bytes: { type: 'string', default: '8' },
    iters: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '5' },
  },
});
const bytes = Number(o.bytes);
const rounds = Number(o.rounds);
const builds = [...(o.old ? [['old', resolve(o.old)]] : []), ['new', resolve(o.new)]];

function lines(stdout, tag) {
  const out = [];
  for (const l of stdout.split('\n')) {
    const m = new RegExp(`${tag} (\\{.*\\})\\s*$`).exec(l);
    if (m) out.push(JSON.parse(m[1]));
  }
  return out;
}

const which = (c) => spawnSync('sh', ['-c', `command -v ${c}`]).status === 0;
const dir = mkdtempSync(join(tmpdir(), 'plexus-sperli-compare-'));
let mpi;
if (which('mpicc') && which('mpirun')) {
  const exe = join(dir, 'mpi-bench');
  const cc = await run('mpicc', ['-O2', '-o', exe, join(here, 'mpi-bench.c')], { timeoutMs: 60_000 });
  if (cc.code === 0) mpi = exe;
}
const tcp = ['--mca', 'pml', 'ob1', '--mca', 'btl', 'tcp,self', '--mca', 'btl_tcp_if_include', 'lo'];
const loopback = ['--mca', 'oob_tcp_if_include', 'lo'];

const seen = {}; // name -> [{medianUs, cpu...}]
const keep = (name, v) => {
  seen[name] ??= [];
  seen[name].push(v);
};
try {
  for (let round = 1; round <= rounds; round++) {
    for (const [name, root] of builds) {
      const r = await run(
        process.execPath,
        [
          join(root, 'dist/cli/main.js'),
          'sperli',
          'launch',
          '-n',
          '2',
          '--',
          process.execPath,
          join(root, 'bench/sperli/allreduce-cpu.mjs'),
          String(bytes),
          o.iters,
        ],
        { cwd: root, timeoutMs: 300_000 },
      );
      const ranks = lines(r.stdout, 'CPU').sort((a, b) => a.rank - b.rank);
      if (r.code !== 0 || ranks.length !== 2) {
        console.log(
          `round ${round} ${name}: failed (exit ${r.code}) ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`,
        );
        continue;
      }
      const v = { medianUs: ranks[0].medianUs, cpu0: ranks[0].cpuUsPerCall, cpu1: ranks[1].cpuUsPerCall };
      keep(name, v);
      console.log(`round ${round} ${name}: call ${v.medianUs} us, CPU rank 0 ${v.cpu0} us, rank 1 ${v.cpu1} us`);
    }
    if (bytes === 8) {
      const r = await run(process.execPath, [join(here, 'tls-ceiling.mjs'), '--mode', 'latency', '--rounds', '20000'], {
        timeoutMs: 120_000,
      });
      const [t] = lines(r.stdout, 'BENCH');
      if (t) {
        keep('tls', { medianUs: t.medianUs, cpu0: t.cpuUsPerRound });
        console.log(`round ${round} node:tls round trip: ${t.medianUs} us, CPU ${t.cpuUsPerRound} us`);
      }
    }
    if (mpi) {
      const r = await run(
        'mpirun',
        ['--allow-run-as-root', '--oversubscribe', '-np', '2', ...tcp, ...loopback, mpi, '300', 'allreduce'],
        { timeoutMs: 120_000 },
      );
      const m = lines(r.stdout, 'BENCH').find((l) => l.case === 'allreduce' && l.bytes === bytes);
      if (m) {
        keep('mpi', { medianUs: m.medianUs });
        console.log(`round ${round} Open MPI TCP allreduce: ${m.medianUs} us`);
      }
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`medians over ${rounds} rounds, ${bytes} bytes:`);
for (const [name, vs] of Object.entries(seen)) {
  const f = (k) => (vs[0][k] === undefined ? '' : ` ${k} ${median(vs.map((v) => v[k])).toFixed(2)}`);
  console.log(`  ${name} (${vs.length} runs):${f('medianUs')}${f('cpu0')}${f('cpu1')}`);
}
