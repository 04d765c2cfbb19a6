// The checkpoint benchmark job (bench/checkpoint.mjs starts it on 4 ranks). For each
// state size: the disk's own ceiling, every rank writing its state with fs.writeFile and
// an fsync at the same moment, then comm.checkpoint of the same state (rank file, buddy
// copy, signed COMMIT). Each time is the slowest rank's (an allreduce max), and the
// checkpoint's CPU time is summed over the ranks (user + system, all threads; it moves
// less than wall time when other work shares the cores); rank 0 prints the medians as
// one JSON line.
import { open, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { init } from 'plexus/sperli';

const comm = await init({ checkpointDir: process.env.SPERLI_CHECKPOINT_DIR });
const scratch = process.argv[2];
const sizes = process.argv.slice(3).map(Number);
const codec = { encode: (s) => s, decode: (b) => b };
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

/** The slowest rank's time for `fn` (ms), and the CPU time all ranks spent in it (ms, summed). */
async function slowest(fn) {
  await comm.barrier();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  const [wall] = await comm.allreduce(new Float64Array([ms]), 'max');
  const [cpu] = await comm.allreduce(new Float64Array([(c.user + c.system) / 1000]), 'sum');
  return { wall, cpu };
}

const results = [];
for (const mib of sizes) {
  const state = new Uint8Array(mib * 2 ** 20);
  for (let i = 0; i < state.length; i += 4096) state[i] = (i / 4096 + comm.rank) & 0xff;
  const reps = mib >= 256 ? 2 : mib >= 64 ? 3 : 7;
  const disk = [];
  const ckpt = [];
  const cpu = [];
  for (let r = 0; r < reps; r++) {
    const file = join(scratch, `ceiling-${comm.rank}`);
    const ceiling = await slowest(async () => {
      const fh = await open(file, 'w');
      await fh.writeFile(state);
      await fh.sync();
      await fh.close();
    });
    disk.push(ceiling.wall);
    await rm(file, { force: true });
    const taken = await slowest(() => comm.checkpoint(state, codec));
    ckpt.push(taken.wall);
    cpu.push(taken.cpu);
  }
  results.push({
    mib,
    ranks: comm.size,
    diskMs: median(disk),
    checkpointMs: median(ckpt),
    checkpointCpuMs: median(cpu),
    reps,
  });
}
if (comm.rank === 0) console.log(`RESULT ${JSON.stringify(results)}`);
await comm.finalize();
