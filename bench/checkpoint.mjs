// The checkpoint suite of `npm run bench` (`--filter checkpoint` runs it alone): 4 ranks
// checkpoint 1 MiB, 64 MiB and 256 MiB of state each (bench/checkpoint/job.mjs), next to
// the disk's own ceiling measured in the same job: every rank writing the same bytes with
// fs.writeFile + fsync at the same moment. A checkpoint writes each state twice (the rank
// file and the buddy's copy) and sends it to the buddy over TLS, so the target allows
// 2.5x the ceiling at 64 MiB. The table also gives the checkpoint's CPU time summed over
// the 4 ranks: with 4 ranks on fewer cores, wall time cannot go below it divided by the
// cores. Below the table, the floor of each size (bench/checkpoint/floor.mjs): the CPU a
// rank cannot avoid (three SHA-256 passes, TLS out and in, two durable writes), measured
// here before the job starts, and the wall time it allows for 4 ranks on this machine's
// cores. PLEXUS_BENCH_CKPT_SIZES (MiB, commas) changes the sizes.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { measureFloor } from './checkpoint/floor.mjs';

export async function runCheckpointSuite({ root }) {
  const sizes = (process.env.PLEXUS_BENCH_CKPT_SIZES ?? '1,64,256').split(',').map(Number);
  const dir = mkdtempSync(join(tmpdir(), 'plexus-bench-ckpt-'));
  const entries = [];
  const targets = [];
  let table = '\ncheckpoint: 4 ranks, state per rank, slowest rank, medians\n';
  try {
    const floors = [];
    for (const mib of sizes) floors.push({ mib, ...(await measureFloor(mib)) });
    const r = spawnSync(
      process.execPath,
      [
        join(root, 'dist/cli/main.js'),
        'sperli',
        'launch',
        '-n',
        '4',
        '--checkpoint-dir',
        join(dir, 'ckpt'),
        '--silence-ms',
        '60000',
        '--',
        process.execPath,
        join(root, 'bench/checkpoint/job.mjs'),
        dir,
        ...sizes.map(String),
      ],
      { cwd: root, encoding: 'utf8', timeout: 600_000, maxBuffer: 1 << 24 },
    );
    const line = /RESULT (.*)/.exec(r.stdout)?.[1];
    if (r.status !== 0 || !line) {
      table += `  failed (status ${r.status}): ${r.stderr.slice(-2000)}\n`;
      return { entries, targets, table };
    }
    table += `  ${'state'.padEnd(10)} ${'writeFile+fsync'.padStart(16)} ${'checkpoint'.padStart(12)} ${'ratio'.padStart(7)} ${'CPU, all ranks'.padStart(15)}\n`;
    for (const x of JSON.parse(line)) {
      const bytes = x.mib * 2 ** 20;
      const name = `${x.mib}MiB x${x.ranks}`;
      entries.push({
        suite: 'checkpoint',
        case: name,
        impl: 'plexus comm.checkpoint',
        opsPerSec: 1000 / x.checkpointMs,
        bytesPerSec: (bytes * 1000) / x.checkpointMs,
      });
      entries.push({
        suite: 'checkpoint',
        case: name,
        impl: 'fs.writeFile + fsync',
        opsPerSec: 1000 / x.diskMs,
        bytesPerSec: (bytes * 1000) / x.diskMs,
      });
      const ratio = x.checkpointMs / x.diskMs;
      const cpu = x.checkpointCpuMs === undefined ? '' : `${x.checkpointCpuMs.toFixed(0)} ms`;
      table += `  ${`${x.mib} MiB`.padEnd(10)} ${`${x.diskMs.toFixed(1)} ms`.padStart(16)} ${`${x.checkpointMs.toFixed(1)} ms`.padStart(12)} ${`${ratio.toFixed(2)}x`.padStart(7)} ${cpu.padStart(15)}\n`;
      if (x.mib === 64) {
        targets.push({
          name: 'checkpoint 64MiB x4: writeFile+fsync time / checkpoint time (checkpoint <= 2.5x)',
          want: 1 / 2.5,
          ratio: x.diskMs / x.checkpointMs,
          ok: ratio <= 2.5,
        });
      }
    }
    const cores = availableParallelism();
    for (const f of floors) {
      const ranks = 4;
      table += `  floor at ${f.mib} MiB, per rank: 3 x SHA-256 ${f.sha256.toFixed(0)} + TLS ${f.tls.toFixed(0)} + 2 durable writes ${f.write.toFixed(0)} = ${f.total.toFixed(0)} ms CPU; ${ranks} ranks on ${cores} cores: wall >= ${((f.total * ranks) / Math.min(ranks, cores)).toFixed(0)} ms\n`;
    }
    return { entries, targets, table };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
