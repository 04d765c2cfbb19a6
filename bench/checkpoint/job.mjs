// The checkpoint benchmark job (bench/checkpoint.mjs starts it on 4 ranks). For each
// state size: the disk's own ceiling, every rank writing its state with fs.writeFile and
// an fsync at the same moment, then comm.checkpoint of the same state (rank file, buddy
// copy, signed COMMIT). Each time is the slowest rank's (an allreduce max); rank 0 prints
// the medians as one JSON line.
import { open, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { init } from 'plexus/sperli';

const comm = await init({ checkpointDir: process.env.SPERLI_CHECKPOINT_DIR });
const scratch = process.argv[2];
const sizes = process.argv.slice(3).map(Number);
const codec = { encode: (s) => s, decode: (b) => b };
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

async function slowest(fn) {
  await comm.barrier();
  const t0 = performance.now();
  await fn();
  const [ms] = await comm.allreduce(new Float64Array([performance.now() - t0]), 'max');
  return ms;
}

const results = [];
for (const mib of sizes) {
  const state = new Uint8Array(mib * 2 ** 20);
  for (let i = 0; i < state.length; i += 4096) state[i] = (i / 4096 + comm.rank) & 0xff;
  const reps = mib >= 256 ? 2 : mib >= 64 ? 3 : 7;
  const disk = [];
  const ckpt = [];
  for (let r = 0; r < reps; r++) {
    const file = join(scratch, `ceiling-${comm.rank}`);
    disk.push(
      await slowest(async () => {
        const fh = await open(file, 'w');
        await fh.writeFile(state);
        await fh.sync();
        await fh.close();
      }),
    );
    await rm(file, { force: true });
    ckpt.push(await slowest(() => comm.checkpoint(state, codec)));
  }
  results.push({ mib, ranks: comm.size, diskMs: median(disk), checkpointMs: median(ckpt), reps });
}
if (comm.rank === 0) console.log(`RESULT ${JSON.stringify(results)}`);
await comm.finalize();
