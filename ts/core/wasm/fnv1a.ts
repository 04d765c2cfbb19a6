/**
 * FNV-1a 64 on the WebAssembly kernel. Strings are UTF-8 encoded straight into linear
 * memory (`TextEncoder.encodeInto`); a batch is joined and encoded once, and the kernel
 * finds each string's end by counting UTF-16 units.
 */
import * as twin from '../js/fnv1a.js';
import { place, wasmRuntime } from './runtime.js';

const encoder = new TextEncoder();

export function fnv1a64(data: Uint8Array): bigint {
  const r = wasmRuntime();
  const ptr = place(data, r.scratchA);
  return BigInt.asUintN(64, r.x.fnv1a64(ptr, data.length));
}

export function fnv1a64String(s: string): bigint {
  const r = wasmRuntime();
  const cap = s.length * 3;
  const ptr = r.scratchA.get(cap);
  const { written } = encoder.encodeInto(s, r.arena.u8.subarray(ptr, ptr + cap));
  return BigInt.asUintN(64, r.x.fnv1a64(ptr, written));
}

/** Encodes the batch into linear memory; returns [bytesPtr, bytesLen, unitLensPtr]. */
function encodeBatch(items: readonly string[]): [number, number, number] {
  const r = wasmRuntime();
  const n = items.length;
  const joined = items.join('');
  const cap = joined.length * 3;
  const bytesPtr = r.scratchA.get(cap);
  const lensPtr = r.scratchB.get(n * 4);
  const { written } = encoder.encodeInto(joined, r.arena.u8.subarray(bytesPtr, bytesPtr + cap));
  const lens = new Uint32Array(r.arena.buffer, lensPtr, n);
  for (let i = 0; i < n; i++) lens[i] = (items[i] as string).length;
  return [bytesPtr, written, lensPtr];
}

export function fnv1a64Batch(items: readonly string[]): BigUint64Array {
  const r = wasmRuntime();
  const n = items.length;
  const [bytesPtr, len, lensPtr] = encodeBatch(items);
  const outPtr = r.scratchOut.get(n * 8);
  const stop = r.x.fnv1a64Utf8Batch(bytesPtr, len, lensPtr, n, outPtr);
  // A lone surrogate at the end of one string joined with one at the start of the next
  // encodes differently from the two apart: hash such a batch one string at a time.
  if (stop >= 0) {
    const out = new BigUint64Array(n);
    for (let i = 0; i < n; i++) out[i] = fnv1a64String(items[i] as string);
    return out;
  }
  return new BigUint64Array(r.arena.buffer.slice(outPtr, outPtr + n * 8));
}

export function shardBatch(items: readonly string[], shardCount: number): Uint32Array {
  const r = wasmRuntime();
  const n = items.length;
  const [bytesPtr, len, lensPtr] = encodeBatch(items);
  const outPtr = r.scratchOut.get(n * 4);
  const stop = r.x.shardUtf8Batch(bytesPtr, len, lensPtr, n, shardCount - 1, outPtr);
  if (stop >= 0) return twin.shardBatch(items, shardCount);
  return new Uint32Array(r.arena.buffer.slice(outPtr, outPtr + n * 4));
}
