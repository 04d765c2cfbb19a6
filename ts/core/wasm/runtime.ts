/**
 * The process-wide WebAssembly runtime: the module's exports, the arena over its linear
 * memory, and per-purpose scratch blocks. Created on first use.
 */
import { Arena, Scratch } from '../arena.js';
import { loadWasm, type WasmExports } from './module.js';

export interface WasmRuntime {
  readonly x: WasmExports;
  readonly arena: Arena;
  /** Scratch blocks for copying inputs in: `a` and `b` for two operands, `out` for results. */
  readonly scratchA: Scratch;
  readonly scratchB: Scratch;
  readonly scratchOut: Scratch;
}

let rt: WasmRuntime | undefined;

export function wasmRuntime(): WasmRuntime {
  if (rt) return rt;
  const x = loadWasm();
  const arena = new Arena(x.memory, x.heapBase());
  rt = {
    x,
    arena,
    scratchA: new Scratch(arena),
    scratchB: new Scratch(arena),
    scratchOut: new Scratch(arena),
  };
  return rt;
}

/**
 * The pointer of `view` inside linear memory if it already lives there (zero copy),
 * otherwise -1.
 */
export function inArena(view: ArrayBufferView): number {
  const r = wasmRuntime();
  return view.buffer === r.arena.buffer ? view.byteOffset : -1;
}

/** Pointer to `view`'s bytes in linear memory, copying them into `scratch` if needed. */
export function place(view: Uint8Array, scratch: Scratch): number {
  const r = wasmRuntime();
  if (view.buffer === r.arena.buffer) return view.byteOffset;
  const ptr = scratch.get(view.byteLength);
  r.arena.u8.set(view, ptr);
  return ptr;
}
