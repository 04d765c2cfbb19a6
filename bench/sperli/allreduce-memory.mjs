// The CPU an 8-byte allreduce costs above the connections: two ranks in one process over
// the in-memory transport (ts/sperli/memory-transport.ts, the same frame code as the TLS
// mesh), no TLS and no sockets. Both ranks call allreduce(Float64Array [rank + 1], 'sum')
// together, ITERS times after 5000 warm-up calls; prints wall time and process CPU (both
// ranks together) per call:
//   node bench/sperli/allreduce-memory.mjs [ROOT] [ITERS]
// ROOT is a checkout whose dist/ is built (default: this one), so two builds can be compared.
import { dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(process.argv[2] ?? resolve(dirname(fileURLToPath(import.meta.url)), '../..'));
const iters = Number(process.argv[3] ?? 50_000);
const { createMemoryTransports } = await import(pathToFileURL(resolve(root, 'dist/sperli/memory-transport.js')).href);
const { Comm } = await import(pathToFileURL(resolve(root, 'dist/sperli/comm.js')).href);
const comms = createMemoryTransports(2).map((t) => new Comm(t));
const data = comms.map((c) => new Float64Array([c.rank + 1]));
const round = () => Promise.all(comms.map((c, i) => c.allreduce(data[i], 'sum')));
for (let i = 0; i < 5000; i++) await round();
const cpu0 = process.cpuUsage();
const t0 = performance.now();
let last;
for (let i = 0; i < iters; i++) last = await round();
const cpu = process.cpuUsage(cpu0);
if (last[0][0] !== 3 || last[1][0] !== 3) throw new Error(`the sum is ${last[0][0]} / ${last[1][0]}, not 3`);
const wall = ((performance.now() - t0) * 1000) / iters;
console.log(
  `${root}: ${wall.toFixed(2)} us per call, ${((cpu.user + cpu.system) / iters).toFixed(2)} us CPU per call (both ranks)`,
);
await Promise.all(comms.map((c) => c.finalize()));
