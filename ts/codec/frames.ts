/**
 * A byte-fed frame assembler: no I/O, no timers. A transport pushes whatever bytes arrive; `push`
 * returns the whole frames they complete. Length first: once a frame's `headerBytes` are there,
 * the format's `frameLength` reads them (and may refuse them) and says how long the whole frame
 * is; that length is checked against `maxFrame` before any payload byte is read, held or
 * allocated. A frame lying in one chunk is handed on as a view of it (no copy); a frame spread
 * over several chunks is joined once, when its last byte arrives, so what the assembler holds
 * never exceeds the bytes received. The first refusal is thrown, and every later `push` throws
 * it again: the connection is to be closed.
 */
import { PlexusError } from '../core/errors.js';

export interface FrameFormat {
  /** Bytes of the fixed header that carries the length. */
  readonly headerBytes: number;
  /** The largest whole frame (header included) accepted. */
  readonly maxFrame: number;
  /** The whole frame's length from its header bytes (a view of exactly `headerBytes`); may throw a coded refusal. */
  frameLength(header: Uint8Array): number;
  /**
   * The same judgement as `frameLength`, read in place at bytes[at, at + headerBytes) (no view
   * made): a hot path's option, used when the header lies in one pushed chunk.
   */
  frameLengthAt?(bytes: Uint8Array, at: number): number;
  /** The refusal of a frame above `maxFrame` (default `PLX_CODEC_FRAME_TOO_LARGE`). */
  tooLarge?(length: number, max: number): Error;
}

/**
 * Receives whole frames as spans: `bytes[start, end)`. A frame lying in one pushed chunk is
 * that chunk with its bounds (no view made); a joined frame is its own array from 0.
 */
export interface FrameSink {
  frame(bytes: Uint8Array, start: number, end: number): void;
}

/** Appends each frame to an array as a view. */
class ArraySink implements FrameSink {
  constructor(readonly out: Uint8Array[]) {}
  frame(bytes: Uint8Array, start: number, end: number): void {
    this.out.push(start === 0 && end === bytes.length ? bytes : bytes.subarray(start, end));
  }
}

export function frameTooLarge(length: number, max: number): PlexusError {
  return new PlexusError(
    'PLX_CODEC_FRAME_TOO_LARGE',
    `a frame of ${length} bytes is above the ${max} this connection accepts`,
    { length, max },
  );
}

export class FrameAssembler {
  private readonly head: Uint8Array;
  private headFill = 0;
  /** The current frame's whole length once its header is judged; 0 while reading a header. */
  private want = 0;
  private parts: Uint8Array[] = [];
  private got = 0;
  private failure: Error | undefined;

  constructor(private readonly format: FrameFormat) {
    if (!Number.isSafeInteger(format.headerBytes) || format.headerBytes < 1) {
      throw new PlexusError('PLX_CODEC_BAD_FORMAT', 'headerBytes must be a positive integer', {
        headerBytes: format.headerBytes,
      });
    }
    if (!(format.maxFrame >= format.headerBytes)) {
      throw new PlexusError('PLX_CODEC_BAD_FORMAT', 'maxFrame must be at least headerBytes', {
        maxFrame: format.maxFrame,
      });
    }
    this.head = new Uint8Array(format.headerBytes);
  }

  /** Bytes held of a frame not yet whole. */
  get buffered(): number {
    return this.want === 0 ? this.headFill : this.got;
  }

  /** Whether the bytes so far end inside a frame. */
  get midFrame(): boolean {
    return this.buffered > 0;
  }

  /** Whether a frame was refused (every later push throws). */
  get refused(): boolean {
    return this.failure !== undefined;
  }

  /**
   * Feeds bytes. Frames are views of the chunks given where possible: a caller must not change
   * a chunk after pushing it (socket chunks are never reused; copy a reused read buffer first).
   */
  push(chunk: Uint8Array): Uint8Array[] {
    const out: Uint8Array[] = [];
    this.pushInto(chunk, out);
    return out;
  }

  /**
   * `push`, appending the frames to `out` (a reader's queue): the frames a chunk completes
   * before a refused header are in `out` when the refusal is thrown.
   */
  pushInto(chunk: Uint8Array, out: Uint8Array[]): void {
    this.pushSpans(chunk, new ArraySink(out));
  }

  /**
   * `push` for a hot reader: each frame goes to `sink` as a span of the chunk it lies in (no
   * view, no array), in order; frames before a refused header reach the sink before the
   * refusal is thrown.
   */
  pushSpans(chunk: Uint8Array, sink: FrameSink): void {
    if (this.failure) throw this.failure;
    try {
      this.run(chunk, sink);
    } catch (e) {
      this.failure = e as Error;
      this.parts = [];
      throw e;
    }
  }

  private run(chunk: Uint8Array, out: FrameSink): void {
    const hb = this.format.headerBytes;
    let pos = 0;
    while (pos < chunk.length) {
      if (this.want === 0) {
        if (this.headFill === 0 && chunk.length - pos >= hb) {
          // The header lies in this chunk: judge it in place, and hand on the frame as a view if it is all here.
          const total = this.judgeAt(chunk, pos);
          if (chunk.length - pos >= total) {
            out.frame(chunk, pos, pos + total);
            pos += total;
            continue;
          }
          this.want = total;
          this.parts = [chunk.subarray(pos)];
          this.got = chunk.length - pos;
          pos = chunk.length;
          continue;
        }
        const take = Math.min(hb - this.headFill, chunk.length - pos);
        this.head.set(chunk.subarray(pos, pos + take), this.headFill);
        this.headFill += take;
        pos += take;
        if (this.headFill < hb) continue;
        this.headFill = 0;
        const total = this.judge(this.head);
        const header = this.head.slice();
        if (total === hb) {
          out.frame(header, 0, hb);
          continue;
        }
        this.want = total;
        this.parts = [header];
        this.got = hb;
        continue;
      }
      const take = Math.min(this.want - this.got, chunk.length - pos);
      this.parts.push(chunk.subarray(pos, pos + take));
      this.got += take;
      pos += take;
      if (this.got === this.want) {
        const frame = this.join();
        out.frame(frame, 0, frame.length);
      }
    }
  }

  private judgeAt(bytes: Uint8Array, at: number): number {
    const f = this.format;
    return this.check(
      f.frameLengthAt !== undefined
        ? f.frameLengthAt(bytes, at)
        : f.frameLength(bytes.subarray(at, at + f.headerBytes)),
    );
  }

  private judge(header: Uint8Array): number {
    return this.check(this.format.frameLength(header));
  }

  private check(total: number): number {
    const { headerBytes, maxFrame } = this.format;
    if (!Number.isSafeInteger(total) || total < headerBytes) {
      throw new PlexusError('PLX_CODEC_BAD_LENGTH', `a frame header gives a length of ${total} bytes`, {
        length: total,
        min: headerBytes,
      });
    }
    if (total > maxFrame) throw (this.format.tooLarge ?? frameTooLarge)(total, maxFrame);
    return total;
  }

  private join(): Uint8Array {
    const parts = this.parts;
    let frame: Uint8Array;
    if (parts.length === 1) frame = parts[0] as Uint8Array;
    else {
      frame = new Uint8Array(this.want);
      let at = 0;
      for (const p of parts) {
        frame.set(p, at);
        at += p.length;
      }
    }
    this.parts = [];
    this.got = 0;
    this.want = 0;
    return frame;
  }
}
