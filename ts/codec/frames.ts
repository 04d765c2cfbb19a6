/**
 * A byte-fed frame assembler: no I/O, no timers. A transport pushes whatever bytes arrive; `push`
 * returns the whole frames they complete. Length first: once a frame's `headerBytes` are there,
 * the format's `frameLength` reads them (and may refuse them) and says how long the whole frame
 * is; that length is checked against `maxFrame` before any payload byte is read, held or
 * allocated. A frame lying in one chunk is handed on as a view of it (no copy); a frame spread
 * over several chunks is joined once, when its last byte arrives, so what the assembler holds
 * never exceeds the bytes received. The first refusal is thrown, and every later `push` throws
 * it again: the connection is to be closed.
 *
 * `feed` is the same assembler with a `FrameSink` instead of a returned list, for formats that
 * decide per frame how its bytes after the header are taken: held and handed on whole (`hold`,
 * what `push` does), counted and never held (`skip`: a frame to drop), or handed on as they
 * arrive (`pieces`: a large payload a receiver consumes while the rest is on its way). A sink
 * may also take the whole frames at the start of a chunk by the format's own path (`whole`: a
 * batch header kernel), and a transient chunk (a read buffer the caller reuses) is copied
 * instead of viewed.
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
   * made): a hot path's option, used when the header lies in one fed chunk and the sink has
   * no `begin`.
   */
  frameLengthAt?(bytes: Uint8Array, at: number): number;
  /** The refusal of a frame above `maxFrame` (default `PLX_CODEC_FRAME_TOO_LARGE`). */
  tooLarge?(length: number, max: number): Error;
}

/** How a frame's bytes after its header are taken (see `FrameSink.begin`). */
export type FrameTake = 'hold' | 'skip' | 'pieces';

/** Where `feed` hands what it assembles; every callback runs inside `feed`, in wire order. */
export interface FrameSink {
  /**
   * A whole held frame (header included). `joined` is true when it was put together from
   * several chunks (memory of its own); otherwise it is a view of the chunk being fed.
   */
  frame(frame: Uint8Array, joined: boolean): void;
  /**
   * A whole held frame as the span `bytes[start, end)`, in place of `frame` when present (a hot
   * reader's option: no view is made; a joined frame is its own array from 0).
   */
  span?(bytes: Uint8Array, start: number, end: number): void;
  /**
   * Called once per frame right after its header is judged (`header` is valid during the call
   * only; `total` is the whole frame's accepted length): how its bytes after the header are
   * taken. Absent: `hold`.
   */
  begin?(header: Uint8Array, total: number): FrameTake;
  /**
   * A run of a `pieces` frame's bytes after its header: `chunk[start .. start + length)` of the
   * chunk being fed (no view is made here: the sink makes the one it hands on).
   */
  piece?(chunk: Uint8Array, start: number, length: number): void;
  /** The last byte of a `pieces` frame has arrived. */
  end?(): void;
  /**
   * At a frame boundary with at least a header's bytes left: takes whole frames from
   * chunk[pos ..] by the format's own path and returns the bytes used (0: left to the
   * assembler). A refusal found there is thrown with `FrameAssembler.refuse`.
   */
  whole?(chunk: Uint8Array, pos: number): number;
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
  private take: FrameTake = 'hold';
  private parts: Uint8Array[] = [];
  /** The frame being gathered from transient chunks, allocated at its accepted length. */
  private joined: Uint8Array | undefined;
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

  /** Bytes held of a frame not yet whole (a `skip` or `pieces` frame holds none). */
  get buffered(): number {
    if (this.want === 0) return this.headFill;
    return this.take === 'hold' ? this.got : 0;
  }

  /** Whether the bytes so far end inside a frame. */
  get midFrame(): boolean {
    return this.want !== 0 || this.headFill > 0;
  }

  /** Whether the current frame's header has been judged and its later bytes are arriving. */
  get inBody(): boolean {
    return this.want !== 0;
  }

  /** Whether a frame was refused (every later push throws). */
  get refused(): boolean {
    return this.failure !== undefined;
  }

  /** The refusal, once there is one. */
  get error(): Error | undefined {
    return this.failure;
  }

  /**
   * Feeds bytes. Frames are views of the chunks given where possible: a caller must not change
   * a chunk after pushing it (socket chunks are never reused; copy a reused read buffer first).
   */
  push(chunk: Uint8Array): Uint8Array[] {
    const out: Uint8Array[] = [];
    try {
      this.feed(chunk, { frame: (f) => out.push(f) });
    } catch (e) {
      if (this.failure === undefined) this.refuse(e as Error);
      throw e;
    }
    return out;
  }

  /**
   * Feeds bytes, handing what they complete to `sink`. A refusal (of the format's header
   * decoder, of the length, or passed to `refuse`) is kept and thrown, now and on every later
   * call; an error thrown by the sink's own callbacks passes through and leaves the assembler
   * as it was. With `transient`, nothing is kept as a view of `chunk` past the call: a frame
   * spread over chunks is gathered into a buffer of its accepted length (at most `maxFrame`).
   */
  feed(chunk: Uint8Array, sink: FrameSink, transient = false): void {
    if (this.failure) throw this.failure;
    const hb = this.format.headerBytes;
    const n = chunk.length;
    let pos = 0;
    while (pos < n) {
      if (this.want === 0) {
        if (this.headFill === 0 && n - pos >= hb) {
          if (sink.whole !== undefined) {
            const used = sink.whole(chunk, pos);
            if (used > 0) {
              pos += used;
              continue;
            }
          }
          // The header lies in this chunk: judge it in place, and hand on the frame as a view (or a
          // span) if it is all here.
          let total: number;
          let take: FrameTake = 'hold';
          if (sink.begin === undefined && this.format.frameLengthAt !== undefined) total = this.judgeAt(chunk, pos);
          else {
            const header = chunk.subarray(pos, pos + hb);
            total = this.judge(header);
            if (sink.begin !== undefined) take = sink.begin(header, total);
          }
          if (take === 'hold' && n - pos >= total) {
            if (sink.span !== undefined) sink.span(chunk, pos, pos + total);
            else sink.frame(chunk.subarray(pos, pos + total), false);
            pos += total;
            continue;
          }
          pos += hb;
          if (this.open(take, total, sink)) this.keep(chunk.subarray(pos - hb, pos), transient);
          continue;
        }
        const k = Math.min(hb - this.headFill, n - pos);
        this.head.set(chunk.subarray(pos, pos + k), this.headFill);
        this.headFill += k;
        pos += k;
        if (this.headFill < hb) continue;
        this.headFill = 0;
        const total = this.judge(this.head);
        const take = sink.begin === undefined ? 'hold' : sink.begin(this.head, total);
        if (take === 'hold' && total === hb) {
          const frame = this.head.slice();
          if (sink.span !== undefined) sink.span(frame, 0, hb);
          else sink.frame(frame, true);
          continue;
        }
        if (this.open(take, total, sink)) this.keep(transient ? this.head : this.head.slice(), transient);
        continue;
      }
      const k = Math.min(this.want - this.got, n - pos);
      if (this.take === 'hold') this.keep(chunk.subarray(pos, pos + k), transient);
      else {
        this.got += k;
        if (this.take === 'pieces') sink.piece?.(chunk, pos, k);
      }
      pos += k;
      if (this.got === this.want) this.close(sink);
    }
  }

  /**
   * Refuses: keeps `error` (thrown by this and every later call) and drops what is held. A
   * sink's `whole` uses it for a refusal its own path finds.
   */
  refuse(error: Error): never {
    this.failure = error;
    this.parts = [];
    this.joined = undefined;
    this.headFill = 0;
    this.want = 0;
    this.got = 0;
    throw error;
  }

  /** Starts a frame whose header was judged; false when it ends with its header (nothing to keep). */
  private open(take: FrameTake, total: number, sink: FrameSink): boolean {
    const hb = this.format.headerBytes;
    if (total === hb) {
      if (take === 'pieces') sink.end?.();
      return false;
    }
    this.want = total;
    this.take = take;
    if (take === 'hold') {
      this.got = 0;
      return true;
    }
    this.got = hb;
    return false;
  }

  private keep(bytes: Uint8Array, transient: boolean): void {
    if (!transient) this.parts.push(bytes);
    else {
      this.joined ??= new Uint8Array(this.want);
      this.joined.set(bytes, this.got);
    }
    this.got += bytes.length;
  }

  private close(sink: FrameSink): void {
    const take = this.take;
    this.got = 0;
    this.want = 0;
    this.take = 'hold';
    if (take === 'hold') {
      const [frame, joined] = this.join();
      if (sink.span !== undefined) sink.span(frame, 0, frame.length);
      else sink.frame(frame, joined);
    } else if (take === 'pieces') sink.end?.();
  }

  private judge(header: Uint8Array): number {
    let total: number;
    try {
      total = this.format.frameLength(header);
    } catch (e) {
      return this.refuse(e as Error);
    }
    return this.checkLength(total);
  }

  /** `judge` of the header at bytes[at, at + headerBytes), through the format's `frameLengthAt`. */
  private judgeAt(bytes: Uint8Array, at: number): number {
    let total: number;
    try {
      total = (this.format.frameLengthAt as (b: Uint8Array, a: number) => number)(bytes, at);
    } catch (e) {
      return this.refuse(e as Error);
    }
    return this.checkLength(total);
  }

  private checkLength(total: number): number {
    const { headerBytes, maxFrame } = this.format;
    if (!Number.isSafeInteger(total) || total < headerBytes) {
      this.refuse(
        new PlexusError('PLX_CODEC_BAD_LENGTH', `a frame header gives a length of ${total} bytes`, {
          length: total,
          min: headerBytes,
        }),
      );
    }
    if (total > maxFrame) this.refuse((this.format.tooLarge ?? frameTooLarge)(total, maxFrame));
    return total;
  }

  private join(): [Uint8Array, boolean] {
    const parts = this.parts;
    this.parts = [];
    if (this.joined !== undefined) {
      const frame = this.joined;
      this.joined = undefined;
      return [frame, true];
    }
    if (parts.length === 1) return [parts[0] as Uint8Array, false];
    let size = 0;
    for (const p of parts) size += p.length;
    const frame = new Uint8Array(size);
    let at = 0;
    for (const p of parts) {
      frame.set(p, at);
      at += p.length;
    }
    return [frame, true];
  }
}
