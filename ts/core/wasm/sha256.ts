/**
 * SHA-256 on the WebAssembly kernel (asm/sha256.ts). Inputs that live in the arena are
 * hashed in place; others are copied into a scratch block first, in chunks of at most
 * 1 MiB when they are large (through the stream kernel), so the scratch block stays small.
 * Digests are copied out of linear memory into fresh arrays.
 */
import { PlexusError } from '../errors.js';
import type { Sha256Stream } from '../types.js';
import { place, wasmRuntime } from './runtime.js';

/** Largest piece of an input outside the arena copied into linear memory at once. */
const CHUNK = 1 << 20;
/** Size of the kernel's stream state block (layout in asm/sha256.ts). */
const STATE_BYTES = 128;

/** SHA-256 of `data`: 32 bytes. */
export function sha256(data: Uint8Array): Uint8Array {
  const r = wasmRuntime();
  const len = data.byteLength;
  if (len > CHUNK && data.buffer !== r.arena.buffer) return new Sha256Wasm().update(data).digest();
  const ptr = place(data, r.scratchA);
  const out = r.scratchOut.get(32);
  r.x.sha256(ptr, len, out);
  return r.arena.u8.slice(out, out + 32);
}

/** Digests of many messages: message i is data[offsets[i] .. offsets[i + 1]); 32 bytes each. */
export function sha256Batch(data: Uint8Array, offsets: Uint32Array): Uint8Array {
  const count = Math.max(offsets.length - 1, 0);
  if (count === 0) return new Uint8Array(0);
  const r = wasmRuntime();
  const arena = r.arena;
  // Which inputs already live in the arena is decided before anything is allocated:
  // growing the memory detaches every view of it, the caller's included.
  const buf = arena.buffer;
  let dataPtr = data.buffer === buf ? data.byteOffset : -1;
  let offPtr = offsets.buffer === buf ? offsets.byteOffset : -1;
  const outPtr = r.scratchOut.get(count * 32);
  if (dataPtr < 0) {
    dataPtr = r.scratchA.get(data.byteLength);
    arena.u8.set(data, dataPtr);
  }
  if (offPtr < 0) {
    offPtr = r.scratchB.get(offsets.byteLength);
    arena.u8.set(new Uint8Array(offsets.buffer, offsets.byteOffset, offsets.byteLength), offPtr);
  }
  r.x.sha256Batch(dataPtr, offPtr, count, outPtr);
  return arena.u8.slice(outPtr, outPtr + count * 32);
}

/** Returns the state blocks of streams dropped without a digest to the arena. */
const unreleased = new FinalizationRegistry<number>((state) => {
  wasmRuntime().arena.release(state, STATE_BYTES);
});

/**
 * A streaming SHA-256 whose state lives in a 128-byte arena block, released by `digest`
 * (or, for a stream never digested, when the stream is garbage collected).
 */
export class Sha256Wasm implements Sha256Stream {
  /** The state block, or -1 once digested. */
  private state: number;

  constructor() {
    const r = wasmRuntime();
    this.state = r.arena.alloc(STATE_BYTES);
    r.x.sha256Init(this.state);
    unreleased.register(this, this.state, this);
  }

  update(data: Uint8Array): this {
    const state = this.state;
    if (state < 0) throw digested();
    const r = wasmRuntime();
    const len = data.byteLength;
    if (data.buffer === r.arena.buffer) {
      r.x.sha256Update(state, data.byteOffset, len);
      return this;
    }
    for (let off = 0; off < len; off += CHUNK) {
      const n = Math.min(CHUNK, len - off);
      const ptr = r.scratchA.get(n);
      r.arena.u8.set(n === len ? data : data.subarray(off, off + n), ptr);
      r.x.sha256Update(state, ptr, n);
    }
    return this;
  }

  digest(): Uint8Array {
    const state = this.state;
    if (state < 0) throw digested();
    const r = wasmRuntime();
    const out = r.scratchOut.get(32);
    r.x.sha256Final(state, out);
    this.state = -1;
    unreleased.unregister(this);
    r.arena.release(state, STATE_BYTES);
    return r.arena.u8.slice(out, out + 32);
  }
}

function digested(): PlexusError {
  return new PlexusError(
    'PLX_CORE_DIGESTED',
    'This SHA-256 stream has already produced its digest and cannot be used again; start a new stream.',
  );
}
