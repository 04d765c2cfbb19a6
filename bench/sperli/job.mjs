// The SPERLI side of the SPERLI benchmark (bench/sperli.mjs), a rank program:
//   plexus sperli launch -n N -- node bench/sperli/job.mjs BUDGET_MS [pingpong] [allreduce] [allreduce-new]
//
// The same cases, calibration and timing as bench/sperli/mpi-bench.c. Each case: a few
// warm-up iterations, each timed by rank 0, which picks the number of timed iterations
// from their median so they take about BUDGET_MS (within per-size bounds) and broadcasts
// it; then every iteration is timed on rank 0 with performance.now(), back to back, and
// rank 0 prints one line per case:
//   BENCH {"case":"allreduce","bytes":...,"ranks":...,"iters":...,"medianUs":...,"minUs":...,"cpuUsPerIter":[...]}
// cpuUsPerIter is each rank's process CPU time (user + system) per timed iteration.
// Ping-pong (ranks 0 and 1; the others wait) times one round trip per iteration; rank 1
// sends back the bytes it received. The allreduce is a sum over a Float64Array, checked
// once after the timed iterations.
import { performance } from 'node:perf_hooks';
import { init } from 'plexus/sperli';

const comm = await init();
const { rank, size } = comm;
const budgetMs = Number(process.argv[2] ?? 1000);
const cases = new Set(process.argv.slice(3));

/**
 * [warm-up, least, most] iterations by message size, as in mpi-bench.c. Small cases warm up
 * for 300 calls: enough for a rank's polling (docs/sperli.md, "Waiting for frames") to settle
 * after the large messages of the case before.
 */
function bounds(bytes) {
  if (bytes >= 16 << 20) return [3, 8, 40];
  if (bytes >= 1 << 20) return [5, 20, 400];
  return [300, 100, 5000];
}

function median(xs) {
  const s = Float64Array.from(xs).sort();
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function calibrate(perMs, least, most) {
  const out = new Uint8Array(4);
  if (rank === 0) {
    const want = perMs > 0 ? budgetMs / perMs : most;
    new DataView(out.buffer).setUint32(0, Math.max(least, Math.min(most, Math.floor(want))), true);
  }
  const got = await comm.bcast(0, out);
  return new DataView(got.buffer, got.byteOffset, 4).getUint32(0, true);
}

/** Runs `once` warm-up and timed iterations; rank 0 prints the line. */
async function measure(name, bytes, once) {
  const [warm, least, most] = bounds(bytes);
  const warmTimes = [];
  for (let i = 0; i < warm; i++) {
    const s = performance.now();
    await once();
    warmTimes.push(performance.now() - s);
  }
  const iters = await calibrate(median(warmTimes), least, most);
  const times = new Float64Array(iters);
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < iters; i++) {
    const s = performance.now();
    await once();
    times[i] = performance.now() - s;
  }
  const cpu = process.cpuUsage(cpu0);
  const mine = new Float64Array([(cpu.user + cpu.system) / iters]);
  const all = await comm.gather(0, mine);
  if (rank === 0) {
    const cpuUsPerIter = all.map((b) => Number(new DataView(b.buffer, b.byteOffset, 8).getFloat64(0, true).toFixed(1)));
    const line = {
      case: name,
      bytes,
      ranks: size,
      iters,
      medianUs: Number((median(times) * 1000).toFixed(3)),
      minUs: Number((Math.min(...times) * 1000).toFixed(3)),
      cpuUsPerIter,
    };
    console.log(`BENCH ${JSON.stringify(line)}`);
  }
  await comm.barrier();
}

if (cases.has('pingpong') && size >= 2) {
  for (const bytes of [8, 1 << 20]) {
    const msg = new Uint8Array(bytes).fill(rank + 1);
    await measure('pingpong', bytes, async () => {
      if (rank === 0) {
        await comm.send(1, 7, msg);
        await comm.recv(1, 7);
      } else if (rank === 1) {
        const m = await comm.recv(0, 7);
        await comm.send(0, 7, m.data);
      }
    });
  }
}

// 'allreduce' writes each result into one array given with `into`, as mpi-bench.c passes
// MPI_Allreduce its receive buffer; 'allreduce-new' takes a new result array every call.
// Size by size, the two kinds in turns, so neither runs on a colder process than the other.
for (const bytes of [8, 64 << 10, 1 << 20, 16 << 20]) {
  for (const kind of ['allreduce', 'allreduce-new']) {
    if (!cases.has(kind)) continue;
    const n = bytes / 8;
    const data = new Float64Array(n);
    for (let i = 0; i < n; i++) data[i] = rank + i * 0.5;
    const into = kind === 'allreduce' ? { into: new Float64Array(n) } : undefined;
    let sum;
    await measure(kind, bytes, async () => {
      sum = await comm.allreduce(data, 'sum', into);
    });
    const base = (size * (size - 1)) / 2;
    for (let i = 0; i < n; i += Math.max(1, n >> 10)) {
      if (sum[i] !== base + (size * i) / 2) throw new Error(`allreduce of ${bytes} bytes: element ${i} is ${sum[i]}`);
    }
  }
}

await comm.finalize();
