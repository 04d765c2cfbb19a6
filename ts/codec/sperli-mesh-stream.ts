/**
 * The SPERLI mesh stream: the frame decoder of one connection as PeerLinks (ts/sperli/mesh-links.ts) uses it:
 * the checks and events of FrameStream (ts/codec/sperli-stream.ts), with one addition.
 * When `streaming` is on, a COLLECTIVE or CKPT_DATA frame of at least STREAM_MIN payload
 * bytes that does not arrive in one chunk is handed on as it arrives instead of being gathered:
 * `begin` (the accepted header), then `piece` for each run of payload bytes (views of
 * the chunks, no copy), then `end`. The bytes on the wire and every check are those of
 * docs/sperli.md; only the moment the receiver sees the payload changes, so a receiver
 * can reduce or copy each piece while the rest is still on its way.
 */

import type { PlexusError } from '../core/errors.js';
import { decodeHeaders } from '../core/index.js';
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

/** Payloads from this size on are handed on piece by piece (when streaming is on). */
export const STREAM_MIN = 64 * 1024;

export type PieceEvent =
  | { readonly kind: 'frame'; readonly header: FrameHeader; readonly payload: Uint8Array }
  | { readonly kind: 'drop'; readonly header: FrameHeader }
  | { readonly kind: 'refuse'; readonly error: PlexusError }
  | { readonly kind: 'begin'; readonly header: FrameHeader }
  | { readonly kind: 'piece'; readonly bytes: Uint8Array }
  | { readonly kind: 'end' };

type Mode = 'header' | 'payload' | 'stream' | 'skip' | 'refused';

function plainView(b: Uint8Array, start: number, length: number): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset + start, length);
}

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
  private mode: Mode = 'header';
  private readonly head = new Uint8Array(FRAME_HEADER_SIZE);
  private headFill = 0;
  private current: FrameHeader | undefined;
  private parts: Uint8Array[] = [];
  /** The payload of the frame being gathered from transient chunks, once it spans more than one. */
  private joined: Uint8Array | undefined;
  private got = 0;
  private want = 0;
  /** The known COLLECTIVE header of the connection's current expectations (null: none). */
  private known: Known | null | undefined;

  /** `ctx` is the connection's receive side (expected values and HELLO state). */
  constructor(private readonly ctx: FrameContext) {}

  /** Whether a frame was refused; the decoder takes nothing after that. */
  get refused(): boolean {
    return this.mode === 'refused';
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
    if (this.mode === 'refused') return;
    if (!(chunk instanceof Uint8Array)) throw new TypeError('PieceStream.push takes a Uint8Array');
    let pos = 0;
    while (pos < chunk.length && !this.refused) {
      if (this.mode === 'header') {
        if (this.headFill === 0 && chunk.length - pos >= FRAME_HEADER_SIZE) {
          const quick = this.knownFrame(chunk, pos, emit, transient);
          if (quick > 0) {
            pos += quick;
            continue;
          }
          const used = this.batch(chunk, pos, emit, transient);
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
          this.begin(decodeFrameHeader(this.ctx, this.head), emit);
        }
      } else if (this.mode === 'stream') {
        const take = Math.min(this.want - this.got, chunk.length - pos);
        this.got += take;
        emit({ kind: 'piece', bytes: plainView(chunk, pos, take) });
        pos += take;
        if (this.got === this.want) {
          this.mode = 'header';
          this.got = 0;
          this.want = 0;
          emit(END);
        }
      } else if (this.mode === 'payload') {
        const take = Math.min(this.want - this.got, chunk.length - pos);
        if (!transient) this.parts.push(plainView(chunk, pos, take));
        else if (take === this.want) this.parts.push(copyOf(chunk, pos, take));
        else {
          // The frame's length was accepted (at most 16 MiB) and its bytes are arriving.
          this.joined ??= new Uint8Array(this.want);
          this.joined.set(plainView(chunk, pos, take), this.got);
        }
        this.got += take;
        pos += take;
        if (this.got === this.want) this.finish(emit);
      } else {
        const take = Math.min(this.want - this.got, chunk.length - pos);
        this.got += take;
        pos += take;
        if (this.got === this.want) this.mode = 'header';
      }
    }
  }

  /**
   * Takes the whole frame at chunk[pos ..] when its header is the connection's known
   * small COLLECTIVE header (class Known) and the peer's HELLO has arrived; returns the
   * bytes used, 0 when the frame is left to the decoder.
   */
  private knownFrame(chunk: Uint8Array, pos: number, emit: (event: PieceEvent) => void, transient: boolean): number {
    if (!this.ctx.helloReceived || chunk[pos + 4] !== FrameType.COLLECTIVE) return 0;
    const length =
      ((chunk[pos] as number) |
        ((chunk[pos + 1] as number) << 8) |
        ((chunk[pos + 2] as number) << 16) |
        ((chunk[pos + 3] as number) << 24)) >>>
      0;
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
    const payload = transient ? copyOf(chunk, start, length) : plainView(chunk, start, length);
    emit({ kind: 'frame', header: k.withLength(length), payload });
    return FRAME_HEADER_SIZE + length;
  }

  /** Judges the whole frames at chunk[pos ..] in one kernel call; returns the bytes used. */
  private batch(chunk: Uint8Array, pos: number, emit: (event: PieceEvent) => void, transient: boolean): number {
    const view = chunk.subarray(pos);
    const r = decodeHeaders(this.ctx.schema, view);
    for (let i = 0; i < r.count; i++) {
      const off = r.offsets[i] as number;
      const out = _outcomeOf(this.ctx, view.subarray(off, off + FRAME_HEADER_SIZE), r.verdicts[i] as number);
      if (out.kind === 'refuse') {
        this.refuse(emit, out.error);
        return off + FRAME_HEADER_SIZE;
      }
      if (out.kind === 'drop') {
        emit({ kind: 'drop', header: out.header });
        continue;
      }
      const start = off + FRAME_HEADER_SIZE;
      const payload = transient ? copyOf(view, start, out.header.length) : plainView(view, start, out.header.length);
      emit({ kind: 'frame', header: out.header, payload });
    }
    return r.consumed;
  }

  private begin(out: ReturnType<typeof decodeFrameHeader>, emit: (event: PieceEvent) => void): void {
    if (out.kind === 'refuse') {
      this.refuse(emit, out.error);
      return;
    }
    this.got = 0;
    this.want = out.header.length;
    if (out.kind === 'drop') {
      emit({ kind: 'drop', header: out.header });
      this.mode = this.want === 0 ? 'header' : 'skip';
      return;
    }
    if (this.streaming && streamsPayload(out.header.type) && this.want >= STREAM_MIN) {
      this.mode = 'stream';
      emit({ kind: 'begin', header: out.header });
      return;
    }
    this.current = out.header;
    this.parts = [];
    this.mode = 'payload';
    if (this.want === 0) this.finish(emit);
  }

  private finish(emit: (event: PieceEvent) => void): void {
    const header = this.current as FrameHeader;
    let payload: Uint8Array;
    if (this.joined !== undefined) payload = this.joined;
    else if (this.parts.length === 0) payload = new Uint8Array(0);
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
    this.joined = undefined;
    this.current = undefined;
    this.got = 0;
    this.want = 0;
    this.mode = 'header';
    emit({ kind: 'frame', header, payload });
  }

  private refuse(emit: (event: PieceEvent) => void, error: PlexusError): void {
    this.mode = 'refused';
    this.parts = [];
    this.joined = undefined;
    this.current = undefined;
    this.headFill = 0;
    emit({ kind: 'refuse', error });
  }
}
