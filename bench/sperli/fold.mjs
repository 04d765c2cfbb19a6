// The allreduce root's fold of 16 MiB of f64 arriving in 16 KiB pieces (one TLS record
// each), as ts/sperli/reduce-fold.ts does it, on each backend of plexus/core:
//
//   node bench/sperli/fold.mjs [ROUNDS]
//
// - wasm: the root's own piece copied into the result, then the WASM kernel (which places
//   both 16 KiB operands in its scratch blocks and writes the result piece back);
// - js: the same with the TypeScript twin, in place;
// - staged: the fold before this layout (own array copied into an arena accumulator, the
//   pieces gathered into a 256 KiB arena block, the accumulator copied into the result);
// - copy: one plain 16 MiB copy, for scale.
// Prints the minimum of 41 runs of each, ROUNDS times (default 3), interleaved.
import { performance } from 'node:perf_hooks';
import { allocShared, combine, kernels } from '../../dist/core/index.js';

const rounds = Number(process.argv[2] ?? 3);
const L = 16 << 20;
const PIECE = 16 * 1024;
const RUN = 256 * 1024;
const [wasm, js] = kernels();
const own = new Uint8Array(Float64Array.from({ length: L / 8 }, (_, i) => i * 0.5).buffer);
const pieces = [];
for (let at = 0; at < L; at += PIECE) {
  pieces.push(new Uint8Array(Float64Array.from({ length: PIECE / 8 }, () => 1.5).buffer));
}
const result = new Uint8Array(L);
const acc = allocShared(L);
const stage = allocShared(RUN);

const direct = (kernel) => () => {
  let at = 0;
  for (const p of pieces) {
    const r = result.subarray(at, at + p.length);
    r.set(own.subarray(at, at + p.length));
    kernel.combine(r, p, 1, 6);
    at += p.length;
  }
};
const cases = {
  wasm: direct(wasm),
  js: direct(js),
  staged() {
    acc.u8.set(own);
    let base = 0;
    let fill = 0;
    const fold = (n) => {
      const m = acc.u8;
      combine(m.subarray(base, base + n), stage.u8.subarray(0, n), 'sum', 'f64');
      result.set(m.subarray(base, base + n), base);
      base += n;
      fill = 0;
    };
    for (const p of pieces) {
      stage.u8.set(p, fill);
      fill += p.length;
      if (fill === RUN) fold(RUN);
    }
    if (fill > 0) fold(fill);
  },
  copy() {
    result.set(own);
  },
};
for (let r = 0; r < rounds; r++) {
  const line = [];
  for (const [name, f] of Object.entries(cases)) {
    let best = Number.POSITIVE_INFINITY;
    for (let i = 0; i < 41; i++) {
      const s = performance.now();
      f();
      best = Math.min(best, performance.now() - s);
    }
    line.push(`${name} ${best.toFixed(2)} ms`);
  }
  console.log(line.join(' | '));
}
const check = new Float64Array(result.buffer, 0, 3);
if (check[2] !== 1) throw new Error(`the last case left ${check[2]} where 1 belongs`);
