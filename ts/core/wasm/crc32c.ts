/** CRC-32C on the WebAssembly kernel (zero copy for inputs that live in the arena). */
import { wasmRuntime } from './runtime.js';

const CHUNK = 1 << 20;

export function crc32c(data: Uint8Array, prev: number): number {
  const r = wasmRuntime();
  const n = data.length;
  // One look at the arena's buffer per call (each look reads the memory's current buffer).
  if (data.buffer === r.arena.buffer) return r.x.crc32c(data.byteOffset, n, prev) >>> 0;
  if (n <= CHUNK) {
    const ptr = r.scratchA.get(n);
    r.arena.u8.set(data, ptr);
    return r.x.crc32c(ptr, n, prev) >>> 0;
  }
  // Inputs outside the arena pass through a bounded scratch block.
  const ptr = r.scratchA.get(CHUNK);
  let c = prev;
  for (let off = 0; off < n; off += CHUNK) {
    const part = data.subarray(off, Math.min(off + CHUNK, n));
    r.arena.u8.set(part, ptr);
    c = r.x.crc32c(ptr, part.length, c) >>> 0;
  }
  return c;
}
