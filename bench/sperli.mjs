// The SPERLI suite of `npm run bench` (bench/run.mjs calls runSperliSuite; `--filter sperli`
// runs it alone). It measures, in one run:
//
// - plexus SPERLI jobs started with `plexus sperli launch` (dist/cli/main.js) running
//   bench/sperli/job.mjs: ping-pong between 2 ranks (8 B and 1 MiB) and allreduce of a
//   Float64Array sum at 8 B, 64 KiB, 1 MiB and 16 MiB over 2 and 4 ranks, each result
//   written into one array given with `into` (as mpi-bench.c gives MPI_Allreduce its receive
//   buffer), and on 2 ranks also with a new result array every call;
// - the same cases with Open MPI: bench/sperli/mpi-bench.c built with mpicc into a
//   temporary directory and run with `mpirun --allow-run-as-root --oversubscribe -np N`,
//   once over TCP on loopback (pml ob1, btl tcp,self) and once with the default transport
//   (on one machine: shared memory);
// - the ceiling SPERLI cannot beat: bulk one-way throughput of ONE TLS 1.3 connection
//   between two processes (bench/sperli/tls-ceiling.mjs: Ed25519 certificates of a job CA,
//   mutual authentication, the options of the mesh), and plain TCP for reference; and the
//   8-byte round trip of such a connection (and of plain TCP), the floor of an 8-byte
//   allreduce on 2 ranks (one message each way); and a 16 MiB echo on such a connection
//   (receive 16 MiB, then send 16 MiB back), the floor of a 16 MiB star allreduce on 2
//   ranks, shown next to it (not a target).
//
// Every job reports per-iteration medians measured on rank 0 after a warm-up (see
// job.mjs and mpi-bench.c); the ceiling reports the median of equal samples of a stream.
// Ping-pong rows give the round trip; "one-way" is round trip / 2 and the ping-pong
// bandwidth is bytes / one-way time. Allreduce rows give the time per call, the algorithm
// bandwidth (bytes / time) and the bus bandwidth of nccl-tests (algbw x 2(n-1)/n).
//
// Every process started here runs in its own process group, which is killed when it
// ends, when it runs past its time limit, and when this process exits or is interrupted
// (SIGINT, SIGTERM) while the suite runs.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { killGroups, median, run } from './processes.mjs';

const MIB = 2 ** 20;
const SIZES = [8, 64 * 1024, MIB, 16 * MIB];
const SPERLI = 'plexus sperli (TLS 1.3 mesh)';
/** The same allreduce taking a new result array every call (the rows above pass `into`, as MPI does). */
const SPERLI_NEW = 'plexus sperli, new result each call';
const MPI_TCP = 'Open MPI, TCP (btl tcp,self)';
const MPI_DEFAULT = 'Open MPI, default (shared memory)';

function interrupted(signal) {
  killGroups();
  process.exit(signal === 'SIGINT' ? 130 : 143);
}

/** The BENCH lines of a run's output (SPERLI's are rank 0's, with the launcher's prefix). */
function benchLines(stdout) {
  const out = [];
  for (const line of stdout.split('\n')) {
    const m = /^(?:\[rank 0\] )?BENCH (\{.*\})\s*$/.exec(line);
    if (m) out.push(JSON.parse(m[1]));
  }
  return out;
}

function sizeLabel(bytes) {
  if (bytes >= MIB) return `${bytes / MIB}MiB`;
  if (bytes >= 1024) return `${bytes / 1024}KiB`;
  return `${bytes}B`;
}

function fmtRate(n, unit) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} G${unit}`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} M${unit}`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k${unit}`;
  return `${n.toFixed(0)} ${unit}`;
}

function fmtTime(us) {
  if (us >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(2)} ms`;
  return `${us.toFixed(us < 10 ? 2 : 1)} us`;
}

/**
 * CPU time in clock ticks from /proc (Linux): busy time of the whole machine, and the time
 * of this process and of the children it has waited for (the ranks, mpirun's processes
 * and the ceiling's sender are waited for by their parents, so they count here too).
 * Undefined elsewhere.
 */
function cpuTicks() {
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const busy = cpu.reduce((a, b) => a + b, 0) - cpu[3] - (cpu[4] ?? 0);
    const self = readFileSync('/proc/self/stat', 'utf8');
    const f = self
      .slice(self.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    // Fields 14..17 of /proc/self/stat (utime, stime, cutime, cstime), counted from field 3.
    const own = f[11] + f[12] + f[13] + f[14];
    return { busy, own };
  } catch {
    return undefined;
  }
}

function failed(what, r) {
  const why = r.timedOut ? 'timed out' : `exit ${r.code}`;
  const tail = r.stderr.trim().split('\n').slice(-6).join('\n    ');
  return `  ${what}: failed (${why})${tail ? `\n    ${tail}` : ''}`;
}

/**
 * Runs the suite. `log` prints progress lines. Resolves with the entries
 * ({suite, case, impl, opsPerSec, bytesPerSec}), the targets ({name, want, ratio, ok},
 * ratios of rates: higher is better) and the table as text.
 */
export async function runSperliSuite({ root, log = console.log, budgetMs = 2000, mpiBudgetMs = 1000 } = {}) {
  const started = performance.now();
  const cli = resolve(root, 'dist/cli/main.js');
  const job = resolve(root, 'bench/sperli/job.mjs');
  const ceiling = resolve(root, 'bench/sperli/tls-ceiling.mjs');
  const notes = [];
  const results = []; // {impl, case, bytes, ranks, medianUs, ...}
  const ceilings = []; // {proto, samplesMs, sampleBytes, ...}
  const rtts = []; // {proto, medianUs, ...}
  const echoes = []; // {bytes, medianUs, ...}
  if (!existsSync(cli)) {
    const text = 'sperli: skipped: dist/cli/main.js is missing (npm run build)';
    log(text);
    return { entries: [], targets: [], table: text };
  }
  let mpi = 'skipped: no mpirun';
  const ticks0 = cpuTicks();
  process.on('SIGINT', interrupted);
  process.on('SIGTERM', interrupted);
  try {
    // ---- the TLS and TCP ceilings, 8-byte round trips ----
    const ceilingRun = async (proto) => {
      log(`sperli: ${proto.toUpperCase()} ceiling (one connection, one-way bulk) ...`);
      const r = await run(process.execPath, [ceiling, '--proto', proto, '--sample-mib', '32', '--samples', '12'], {
        cwd: root,
        timeoutMs: 60_000,
      });
      const lines = benchLines(r.stdout);
      if (r.code !== 0 || lines.length !== 1) notes.push(failed(`${proto} ceiling`, r));
      else ceilings.push(lines[0]);
    };
    const rttRun = async (proto) => {
      log(`sperli: ${proto.toUpperCase()} 8-byte round trips (one connection) ...`);
      const r = await run(process.execPath, [ceiling, '--mode', 'latency', '--proto', proto, '--rounds', '5000'], {
        cwd: root,
        timeoutMs: 60_000,
      });
      const lines = benchLines(r.stdout);
      if (r.code !== 0 || lines.length !== 1) notes.push(failed(`${proto} round trips`, r));
      else rtts.push(lines[0]);
    };
    const echoRun = async () => {
      log('sperli: TLS 16 MiB echo (one connection: receive 16 MiB, send 16 MiB back) ...');
      const r = await run(process.execPath, [ceiling, '--mode', 'echo', '--proto', 'tls', '--rounds', '20'], {
        cwd: root,
        timeoutMs: 60_000,
      });
      const lines = benchLines(r.stdout);
      if (r.code !== 0 || lines.length !== 1) notes.push(failed('tls echo', r));
      else echoes.push(lines[0]);
    };
    // ---- SPERLI ----
    const sperliJob = async (n, cases) => {
      log(`sperli: plexus sperli launch -n ${n} (${cases.join(', ')}) ...`);
      const r = await run(
        process.execPath,
        [cli, 'sperli', 'launch', '-n', String(n), '--', process.execPath, job, String(budgetMs), ...cases],
        { cwd: root, timeoutMs: 120_000 },
      );
      const lines = benchLines(r.stdout);
      if (r.code !== 0) notes.push(failed(`plexus sperli launch -n ${n}`, r));
      for (const l of lines) {
        if (l.case === 'allreduce-new') results.push({ impl: SPERLI_NEW, ...l, case: 'allreduce' });
        else results.push({ impl: SPERLI, ...l });
      }
    };

    // ---- Open MPI ----
    // Open MPI refuses to start under root without --allow-run-as-root. The TCP run uses
    // the ob1 messaging layer (not UCX) with only the TCP and self transports, kept on the
    // loopback interface (its default excludes it); Open MPI's own setup stays there too.
    const tcp = ['--mca', 'pml', 'ob1', '--mca', 'btl', 'tcp,self', '--mca', 'btl_tcp_if_include', 'lo'];
    const loopback = ['--mca', 'oob_tcp_if_include', 'lo'];
    let exe;
    const mpiJob = async (n, impl, cases) => {
      if (exe === undefined) return;
      log(`sperli: mpirun -np ${n} ${impl} (${cases.join(', ')}) ...`);
      const mca = impl === MPI_TCP ? [...tcp, ...loopback] : loopback;
      const r = await run(
        'mpirun',
        ['--allow-run-as-root', '--oversubscribe', '-np', String(n), ...mca, exe, String(mpiBudgetMs), ...cases],
        { timeoutMs: 120_000 },
      );
      if (r.code !== 0) notes.push(failed(`mpirun -np ${n} (${impl})`, r));
      for (const l of benchLines(r.stdout)) results.push({ impl, ...l });
    };
    const which = (c) => spawnSync('sh', ['-c', `command -v ${c}`], { encoding: 'utf8' }).status === 0;
    const dir = mkdtempSync(join(tmpdir(), 'plexus-sperli-bench-'));
    try {
      if (which('mpirun') && which('mpicc')) {
        log('sperli: mpicc bench/sperli/mpi-bench.c ...');
        const out = join(dir, 'mpi-bench');
        const cc = await run('mpicc', ['-O2', '-o', out, resolve(root, 'bench/sperli/mpi-bench.c')], {
          timeoutMs: 60_000,
        });
        if (cc.code === 0) {
          exe = out;
          mpi = 'ran';
        } else {
          mpi = 'skipped: mpicc failed';
          notes.push(failed('mpicc', cc));
        }
      } else log('sperli: skipped: no mpirun');

      // The runs a target compares follow each other, so a change in the load of the
      // machine shifts both sides alike; the TLS ceiling is taken just before and just
      // after the 2-rank SPERLI job.
      await rttRun('tls');
      await rttRun('tcp');
      await ceilingRun('tcp');
      await ceilingRun('tls');
      await sperliJob(2, ['pingpong', 'allreduce', 'allreduce-new']);
      await ceilingRun('tls');
      await echoRun();
      await mpiJob(2, MPI_TCP, ['pingpong', 'allreduce']);
      await mpiJob(2, MPI_DEFAULT, ['pingpong', 'allreduce']);
      await sperliJob(4, ['allreduce']);
      await mpiJob(4, MPI_TCP, ['allreduce']);
      await mpiJob(4, MPI_DEFAULT, ['allreduce']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  } finally {
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
  }

  // ---- entries ----
  const entries = [];
  const find = (impl, kind, bytes, ranks) =>
    results.find((r) => r.impl === impl && r.case === kind && r.bytes === bytes && r.ranks === ranks);
  const impls = [SPERLI, SPERLI_NEW, MPI_TCP, MPI_DEFAULT];
  for (const bytes of [8, MIB]) {
    for (const impl of impls) {
      const r = find(impl, 'pingpong', bytes, 2);
      if (!r) continue;
      // One op is one round trip; bytes/s is the ping-pong bandwidth, bytes / one-way time.
      const ops = 1e6 / r.medianUs;
      entries.push({
        suite: 'sperli',
        case: `pingpong ${sizeLabel(bytes)} 2 ranks`,
        impl,
        opsPerSec: ops,
        bytesPerSec: 2 * bytes * ops,
      });
    }
  }
  for (const ranks of [2, 4]) {
    for (const bytes of SIZES) {
      for (const impl of impls) {
        const r = find(impl, 'allreduce', bytes, ranks);
        if (!r) continue;
        // One op is one allreduce call; bytes/s is the algorithm bandwidth, bytes / time.
        const ops = 1e6 / r.medianUs;
        entries.push({
          suite: 'sperli',
          case: `allreduce f64 sum ${sizeLabel(bytes)} ${ranks} ranks`,
          impl,
          opsPerSec: ops,
          bytesPerSec: bytes * ops,
        });
      }
    }
  }
  const ceilingOf = (proto) => {
    const runs = ceilings.filter((c) => c.proto === proto);
    if (runs.length === 0) return undefined;
    const ms = median(runs.flatMap((c) => c.samplesMs));
    const bytesPerSec = runs[0].sampleBytes / (ms / 1000);
    return { ...runs[0], runs: runs.length, samples: runs.reduce((n, c) => n + c.samplesMs.length, 0), bytesPerSec };
  };
  const tlsCeiling = ceilingOf('tls');
  const tcpCeiling = ceilingOf('tcp');
  for (const r of rtts) {
    entries.push({
      suite: 'sperli',
      case: 'pingpong 8B 1 connection, loopback',
      impl: r.proto === 'tls' ? `node:tls TLS 1.3 (${r.cipher}, Ed25519 mutual)` : 'node:net TCP',
      opsPerSec: 1e6 / r.medianUs,
      bytesPerSec: (2 * r.bytes * 1e6) / r.medianUs,
    });
  }
  for (const c of [tlsCeiling, tcpCeiling]) {
    if (!c) continue;
    // One op is one write of chunkBytes by the sender.
    entries.push({
      suite: 'sperli',
      case: 'one-way bulk, 1 connection, loopback',
      impl: c.proto === 'tls' ? `node:tls TLS 1.3 (${c.cipher}, Ed25519 mutual)` : 'node:net TCP',
      opsPerSec: c.bytesPerSec / c.chunkBytes,
      bytesPerSec: c.bytesPerSec,
    });
  }

  // ---- table ----
  const out = [];
  const row = (cells, widths) =>
    `  ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' ')}`;
  out.push('', 'sperli: ping-pong between 2 ranks (medians; one-way = round trip / 2; bandwidth = bytes / one-way)');
  const wp = [34, 8, 12, 12, 12];
  out.push(row(['impl', 'size', 'round trip', 'one-way', 'bandwidth'], wp));
  for (const bytes of [8, MIB]) {
    for (const impl of impls) {
      const r = find(impl, 'pingpong', bytes, 2);
      if (!r) continue;
      out.push(
        row(
          [
            impl,
            sizeLabel(bytes),
            fmtTime(r.medianUs),
            fmtTime(r.medianUs / 2),
            fmtRate(bytes / (r.medianUs / 2e6), 'B/s'),
          ],
          wp,
        ),
      );
    }
  }
  out.push(
    '',
    'sperli: allreduce, f64 sum (medians per call on rank 0; algbw = bytes / time; busbw = algbw x 2(n-1)/n)',
  );
  const wa = [36, 6, 7, 11, 12, 12, 16];
  out.push(row(['impl', 'ranks', 'size', 'time', 'algbw', 'busbw', 'x Open MPI TCP'], wa));
  for (const ranks of [2, 4]) {
    for (const bytes of SIZES) {
      const ref = find(MPI_TCP, 'allreduce', bytes, ranks);
      for (const impl of impls) {
        const r = find(impl, 'allreduce', bytes, ranks);
        if (!r) continue;
        const algbw = bytes / (r.medianUs / 1e6);
        const busbw = (algbw * 2 * (ranks - 1)) / ranks;
        const vs = ref ? `${(r.medianUs / ref.medianUs).toFixed(2)}x time` : '-';
        out.push(
          row(
            [
              impl,
              String(ranks),
              sizeLabel(bytes),
              fmtTime(r.medianUs),
              fmtRate(algbw, 'B/s'),
              fmtRate(busbw, 'B/s'),
              vs,
            ],
            wa,
          ),
        );
      }
    }
  }
  const cpu16 = find(SPERLI, 'allreduce', 16 * MIB, 2)?.cpuUsPerIter;
  if (cpu16) {
    out.push(`  (SPERLI 16MiB on 2 ranks: CPU per call ${cpu16.map((c) => fmtTime(c)).join(' / ')} on ranks 0 / 1)`);
  }
  out.push(
    '',
    'sperli: the ceiling, one connection between two processes on loopback, one-way bulk (median of samples)',
  );
  for (const c of [tlsCeiling, tcpCeiling]) {
    if (!c) continue;
    const what = c.proto === 'tls' ? `node:tls ${c.protocol} ${c.cipher}, Ed25519 mutual` : 'node:net plain TCP';
    out.push(
      `  ${what.padEnd(58)} ${fmtRate(c.bytesPerSec, 'B/s').padStart(11)}  (${c.samples} samples of ${c.sampleBytes / MIB} MiB, ${c.chunkBytes / 1024} KiB writes)`,
    );
  }
  for (const r of rtts) {
    const what = r.proto === 'tls' ? `node:tls ${r.protocol} ${r.cipher}, Ed25519 mutual` : 'node:net plain TCP';
    out.push(
      `  ${what.padEnd(58)} ${fmtTime(r.medianUs).padStart(11)}  8-byte round trip (median of ${r.rounds}; fastest ${fmtTime(r.minUs)})`,
    );
  }
  const echo16 = echoes[0];
  if (echo16) {
    out.push(
      `  ${'node:tls 16 MiB echo (receive 16 MiB, then send 16 MiB back)'.padEnd(58)} ${fmtTime(echo16.medianUs).padStart(11)}  per round (median of ${echo16.rounds}; fastest ${fmtTime(echo16.minUs)})`,
    );
    const s16e = find(SPERLI, 'allreduce', 16 * MIB, 2);
    if (s16e) {
      out.push(
        `  (SPERLI 16MiB allreduce on 2 ranks: ${(s16e.medianUs / echo16.medianUs).toFixed(2)}x the node:tls echo, the floor of a star: the root decrypts the contribution, then encrypts the result)`,
      );
    }
  }
  const s8 = find(SPERLI, 'allreduce', 8, 2);
  const tlsRtt = rtts.find((r) => r.proto === 'tls');
  if (s8 && tlsRtt) {
    out.push(
      `  (SPERLI 8B allreduce on 2 ranks, one message each way: ${(s8.medianUs / tlsRtt.medianUs).toFixed(2)}x the node:tls round trip)`,
    );
  }
  if (mpi !== 'ran') out.push('', `sperli: Open MPI ${mpi}`);

  // ---- targets ----
  // Bytes moved by a 16 MiB allreduce on 2 ranks, through the root's one connection:
  // rank 1 sends its 16 MiB to the root (phase 1), then the root sends the 16 MiB result
  // to rank 1 (phase 2): 32 MiB per call (16 MiB in + 16 MiB out, payload bytes only;
  // frame and collective headers, 68 bytes per frame, are not counted). Phase 2 cannot
  // start before phase 1 has ended (the result needs every contribution) and the next
  // call's phase 1 waits for the result, so the two directions never carry data at the
  // same time: the sum of both directions is compared with the ONE-WAY ceiling. At the
  // ceiling the call would take 32 MiB / ceiling.
  const targets = [];
  const lines = [];
  const addTarget = (name, want, ratio, shown) => {
    targets.push({ name, want, ratio, ok: ratio >= want });
    lines.push(`  ${ratio >= want ? 'met ' : 'MISS'}  ${name.padEnd(70)} ${shown}`);
  };
  const s16 = find(SPERLI, 'allreduce', 16 * MIB, 2);
  if (s16 && tlsCeiling) {
    const moved = 2 * 16 * MIB;
    const rate = moved / (s16.medianUs / 1e6);
    addTarget(
      'sperli allreduce 16MiB 2 ranks, root bytes (16 MiB in + 16 MiB out)/s vs TLS ceiling',
      0.7,
      rate / tlsCeiling.bytesPerSec,
      `${(rate / tlsCeiling.bytesPerSec).toFixed(2)}x (${fmtRate(rate, 'B/s')} of ${fmtRate(tlsCeiling.bytesPerSec, 'B/s')}; want >= 0.70x)`,
    );
  }
  for (const [bytes, label] of [
    [16 * MIB, '16MiB'],
    [8, '8B'],
  ]) {
    const s = find(SPERLI, 'allreduce', bytes, 2);
    const m = find(MPI_TCP, 'allreduce', bytes, 2);
    if (!s || !m) continue;
    const times = s.medianUs / m.medianUs;
    // The harness compares rates (higher is better): time <= 4x is rate >= 0.25x.
    addTarget(
      `sperli allreduce ${label} 2 ranks rate vs Open MPI TCP (time <= 4x)`,
      0.25,
      m.medianUs / s.medianUs,
      `${times.toFixed(2)}x Open MPI TCP's time (${fmtTime(s.medianUs)} vs ${fmtTime(m.medianUs)}; want <= 4x)`,
    );
  }
  if (lines.length > 0) out.push('', 'sperli targets (ratios within this run):', ...lines);
  if (notes.length > 0) out.push('', 'sperli: problems', ...notes);
  const seconds = (performance.now() - started) / 1000;
  const ticks1 = cpuTicks();
  let others = '';
  if (ticks0 && ticks1) {
    // Clock ticks are 1/100 s on Linux.
    const share = (ticks1.busy - ticks0.busy - (ticks1.own - ticks0.own)) / 100 / (seconds * availableParallelism());
    others = `; other processes kept ${(Math.max(0, share) * 100).toFixed(0)}% of the ${availableParallelism()} CPUs busy meanwhile (the ratios hold for an otherwise idle machine)`;
  }
  out.push('', `sperli: suite took ${seconds.toFixed(1)} s${others}`);
  return { entries, targets, table: out.join('\n') };
}
