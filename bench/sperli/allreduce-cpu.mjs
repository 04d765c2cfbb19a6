// A rank program that times one allreduce size and prints where each rank's CPU goes:
//   plexus sperli launch -n N -- node bench/sperli/allreduce-cpu.mjs BYTES ITERS [into]
// (add `--cpu-prof --cpu-prof-dir=DIR` after `node` for a profile of every rank).
// Each rank runs ITERS/10 (at least 3) warm-up calls, then ITERS timed calls of a
// Float64Array sum, and prints one line:
//   CPU {"rank":r,"bytes":...,"iters":...,"medianUs":...,"minUs":...,"meanUs":...,"p99Us":...,"cpuUsPerCall":...,
//        "userUsPerCall":...,"systemUsPerCall":...,"gcMsTotal":...}
// The result is checked once after the timed calls.
import { PerformanceObserver, performance } from 'node:perf_hooks';
import { init } from 'plexus/sperli';

const comm = await init();
const { rank, size } = comm;
const bytes = Number(process.argv[2] ?? 16 * 2 ** 20);
const iters = Number(process.argv[3] ?? 20);
// With a third argument `into`, every call writes its result into one array (allreduce's `into`).
const into = process.argv[4] === 'into' ? { into: null } : undefined;
const n = Math.max(1, Math.floor(bytes / 8));
const data = new Float64Array(n);
for (let i = 0; i < n; i++) data[i] = rank + i * 0.5;
if (into) into.into = new Float64Array(n);

let gcMs = 0;
let counting = false;
const gc = new PerformanceObserver((list) => {
  if (!counting) return;
  for (const e of list.getEntries()) gcMs += e.duration;
});
gc.observe({ entryTypes: ['gc'] });

let sum;
for (let i = 0; i < Math.max(3, Math.floor(iters / 10)); i++) sum = await comm.allreduce(data, 'sum', into);
await comm.barrier();
const times = new Float64Array(iters);
counting = true;
const cpu0 = process.cpuUsage();
for (let i = 0; i < iters; i++) {
  const s = performance.now();
  sum = await comm.allreduce(data, 'sum', into);
  times[i] = performance.now() - s;
}
const cpu = process.cpuUsage(cpu0);
counting = false;
const base = (size * (size - 1)) / 2;
for (let i = 0; i < n; i += Math.max(1, n >> 10)) {
  if (sum[i] !== base + (size * i) / 2) throw new Error(`element ${i} is ${sum[i]}`);
}
times.sort();
const line = {
  rank,
  bytes,
  iters,
  into: into !== undefined,
  medianUs: Number((times[iters >> 1] * 1000).toFixed(2)),
  minUs: Number((times[0] * 1000).toFixed(2)),
  meanUs: Number(((times.reduce((a, b) => a + b, 0) / iters) * 1000).toFixed(2)),
  p99Us: Number((times[Math.floor(iters * 0.99)] * 1000).toFixed(2)),
  cpuUsPerCall: Number(((cpu.user + cpu.system) / iters).toFixed(1)),
  userUsPerCall: Number((cpu.user / iters).toFixed(1)),
  systemUsPerCall: Number((cpu.system / iters).toFixed(1)),
  gcMsTotal: Number(gcMs.toFixed(1)),
};
console.log(`CPU ${JSON.stringify(line)}`);
gc.disconnect();
await comm.finalize();
