/**
 * Bytes a communicator call holds across an await. A call may use the caller's bytes
 * some time after it was made (a send waits for the sends before it to the same rank; a
 * reduce at the root combines its own value after the lower ranks' values). A view into
 * the shared arena of plexus/core (`allocShared`) is detached when WebAssembly memory
 * grows in between, but its bytes stay at the same offset of the grown memory, so the
 * view is rebuilt there. Any other detached view (its ArrayBuffer was transferred) is a
 * caller error.
 */
import { allocShared, backend, PlexusError, type SharedBytes } from '../core/index.js';

let probe: SharedBytes | undefined;

/** The current buffer of WebAssembly memory, once the wasm backend has been used here. */
function arenaBuffer(): ArrayBufferLike | undefined {
  if (probe === undefined) {
    if (backend().name !== 'wasm') return undefined;
    try {
      probe = allocShared(0);
    } catch {
      return undefined; // no WebAssembly core: no view can live in its memory
    }
  }
  return probe.u8.buffer;
}

export class HeldBytes {
  private constructor(
    private view: Uint8Array,
    private readonly offset: number,
    readonly length: number,
    private readonly inArena: boolean,
  ) {}

  static of(view: Uint8Array): HeldBytes {
    const arena = arenaBuffer();
    return new HeldBytes(view, view.byteOffset, view.byteLength, arena !== undefined && view.buffer === arena);
  }

  /** The bytes as they are now. */
  get bytes(): Uint8Array {
    if (this.view.byteLength === this.length) return this.view;
    const arena = this.inArena ? arenaBuffer() : undefined;
    if (arena !== undefined) {
      this.view = new Uint8Array(arena, this.offset, this.length);
      return this.view;
    }
    throw new PlexusError(
      'PLX_SPERLI_BAD_ARGUMENT',
      `the ${this.length} bytes given to a pending communicator call were detached (their ArrayBuffer was transferred) before the call used them; keep them until the call settles`,
      { reason: 'detached', length: this.length },
    );
  }
}
