/**
 * Blocks of bytes that kernels read and write in place. With the wasm backend a block
 * lives in the WebAssembly arena, so bulk calls (combine, sha256Batch, crc32c,
 * decodeHeaders) on its views copy nothing; with the js backend it is an ordinary
 * ArrayBuffer. Views are rebuilt after memory growth: read `.u8` (or `view(T)`) again
 * after any allocation rather than keeping an old view.
 */
import { backend } from './backend.js';
import { PlexusError } from './errors.js';
import { wasmRuntime } from './wasm/runtime.js';

type TypedArrayCtor<T> = {
  new (buffer: ArrayBuffer, byteOffset: number, length: number): T;
  readonly BYTES_PER_ELEMENT: number;
};

const released = new FinalizationRegistry<{ ptr: number; cap: number }>((b) => {
  wasmRuntime().arena.release(b.ptr, b.cap);
});

export class SharedBytes {
  readonly byteLength: number;
  /** Byte offset in WebAssembly memory, or -1 for a plain ArrayBuffer. */
  readonly ptr: number;
  private readonly own: ArrayBuffer | undefined;
  private freed = false;

  constructor(byteLength: number) {
    if (!Number.isSafeInteger(byteLength) || byteLength < 0) {
      throw new PlexusError(
        'PLX_CORE_ALLOC_SIZE',
        `allocShared(${byteLength}): the size must be a non-negative integer`,
      );
    }
    this.byteLength = byteLength;
    if (backend().name === 'wasm') {
      const arena = wasmRuntime().arena;
      this.ptr = arena.alloc(byteLength);
      this.own = undefined;
      released.register(this, { ptr: this.ptr, cap: byteLength }, this);
    } else {
      this.ptr = -1;
      this.own = new ArrayBuffer(byteLength);
    }
  }

  private buffer(): ArrayBuffer {
    if (this.freed) throw new PlexusError('PLX_CORE_FREED', 'this SharedBytes block was freed');
    return this.own ?? wasmRuntime().arena.buffer;
  }

  /** A byte view of the block (valid until the next allocation may grow memory). */
  get u8(): Uint8Array {
    return new Uint8Array(this.buffer(), Math.max(this.ptr, 0), this.byteLength);
  }

  /** A typed view of the block; its byte length must be a multiple of the element size. */
  view<T>(ctor: TypedArrayCtor<T>): T {
    const w = ctor.BYTES_PER_ELEMENT;
    if (this.byteLength % w !== 0) {
      throw new PlexusError(
        'PLX_CORE_BAD_LENGTH',
        `a ${this.byteLength}-byte block is not a whole number of ${w}-byte elements`,
      );
    }
    return new ctor(this.buffer(), Math.max(this.ptr, 0), this.byteLength / w);
  }

  /** Returns the block to the arena; its views must not be used afterwards. */
  free(): void {
    if (this.freed) return;
    this.freed = true;
    if (this.ptr >= 0) {
      released.unregister(this);
      wasmRuntime().arena.release(this.ptr, this.byteLength);
    }
  }
}

/** Allocates `byteLength` bytes that kernels use in place (64-byte aligned). */
export function allocShared(byteLength: number): SharedBytes {
  return new SharedBytes(byteLength);
}
