/**
 * The SPERLI mesh stream: the frame decoder of one connection as PeerLinks (ts/sperli/mesh-links.ts) uses it:
 * the checks and events of FrameStream (ts/codec/sperli-stream.ts), with one addition.
 * When `streaming` is on, a COLLECTIVE or CKPT_DATA frame of at least STREAM_MIN payload
 * bytes that does not arrive in one chunk is handed on as it arrives instead of being gathered:
 * `begin` (the accepted header), then `piece` for each run of payload bytes (views of
 * the chunks, no copy), then `end`. The bytes on the wire and every check are those of
 * docs/sperli.md; only the moment the receiver sees the payload changes, so a receiver
 * can reduce or copy each piece while the rest is still on its way. Both ride on the shared
 * `FrameAssembler` (frames.ts): a streamed payload is a `pieces` frame, a dropped one `skip`.
 */

import type { PlexusError } from '../core/errors.js';
import { decodeHeaders } from '../core/index.js';
import { getU32 } from './bytes.js';
import { FrameAssembler, type FrameSink, type FrameTake } from './frames.js';
import {
  _outcomeOf,
  type ConnectionExpectations,
  decodeFrameHeader,
  encodeFrameHeader,
  FRAME_HEADER_SIZE,
  FrameContext,
  type FrameHeader,
  FrameType,
} from './sperli-frame.js';
import { plainView, SperliFrameFormat } from './sperli-stream.js';

/** Payloads from this size on are handed on piece by piece (when streaming is on). */
export const STREAM_MIN = 64 * 1024;

export type PieceEvent =
  | { readonly kind: 'frame'; readonly header: FrameHeader; readonly payload: Uint8Array }
  | { readonly kind: 'drop'; readonly header: FrameHeader }
  | { readonly kind: 'refuse'; readonly error: PlexusError }
  | { readonly kind: 'begin'; readonly header: FrameHeader }
  | { readonly kind: 'piece'; readonly bytes: Uint8Array }
  | { readonly kind: 'end' };

/** A copy of `length` bytes of `b` from `start`, in an ArrayBuffer of its own. */
function copyOf(b: Uint8Array, start: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  out.set(plainView(b, start, length));
  return out;
}

const END: PieceEvent = { kind: 'end' };

/** Payload bytes of the COLLECTIVE frames a connection may accept by comparing header bytes (see `Known`). */
const KNOWN_MIN = 16;
const KNOWN_MAX = 4096;

/**
 * The header every small COLLECTIVE frame of one connection carries, byte for byte,
 * apart from its length: type 3, flags, service and membership epoch 0, the job id, the
 * peer's rank as source and this rank as target, this incarnation, epoch 0 and tag 0.
 * The full decoder accepts this header for every length in KNOWN_MIN ..= KNOWN_MAX
 * (checked when it is made, with the connection's own expectations), so a frame whose
 * header bytes 4 .. 52 equal these, of such a length, after the peer's HELLO, is one the
 * decoder accepts: every check of docs/sperli.md holds for it. It is accepted without
 * the header kernel. Any other header goes through the decoder.
 */
class Known {
  readonly bytes: Uint8Array;
  readonly header: FrameHeader;

  private constructor(
    readonly expect: ConnectionExpectations,
    bytes: Uint8Array,
  ) {
    this.bytes = bytes;
    this.header = {
      length: 0,
      type: FrameType.COLLECTIVE,
      flags: 0,
      service: 0,
      membershipEpoch: 0,
      jobId: expect.jobId,
      sourceRank: expect.peerRank,
      targetRank: expect.ownRank,
      incarnation: expect.incarnation,
      tag: 0,
      epoch: 0n,
    };
  }

  /** The known header of a connection that expects `expect`, or undefined if the decoder would not accept it. */
  static of(expect: ConnectionExpectations): Known | undefined {
    const make = (length: number) =>
      encodeFrameHeader({
        type: FrameType.COLLECTIVE,
        jobId: expect.jobId,
        sourceRank: expect.peerRank,
        targetRank: expect.ownRank,
        incarnation: expect.incarnation,
        length,
      });
    const probe = new FrameContext(expect, { helloReceived: true });
    for (const length of [KNOWN_MIN, KNOWN_MAX]) {
      if (decodeFrameHeader(probe, make(length)).kind !== 'accept') return undefined;
    }
    return new Known(expect, make(0));
  }

  /** The accepted header of a frame of `length` payload bytes. */
  withLength(length: number): FrameHeader {
    const h = this.header;
    return {
      length,
      type: h.type,
      flags: 0,
      service: 0,
      membershipEpoch: 0,
      jobId: h.jobId,
      sourceRank: h.sourceRank,
      targetRank: h.targetRank,
      incarnation: h.incarnation,
      tag: 0,
      epoch: 0n,
    };
  }
}

/** COLLECTIVE and CKPT_DATA frames are the ones whose payload may be handed on in pieces. */
function streamsPayload(type: number): boolean {
  return type === FrameType.COLLECTIVE || type === FrameType.CKPT_DATA;
}

export class PieceStream {
  /** Whether large COLLECTIVE and CKPT_DATA payloads are handed on piece by piece. */
  streaming = false;
  private readonly format: SperliFrameFormat;
  private readonly frames: FrameAssembler;
  private readonly sink: FrameSink;
  /** The handler and chunk of the push under way. */
  private emit: (event: PieceEvent) => void = () => {};
  private transient = false;
  /** The known COLLECTIVE header of the connection's current expectations (null: none). */
  private known: Known | null | undefined;

  /** `ctx` is the connection's receive side (expected values and HELLO state). */
  constructor(private readonly ctx: FrameContext) {
    this.format = new SperliFrameFormat(ctx);
    this.frames = new FrameAssembler(this.format);
    this.sink = {
      whole: (chunk, pos) => this.knownFrame(chunk, pos) || this.batch(chunk, pos),
      begin: () => this.begin(),
      frame: (f, joined) => {
        const header = (this.format.last as { header: FrameHeader }).header;
        const n = header.length;
        const payload =
          this.transient && !joined ? copyOf(f, FRAME_HEADER_SIZE, n) : plainView(f, FRAME_HEADER_SIZE, n);
        this.emit({ kind: 'frame', header, payload });
      },
      piece: (chunk, start, length) => this.emit({ kind: 'piece', bytes: plainView(chunk, start, length) }),
      end: () => this.emit(END),
    };
  }

  /** Whether a frame was refused; the decoder takes nothing after that. */
  get refused(): boolean {
    return this.frames.refused;
  }

  /**
   * Feeds bytes; calls `emit` with the events they complete, in order. Payloads and
   * pieces are views of the chunks given: a caller must not change a chunk after pushing
   * it (socket data chunks are never reused), unless it is `transient`. A transient chunk
   * is used again by the caller once `push` returns (a read buffer): then every payload is
   * a copy of its own, and only `piece` events are views of the chunk, valid until the
   * handler of that event returns.
   */
  push(chunk: Uint8Array, emit: (event: PieceEvent) => void, transient = false): void {
    if (this.frames.refused) return;
    if (!(chunk instanceof Uint8Array)) throw new TypeError('PieceStream.push takes a Uint8Array');
    this.emit = emit;
    this.transient = transient;
    try {
      this.frames.feed(chunk, this.sink, transient);
    } catch (e) {
      if (this.frames.error !== e) throw e;
      emit({ kind: 'refuse', error: e as PlexusError });
    }
  }

  /**
   * Takes the whole frame at chunk[pos ..] when its header is the connection's known
   * small COLLECTIVE header (class Known) and the peer's HELLO has arrived; returns the
   * bytes used, 0 when the frame is left to the decoder.
   */
  private knownFrame(chunk: Uint8Array, pos: number): number {
    if (!this.ctx.helloReceived || chunk[pos + 4] !== FrameType.COLLECTIVE) return 0;
    const length = getU32(chunk, pos);
    if (length < KNOWN_MIN || length > KNOWN_MAX || chunk.length - pos < FRAME_HEADER_SIZE + length) return 0;
    let k = this.known;
    if (k === undefined || (k !== null && k.expect !== this.ctx.expectations)) {
      k = Known.of(this.ctx.expectations) ?? null;
      this.known = k;
    }
    if (k === null) return 0;
    const b = k.bytes;
    for (let i = 5; i < FRAME_HEADER_SIZE; i++) if (chunk[pos + i] !== b[i]) return 0;
    const start = pos + FRAME_HEADER_SIZE;
    const payload = this.transient ? copyOf(chunk, start, length) : plainView(chunk, start, length);
    this.emit({ kind: 'frame', header: k.withLength(length), payload });
    return FRAME_HEADER_SIZE + length;
  }

  /** Judges the whole frames at chunk[pos ..] in one kernel call; returns the bytes used. */
  private batch(chunk: Uint8Array, pos: number): number {
    const view = chunk.subarray(pos);
    const r = decodeHeaders(this.ctx.schema, view);
    const emit = this.emit;
    for (let i = 0; i < r.count; i++) {
      const off = r.offsets[i] as number;
      const out = _outcomeOf(this.ctx, view.subarray(off, off + FRAME_HEADER_SIZE), r.verdicts[i] as number);
      if (out.kind === 'refuse') this.frames.refuse(out.error);
      if (out.kind === 'drop') {
        emit({ kind: 'drop', header: out.header });
        continue;
      }
      const start = off + FRAME_HEADER_SIZE;
      const payload = this.transient
        ? copyOf(view, start, out.header.length)
        : plainView(view, start, out.header.length);
      emit({ kind: 'frame', header: out.header, payload });
    }
    return r.consumed;
  }

  /** A judged header: dropped (skipped as it arrives), handed on in pieces, or gathered. */
  private begin(): FrameTake {
    const out = this.format.last as { kind: 'accept' | 'drop'; header: FrameHeader };
    if (out.kind === 'drop') {
      this.emit({ kind: 'drop', header: out.header });
      return 'skip';
    }
    if (this.streaming && streamsPayload(out.header.type) && out.header.length >= STREAM_MIN) {
      this.emit({ kind: 'begin', header: out.header });
      return 'pieces';
    }
    return 'hold';
  }
}
