/**
 * Reduce kernels on the WebAssembly core (asm/reduce.ts): combine(a, b, op, type)
 * computes a[i] = a[i] op b[i] element-wise, in place into a. The rules (wrapping
 * integers, logical ops as 0/1, IEEE 754 floats with canonical NaNs) are documented in
 * asm/reduce.ts and ts/core/js/reduce.ts, the bit-identical twin.
 *
 * Operands that already live in linear memory are used in place (zero copy); others are
 * copied into scratch blocks, and a's result is copied back. If a and b overlap in
 * linear memory without being the same range, b is copied first, so it is read as it was
 * before the call.
 */
import { place, wasmRuntime } from './runtime.js';

export function combine(a: Uint8Array, b: Uint8Array, op: number, type: number): void {
  const n = a.byteLength;
  if (n === 0) return;
  const r = wasmRuntime();
  // Pointers of in-memory operands are taken before any scratch allocation: growing the
  // memory detaches the views on the old buffer, but keeps their bytes at the same offsets.
  const buffer = r.arena.buffer;
  const aIn = a.buffer === buffer;
  const bIn = b.buffer === buffer;
  let aPtr = aIn ? a.byteOffset : -1;
  let bPtr = bIn ? b.byteOffset : -1;

  if (aIn && bIn) {
    if (aPtr !== bPtr && aPtr < bPtr + n && bPtr < aPtr + n) {
      const copy = r.scratchB.get(n);
      r.arena.u8.copyWithin(copy, bPtr, bPtr + n);
      bPtr = copy;
    }
  } else {
    if (!aIn) aPtr = place(a, r.scratchA);
    if (!bIn) bPtr = place(b, r.scratchB);
  }

  const rc = r.x.combine(aPtr, bPtr, n, op, type);
  if (rc !== 0) throw new Error(`plexus wasm combine refused op ${op} on element type ${type} (code ${rc}).`);
  // A view of the caller's that lived in linear memory is detached if a scratch
  // allocation above grew the memory; the result is then at the same offset of the new
  // buffer.
  if (!aIn) a.set(r.arena.u8.subarray(aPtr, aPtr + n));
}
