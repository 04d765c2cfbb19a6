/**
 * The shared-memory arena: the part of WebAssembly linear memory above the module's
 * static data, managed from TypeScript. Bulk data is written straight into it through
 * typed-array views, and kernels read it in place: no copy per call.
 *
 * Allocation is by power-of-two size classes (>= 64 bytes, 64-byte aligned) with a free
 * list per class; memory grows in whole pages when a class is empty and never shrinks.
 * Views are rebuilt whenever memory has grown, so a view obtained from the arena after
 * an allocation is never detached.
 */
import { PlexusError } from './errors.js';

const PAGE = 65536;
const MIN_CLASS = 6; // 64 bytes
/** Largest single allocation: 1 GiB. Larger requests are refused, never attempted. */
export const ARENA_MAX_ALLOC = 1 << 30;

export class Arena {
  readonly memory: WebAssembly.Memory;
  private top: number;
  private readonly free: number[][] = [];
  private buf: ArrayBuffer;
  private _u8: Uint8Array;
  private _dv: DataView;

  constructor(memory: WebAssembly.Memory, base: number) {
    this.memory = memory;
    this.top = (base + 63) & ~63;
    this.buf = memory.buffer;
    this._u8 = new Uint8Array(this.buf);
    this._dv = new DataView(this.buf);
  }

  /** The whole linear memory as bytes (refreshed after growth). */
  get u8(): Uint8Array {
    if (this.buf !== this.memory.buffer) this.refresh();
    return this._u8;
  }

  get dv(): DataView {
    if (this.buf !== this.memory.buffer) this.refresh();
    return this._dv;
  }

  /** The current ArrayBuffer of linear memory. */
  get buffer(): ArrayBuffer {
    if (this.buf !== this.memory.buffer) this.refresh();
    return this.buf;
  }

  private refresh(): void {
    this.buf = this.memory.buffer;
    this._u8 = new Uint8Array(this.buf);
    this._dv = new DataView(this.buf);
  }

  /** Size class (log2 of the block size) for a request of `bytes`. */
  private static classOf(bytes: number): number {
    if (bytes <= 1 << MIN_CLASS) return MIN_CLASS;
    return 32 - Math.clz32(bytes - 1);
  }

  /** Allocates a 64-byte aligned block of at least `bytes` bytes; returns its pointer. */
  alloc(bytes: number): number {
    if (!Number.isInteger(bytes) || bytes < 0 || bytes > ARENA_MAX_ALLOC) {
      throw new PlexusError(
        'PLX_CORE_ALLOC_SIZE',
        `Cannot allocate ${bytes} bytes in the WebAssembly arena: the size must be an integer from 0 to ${ARENA_MAX_ALLOC}.`,
        { bytes },
      );
    }
    const cls = Arena.classOf(bytes);
    const list = this.free[cls];
    if (list && list.length > 0) return list.pop() as number;
    const size = 2 ** cls;
    const ptr = this.top;
    const end = ptr + size;
    const have = this.memory.buffer.byteLength;
    if (end > have) {
      const pages = Math.ceil((end - have) / PAGE);
      try {
        this.memory.grow(pages);
      } catch (cause) {
        throw new PlexusError(
          'PLX_CORE_OUT_OF_MEMORY',
          `The WebAssembly arena could not grow by ${pages} pages to hold ${bytes} bytes (linear memory is ${have} bytes, at most 4 GiB).`,
          { bytes, have },
          { cause },
        );
      }
    }
    this.top = end;
    return ptr;
  }

  /** Returns a block from `alloc(bytes)` to its size class. */
  release(ptr: number, bytes: number): void {
    const cls = Arena.classOf(bytes);
    let list = this.free[cls];
    if (!list) {
      list = [];
      this.free[cls] = list;
    }
    list.push(ptr);
  }

  /** Bytes of linear memory handed out so far (high-water mark). */
  get used(): number {
    return this.top;
  }
}

/**
 * A scratch block that only grows: for kernels that copy an input in, work, and copy
 * out within one call. Returns a pointer valid until the next `scratch` call with the
 * same slot.
 */
export class Scratch {
  private ptr = 0;
  private cap = 0;
  constructor(private readonly arena: Arena) {}

  get(bytes: number): number {
    if (bytes > this.cap) {
      if (this.cap > 0) this.arena.release(this.ptr, this.cap);
      let cap = Math.max(bytes, 1024);
      cap = 2 ** Math.ceil(Math.log2(cap));
      this.ptr = this.arena.alloc(cap);
      this.cap = cap;
    }
    return this.ptr;
  }
}
