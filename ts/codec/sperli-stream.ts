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
 */
import type { PlexusError } from '../core/errors.js';
import { decodeHeaders } from '../core/index.js';
import {
  _outcomeOf,
  decodeFrameHeader,
  FRAME_HEADER_SIZE,
  type FrameContext,
  type FrameHeader,
} from './sperli-frame.js';

export type StreamEvent =
  | { readonly kind: 'frame'; readonly header: FrameHeader; readonly payload: Uint8Array }
  | { readonly kind: 'drop'; readonly header: FrameHeader }
  | { readonly kind: 'refuse'; readonly error: PlexusError };

type Mode = 'header' | 'payload' | 'skip' | 'refused';

/**
 * A plain Uint8Array over part of `b`'s memory (no copy). Socket chunks are Buffers, whose
 * `slice` does not copy; payloads handed on are plain Uint8Arrays, so `slice` copies.
 */
function plainView(b: Uint8Array, start: number, length: number): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset + start, length);
}

export class FrameStream {
  private mode: Mode = 'header';
  private readonly head = new Uint8Array(FRAME_HEADER_SIZE);
  private headFill = 0;
  private current: FrameHeader | undefined;
  private parts: Uint8Array[] = [];
  private got = 0;
  private want = 0;

  /** `ctx` is the connection's receive side (expected values and HELLO state). */
  constructor(private readonly ctx: FrameContext) {}

  /** Whether a frame was refused; the decoder takes nothing after that. */
  get refused(): boolean {
    return this.mode === 'refused';
  }

  /** Whether the bytes so far end inside a frame (a close now cuts it). */
  get midFrame(): boolean {
    return this.mode === 'payload' || this.mode === 'skip' || (this.mode === 'header' && this.headFill > 0);
  }

  /** Bytes the decoder holds: a partial header and the payload bytes received so far. */
  get buffered(): number {
    return this.headFill + (this.mode === 'payload' ? this.got : 0);
  }

  /**
   * Feeds bytes; returns the events they complete, in order. Payloads are views of the
   * chunks given (no copy when a payload lies in one chunk): a caller must not change a
   * chunk after pushing it. Socket data chunks are never reused, so this holds for them.
   */
  push(chunk: Uint8Array): StreamEvent[] {
    const events: StreamEvent[] = [];
    if (this.mode === 'refused') return events;
    if (!(chunk instanceof Uint8Array)) throw new TypeError('FrameStream.push takes a Uint8Array');
    let pos = 0;
    while (pos < chunk.length && !this.refused) {
      if (this.mode === 'header') {
        if (this.headFill === 0 && chunk.length - pos >= FRAME_HEADER_SIZE) {
          const used = this.batch(chunk, pos, events);
          if (used > 0) {
            pos += used;
            continue;
          }
        }
        const take = Math.min(FRAME_HEADER_SIZE - this.headFill, chunk.length - pos);
        this.head.set(chunk.subarray(pos, pos + take), this.headFill);
        this.headFill += take;
        pos += take;
        if (this.headFill === FRAME_HEADER_SIZE) {
          this.headFill = 0;
          this.begin(decodeFrameHeader(this.ctx, this.head), events);
        }
      } else if (this.mode === 'payload') {
        const take = Math.min(this.want - this.got, chunk.length - pos);
        this.parts.push(plainView(chunk, pos, take));
        this.got += take;
        pos += take;
        if (this.got === this.want) this.finish(events);
      } else {
        const take = Math.min(this.want - this.got, chunk.length - pos);
        this.got += take;
        pos += take;
        if (this.got === this.want) this.mode = 'header';
      }
    }
    return events;
  }

  /**
   * Judges the whole frames at chunk[pos ..] in one kernel call and emits them; returns
   * the bytes consumed (0 when not even one whole frame is there).
   */
  private batch(chunk: Uint8Array, pos: number, events: StreamEvent[]): number {
    const view = chunk.subarray(pos);
    const r = decodeHeaders(this.ctx.schema, view);
    for (let i = 0; i < r.count; i++) {
      const off = r.offsets[i] as number;
      const out = _outcomeOf(this.ctx, view.subarray(off, off + FRAME_HEADER_SIZE), r.verdicts[i] as number);
      if (out.kind === 'refuse') {
        this.refuse(events, out.error);
        return off + FRAME_HEADER_SIZE;
      }
      if (out.kind === 'drop') {
        events.push({ kind: 'drop', header: out.header });
        continue;
      }
      const start = off + FRAME_HEADER_SIZE;
      events.push({ kind: 'frame', header: out.header, payload: plainView(view, start, out.header.length) });
    }
    return r.consumed;
  }

  private begin(out: ReturnType<typeof decodeFrameHeader>, events: StreamEvent[]): void {
    if (out.kind === 'refuse') {
      this.refuse(events, out.error);
      return;
    }
    this.got = 0;
    this.want = out.header.length;
    if (out.kind === 'drop') {
      events.push({ kind: 'drop', header: out.header });
      this.mode = this.want === 0 ? 'header' : 'skip';
      return;
    }
    this.current = out.header;
    this.parts = [];
    this.mode = 'payload';
    if (this.want === 0) this.finish(events);
  }

  private finish(events: StreamEvent[]): void {
    const header = this.current as FrameHeader;
    let payload: Uint8Array;
    if (this.parts.length === 0) payload = new Uint8Array(0);
    else if (this.parts.length === 1) payload = this.parts[0] as Uint8Array;
    else {
      payload = new Uint8Array(this.want);
      let at = 0;
      for (const p of this.parts) {
        payload.set(p, at);
        at += p.length;
      }
    }
    this.parts = [];
    this.current = undefined;
    this.got = 0;
    this.want = 0;
    this.mode = 'header';
    events.push({ kind: 'frame', header, payload });
  }

  private refuse(events: StreamEvent[], error: PlexusError): void {
    this.mode = 'refused';
    this.parts = [];
    this.current = undefined;
    this.headFill = 0;
    events.push({ kind: 'refuse', error });
  }
}
