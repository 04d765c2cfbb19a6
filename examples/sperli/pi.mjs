// Pi by integration of 4 / (1 + x^2) over [0, 1]: each rank sums its share of the
// intervals, and a reduce at rank 0 adds them up.
//   plexus sperli launch -n 4 -- node examples/sperli/pi.mjs [INTERVALS]
import { init } from 'plexus/sperli';

const comm = await init();
// Rank 0's argument decides, broadcast to all.
const arg = await comm.bcast(0, new TextEncoder().encode(process.argv[2] ?? '10000000'));
const intervals = Number(new TextDecoder().decode(arg));
const h = 1 / intervals;
let local = 0;
for (let i = comm.rank; i < intervals; i += comm.size) {
  const x = h * (i + 0.5);
  local += 4 / (1 + x * x);
}
const total = await comm.reduce(0, new Float64Array([local * h]), 'sum');
if (comm.rank === 0) {
  const pi = total[0];
  console.log(
    `pi ~ ${pi.toFixed(15)} (error ${Math.abs(pi - Math.PI).toExponential(2)}) from ${intervals} intervals on ${comm.size} ranks`,
  );
}
await comm.finalize();
