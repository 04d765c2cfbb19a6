/**
 * Frame headers on the WebAssembly kernel. The compiled schema is copied into linear
 * memory once per schema version (it changes only when a check argument is set).
 */
import type { HeaderSchema, HeaderVerdicts } from '../header-schema.js';
import { place, wasmRuntime } from './runtime.js';

interface Placed {
  ptr: number;
  cap: number;
  version: number;
}
const placed = new WeakMap<HeaderSchema, Placed>();
const released = new FinalizationRegistry<{ ptr: number; cap: number }>((b) => {
  wasmRuntime().arena.release(b.ptr, b.cap);
});

function schemaPtr(schema: HeaderSchema): number {
  const r = wasmRuntime();
  let p = placed.get(schema);
  if (!p) {
    const cap = schema.bytes.length;
    p = { ptr: r.arena.alloc(cap), cap, version: -1 };
    placed.set(schema, p);
    released.register(schema, { ptr: p.ptr, cap });
  }
  if (p.version !== schema.version) {
    r.arena.u8.set(schema.bytes, p.ptr);
    p.version = schema.version;
  }
  return p.ptr;
}

export function headerCheck(schema: HeaderSchema, data: Uint8Array): number {
  const r = wasmRuntime();
  const sp = schemaPtr(schema);
  const head = data.subarray(0, Math.min(data.length, schema.size));
  const dp = place(head, r.scratchA);
  const out = r.scratchOut.get(8);
  return r.x.headerDecode(sp, dp, head.length, out);
}

export function headerDecodeBatch(schema: HeaderSchema, data: Uint8Array, maxFrames: number): HeaderVerdicts {
  const r = wasmRuntime();
  const sp = schemaPtr(schema);
  const dp = place(data, r.scratchA);
  const cap = Math.max(0, Math.min(maxFrames, Math.floor(data.length / schema.size)));
  const outPtr = r.scratchOut.get(4 + cap * 12);
  const n = r.x.headerDecodeBatch(sp, dp, data.length, outPtr, cap);
  // One copy out of linear memory for the three arrays (a fresh ArrayBuffer each costs more than the call).
  const dv = r.arena.dv;
  const consumed = dv.getInt32(outPtr, true);
  const all = new Int32Array(3 * n);
  for (let i = 0; i < n; i++) {
    all[i] = dv.getInt32(outPtr + 4 + i * 4, true);
    all[n + i] = dv.getInt32(outPtr + 4 + cap * 4 + i * 4, true);
    all[2 * n + i] = dv.getInt32(outPtr + 4 + cap * 8 + i * 4, true);
  }
  return {
    count: n,
    offsets: all.subarray(0, n),
    lengths: all.subarray(n, 2 * n),
    verdicts: all.subarray(2 * n),
    consumed,
  };
}

export function headerEncode(schema: HeaderSchema, values: readonly (bigint | Uint8Array)[], out: Uint8Array): void {
  const r = wasmRuntime();
  const sp = schemaPtr(schema);
  const nf = schema.fields.length;
  let extra = 0;
  for (const v of values) if (v instanceof Uint8Array) extra += v.length;
  const base = r.scratchB.get(nf * 8 + extra + schema.size);
  const outPtr = base + nf * 8 + extra;
  const u8 = r.arena.u8;
  const dv = r.arena.dv;
  let bp = base + nf * 8;
  for (let i = 0; i < nf; i++) {
    const v = values[i] as bigint | Uint8Array;
    if (v instanceof Uint8Array) {
      u8.set(v, bp);
      dv.setBigUint64(base + i * 8, BigInt(bp), true);
      bp += v.length;
    } else dv.setBigUint64(base + i * 8, v, true);
  }
  r.x.headerEncode(sp, base, outPtr);
  out.set(r.arena.u8.subarray(outPtr, outPtr + schema.size));
}
