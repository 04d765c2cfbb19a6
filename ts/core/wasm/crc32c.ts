/** CRC-32C on the WebAssembly kernel (zero copy for inputs that live in the arena). */
import { place, wasmRuntime } from './runtime.js';

const CHUNK = 1 << 20;

export function crc32c(data: Uint8Array, prev: number): number {
  const r = wasmRuntime();
  if (data.buffer === r.arena.buffer || data.length <= CHUNK) {
    return r.x.crc32c(place(data, r.scratchA), data.length, prev) >>> 0;
  }
  // Inputs outside the arena pass through a bounded scratch block.
  let c = prev;
  for (let off = 0; off < data.length; off += CHUNK) {
    const part = data.subarray(off, Math.min(off + CHUNK, data.length));
    c = r.x.crc32c(place(part, r.scratchA), part.length, c) >>> 0;
  }
  return c;
}
