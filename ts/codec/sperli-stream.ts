/**
 * A byte-fed decoder of the SPERLI frames of one TLS connection: no I/O, no timers.
 * The transport pushes whatever bytes arrive; `push` returns the events they complete.
 *
 * - `frame`: an accepted frame and its whole payload.
 * - `drop`: a frame of an older incarnation; its payload bytes are skipped as they
 *   arrive and never held.
 * - `refuse`: the first refused frame (H1610); the decoder then takes nothing more, and
 *   the connection is to be closed and the job aborted.
 *
 * The header is read and judged first (length before anything else), so no payload byte
 * is read before its header is accepted. Payload bytes are held only as they arrive, so
 * what the decoder holds never exceeds the bytes actually received: a header declaring
 * 16 MiB followed by 10 bytes holds 10 payload bytes. Whole frames already in one chunk
 * are judged together by the batch header kernel (`decodeHeaders`).
 *
 * The bytes are gathered by the shared `FrameAssembler` (frames.ts) with the SPERLI header as
 * its format (`SperliFrameFormat`): a dropped frame is a `skip` frame, a refusal is the
 * assembler's refusal, handed on as the `refuse` event.
 */
import type { PlexusError } from '../core/errors.js';
import { decodeHeaders } from '../core/index.js';
import { FrameAssembler, type FrameFormat, type FrameSink, type FrameTake } from './frames.js';
import {
  _outcomeOf,
  decodeFrameHeader,
  FRAME_HEADER_SIZE,
  type FrameContext,
  type FrameHeader,
  MAX_PAYLOAD,
} from './sperli-frame.js';

export type StreamEvent =
  | { readonly kind: 'frame'; readonly header: FrameHeader; readonly payload: Uint8Array }
  | { readonly kind: 'drop'; readonly header: FrameHeader }
  | { readonly kind: 'refuse'; readonly error: PlexusError };

/**
 * A plain Uint8Array over part of `b`'s memory (no copy). Socket chunks are Buffers, whose
 * `slice` does not copy; payloads handed on are plain Uint8Arrays, so `slice` copies.
 */
export function plainView(b: Uint8Array, start: number, length: number): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset + start, length);
}

/**
 * The SPERLI frame header as a `FrameFormat` of the shared assembler: `frameLength` runs the
 * full header decoder of the connection (refusing with its H1610 error) and keeps the outcome
 * (`last`) for the stream that judges what to do with the frame's payload.
 */
export class SperliFrameFormat implements FrameFormat {
  readonly headerBytes = FRAME_HEADER_SIZE;
  readonly maxFrame = FRAME_HEADER_SIZE + MAX_PAYLOAD;
  /** The outcome of the header judged last (accepted or dropped). */
  last: { readonly kind: 'accept' | 'drop'; readonly header: FrameHeader } | undefined;

  constructor(private readonly ctx: FrameContext) {}

  frameLength(header: Uint8Array): number {
    const out = decodeFrameHeader(this.ctx, header);
    if (out.kind === 'refuse') throw out.error;
    this.last = out;
    return FRAME_HEADER_SIZE + out.header.length;
  }
}

export class FrameStream {
  private readonly format: SperliFrameFormat;
  private readonly frames: FrameAssembler;
  private events: StreamEvent[] = [];
  private readonly sink: FrameSink;

  /** `ctx` is the connection's receive side (expected values and HELLO state). */
  constructor(private readonly ctx: FrameContext) {
    this.format = new SperliFrameFormat(ctx);
    this.frames = new FrameAssembler(this.format);
    this.sink = {
      whole: (chunk, pos) => this.batch(chunk, pos),
      begin: () => this.begin(),
      frame: (f) => {
        const header = (this.format.last as { header: FrameHeader }).header;
        this.events.push({ kind: 'frame', header, payload: plainView(f, FRAME_HEADER_SIZE, header.length) });
      },
    };
  }

  /** Whether a frame was refused; the decoder takes nothing after that. */
  get refused(): boolean {
    return this.frames.refused;
  }

  /** Whether the bytes so far end inside a frame (a close now cuts it). */
  get midFrame(): boolean {
    return this.frames.midFrame;
  }

  /** Bytes the decoder holds: a partial header and the payload bytes received so far. */
  get buffered(): number {
    const held = this.frames.buffered;
    return this.frames.inBody && held > 0 ? held - FRAME_HEADER_SIZE : held;
  }

  /**
   * Feeds bytes; returns the events they complete, in order. Payloads are views of the
   * chunks given (no copy when a payload lies in one chunk): a caller must not change a
   * chunk after pushing it. Socket data chunks are never reused, so this holds for them.
   */
  push(chunk: Uint8Array): StreamEvent[] {
    if (this.frames.refused) return [];
    if (!(chunk instanceof Uint8Array)) throw new TypeError('FrameStream.push takes a Uint8Array');
    const events: StreamEvent[] = [];
    this.events = events;
    try {
      this.frames.feed(chunk, this.sink);
    } catch (e) {
      if (this.frames.error !== e) throw e;
      events.push({ kind: 'refuse', error: e as PlexusError });
    }
    return events;
  }

  /** A judged header: a dropped frame's payload is skipped as it arrives, never held. */
  private begin(): FrameTake {
    const out = this.format.last as { kind: 'accept' | 'drop'; header: FrameHeader };
    if (out.kind === 'accept') return 'hold';
    this.events.push({ kind: 'drop', header: out.header });
    return 'skip';
  }

  /**
   * Judges the whole frames at chunk[pos ..] in one kernel call and emits them; returns
   * the bytes consumed (0 when not even one whole frame is there).
   */
  private batch(chunk: Uint8Array, pos: number): number {
    const view = chunk.subarray(pos);
    const r = decodeHeaders(this.ctx.schema, view);
    const events = this.events;
    for (let i = 0; i < r.count; i++) {
      const off = r.offsets[i] as number;
      const out = _outcomeOf(this.ctx, view.subarray(off, off + FRAME_HEADER_SIZE), r.verdicts[i] as number);
      if (out.kind === 'refuse') this.frames.refuse(out.error);
      if (out.kind === 'drop') {
        events.push({ kind: 'drop', header: out.header });
        continue;
      }
      const start = off + FRAME_HEADER_SIZE;
      events.push({ kind: 'frame', header: out.header, payload: plainView(view, start, out.header.length) });
    }
    return r.consumed;
  }
}
