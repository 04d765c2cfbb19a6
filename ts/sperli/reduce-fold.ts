/**
 * The fold of one contribution at the root of a reduce or allreduce, piece by piece as
 * its bytes come off the connection, straight into the result buffer: no staging copy of
 * the pieces and no accumulator apart from the result. Three kinds of fold:
 *
 * - `copy`: the first operand (rank 0's contribution when the root is another rank) is
 *   written into the result as it arrives;
 * - `seed`: the root's own array is the left operand and the arriving contribution the
 *   right one: result = own op piece, the root's bytes copied one piece at a time just
 *   before the kernel runs on them (so they are still in the cache), never as a separate
 *   pass over the whole array;
 * - `fold`: result = result op piece, in place.
 *
 * Pieces may end inside an element (a TLS record boundary falls anywhere): the bytes of
 * a cut element wait in an 8-byte tail until the rest of it arrives. The arithmetic is
 * plexus/core's `combine` (the process's backend; the WASM kernel runs on its scratch
 * blocks in the shared arena).
 */
import { combine, ELEMENT_WIDTH } from '../core/index.js';
import type { HeldBytes } from './comm-bytes.js';

export type FoldKind = 'copy' | 'seed' | 'fold';

export class PieceFold {
  private readonly width: number;
  private readonly tail = new Uint8Array(8);
  private tailFill = 0;
  /** Bytes of the result written so far (whole elements). */
  private done = 0;

  /**
   * Folds into `result` with `op` on elements of `type`; `own` is the root's array for
   * `seed` (the left operand).
   */
  constructor(
    private readonly result: Uint8Array,
    private readonly kind: FoldKind,
    private readonly type: number,
    private readonly op: number,
    private readonly own?: HeldBytes,
  ) {
    this.width = ELEMENT_WIDTH[type] as number;
  }

  /** Bytes at the front of the result that hold their final value for this contribution. */
  get folded(): number {
    return this.done;
  }

  /** Folds `chunk`, the next bytes of the contribution in order. */
  piece(chunk: Uint8Array): void {
    const w = this.width;
    let i = 0;
    if (this.tailFill > 0) {
      const take = Math.min(w - this.tailFill, chunk.length);
      this.tail.set(chunk.subarray(0, take), this.tailFill);
      this.tailFill += take;
      i = take;
      if (this.tailFill < w) return;
      this.run(this.tail.subarray(0, w));
      this.tailFill = 0;
    }
    const whole = chunk.length - i - ((chunk.length - i) % w);
    if (whole > 0) this.run(i === 0 && whole === chunk.length ? chunk : chunk.subarray(i, i + whole));
    i += whole;
    if (i < chunk.length) {
      this.tail.set(chunk.subarray(i), 0);
      this.tailFill = chunk.length - i;
    }
  }

  private run(src: Uint8Array): void {
    const at = this.done;
    const n = src.length;
    const dst = this.result.subarray(at, at + n);
    if (this.kind === 'copy') dst.set(src);
    else {
      // The root's bytes are read where they are now (an arena view is rebuilt after growth).
      if (this.kind === 'seed') dst.set((this.own as HeldBytes).bytes.subarray(at, at + n));
      combine(dst, src, this.op, this.type);
    }
    this.done = at + n;
  }
}
