// An allreduce (sum) of a large Float64Array over every rank, checked against the
// expected result.   plexus sperli launch -n 4 -- node examples/sperli/allreduce.mjs [ELEMENTS]
import { init } from 'plexus/sperli';

const comm = await init();
const n = Number(process.argv[2] ?? 2 * 1024 * 1024); // 16 MiB of float64
const data = new Float64Array(n);
for (let i = 0; i < n; i++) data[i] = comm.rank + i * 0.5;
const t0 = performance.now();
const sum = await comm.allreduce(data, 'sum');
const ms = performance.now() - t0;
// sum over ranks r of (r + i/2) = size(size-1)/2 + size*i/2
const base = (comm.size * (comm.size - 1)) / 2;
let bad = 0;
for (let i = 0; i < n; i++) if (sum[i] !== base + (comm.size * i) / 2) bad++;
if (bad > 0) throw new Error(`${bad} elements differ from the expected sum`);
if (comm.rank === 0) {
  console.log(
    `allreduce of ${n} float64 (${((n * 8) / 2 ** 20).toFixed(1)} MiB) over ${comm.size} ranks: ${ms.toFixed(1)} ms, result checked`,
  );
}
await comm.finalize();
