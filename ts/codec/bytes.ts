/**
 * The byte cursor and writer of the formats in plexus/codec. Numbers are little-endian; a u64
 * is read and written as a JavaScript number within 2^53 - 1 (`u64`) or as a bigint over its
 * whole range (`u64n`). Every read is
 * bounds-checked first, so cut-short input is a coded refusal (`PLX_CODEC_SHORT` unless the
 * format passes its own `fail`), never a RangeError from a DataView. The big-endian reads exist
 * only for formats that kept an older big-endian version readable (Raft journal records v1).
 */
import { PlexusError } from '../core/errors.js';

/** Why a read was refused: `short` (fewer bytes than the field), `range` (a u64 above 2^53 - 1). */
export type ByteRefusal = 'short' | 'range';

/**
 * Builds the error a format throws for a refused read; `what` names the field, `at` is the
 * offset of the read. A `short` read also gives the bytes the field needs and the bytes left
 * (for formats that name them).
 */
export type ByteFail = (
  reason: ByteRefusal,
  what: string,
  message: string,
  at: number,
  need?: number,
  have?: number,
) => Error;

const TWO_32 = 0x1_0000_0000;

export const defaultFail: ByteFail = (reason, what, message) =>
  new PlexusError(reason === 'short' ? 'PLX_CODEC_SHORT' : 'PLX_CODEC_RANGE', message, { field: what, reason });

/**
 * A bounds-checked cursor over `bytes`; views returned by `bytes()` share its memory. It holds
 * no DataView (fields are read byte by byte, as the fixed-offset functions below read them), so
 * a reader per record costs one small object.
 */
export class ByteReader {
  /** The offset of the next read. */
  at: number;

  constructor(
    readonly buf: Uint8Array,
    private readonly fail: ByteFail = defaultFail,
    start = 0,
  ) {
    this.at = start;
  }

  /** Bytes after the cursor. */
  get left(): number {
    return this.buf.length - this.at;
  }

  /** Refuses unless `n` bytes follow the cursor. */
  need(n: number, what = 'field'): void {
    if (n > this.buf.length - this.at) {
      const have = this.buf.length - this.at;
      throw this.fail('short', what, `${what} needs ${n} bytes at offset ${this.at}; ${have} remain`, this.at, n, have);
    }
  }

  u8(what = 'u8'): number {
    this.need(1, what);
    return this.buf[this.at++] as number;
  }

  u16(what = 'u16'): number {
    this.need(2, what);
    const v = getU16(this.buf, this.at);
    this.at += 2;
    return v;
  }

  u32(what = 'u32'): number {
    this.need(4, what);
    const v = getU32(this.buf, this.at);
    this.at += 4;
    return v;
  }

  /** A little-endian u64 as a number; above 2^53 - 1 is refused (`range`). */
  u64(what = 'u64'): number {
    this.need(8, what);
    const lo = getU32(this.buf, this.at);
    const hi = getU32(this.buf, this.at + 4);
    if (hi > 0x1fffff) throw this.fail('range', what, `${what} is above 2^53 - 1`, this.at);
    this.at += 8;
    return hi * TWO_32 + lo;
  }

  /** A little-endian u64 as a bigint (the full range: epochs and ids that are not positions). */
  u64n(what = 'u64'): bigint {
    this.need(8, what);
    const v = getU64n(this.buf, this.at);
    this.at += 8;
    return v;
  }

  /** A big-endian u32 (older formats only). */
  u32be(what = 'u32'): number {
    this.need(4, what);
    const v = getU32be(this.buf, this.at);
    this.at += 4;
    return v;
  }

  /** A big-endian u64 as a number (older formats only); above 2^53 - 1 is refused. */
  u64be(what = 'u64'): number {
    this.need(8, what);
    const hi = getU32be(this.buf, this.at);
    const lo = getU32be(this.buf, this.at + 4);
    if (hi > 0x1fffff) throw this.fail('range', what, `${what} is above 2^53 - 1`, this.at);
    this.at += 8;
    return hi * TWO_32 + lo;
  }

  /** A view of the next `n` bytes (no copy). */
  bytes(n: number, what = 'bytes'): Uint8Array {
    this.need(n, what);
    const out = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }

  /** A u32 length, then a view of that many bytes; the length is checked before anything else. */
  lenBytes(what = 'bytes'): Uint8Array {
    const n = this.u32(`${what} length`);
    return this.bytes(n, what);
  }

  /** A view of every byte after the cursor. */
  rest(): Uint8Array {
    const out = this.buf.subarray(this.at);
    this.at = this.buf.length;
    return out;
  }

  /** Refuses unless the cursor is at the end (`short` is the wrong word: `range` with `what`). */
  end(what = 'record'): void {
    if (this.at !== this.buf.length) {
      throw this.fail('range', what, `${this.buf.length - this.at} bytes follow the ${what}'s last field`, this.at);
    }
  }
}

/**
 * Writes little-endian fields into a buffer: growing (no argument, or a size hint) or fixed
 * (a Uint8Array to fill, from `start`). A fixed writer refuses to run past its buffer with
 * `PLX_CODEC_OVERFLOW`: a caller sized it wrong.
 */
export class ByteWriter {
  at: number;
  private buf: Uint8Array;
  private readonly fixed: boolean;
  /** Made on the first explicit-offset write, for the writer's buffer of the moment. */
  private dv: DataView | undefined;

  constructor(into?: Uint8Array | number, start = 0) {
    this.fixed = into instanceof Uint8Array;
    this.buf = into instanceof Uint8Array ? into : new Uint8Array(into ?? 64);
    this.at = start;
  }

  private room(n: number): void {
    if (this.at + n <= this.buf.length) return;
    if (this.fixed) {
      throw new PlexusError('PLX_CODEC_OVERFLOW', `${n} bytes do not fit at offset ${this.at} of ${this.buf.length}`, {
        at: this.at,
        need: n,
        size: this.buf.length,
      });
    }
    let size = Math.max(64, this.buf.length * 2);
    while (size < this.at + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.at));
    this.buf = next;
    this.dv = undefined;
  }

  u8(v: number): this {
    this.room(1);
    this.buf[this.at++] = v;
    return this;
  }

  u16(v: number): this {
    this.room(2);
    putU16(this.buf, this.at, v);
    this.at += 2;
    return this;
  }

  u32(v: number): this {
    this.room(4);
    putU32(this.buf, this.at, v);
    this.at += 4;
    return this;
  }

  /** A safe integer (0 .. 2^53 - 1) as a little-endian u64. */
  u64(v: number): this {
    this.room(8);
    putU64(this.buf, this.at, v);
    this.at += 8;
    return this;
  }

  /** A bigint (0 .. 2^64 - 1) as a little-endian u64. */
  u64n(v: bigint): this {
    this.room(8);
    putU64n(this.buf, this.at, v);
    this.at += 8;
    return this;
  }

  /** The bytes as they are. */
  bytes(b: Uint8Array): this {
    this.room(b.length);
    this.buf.set(b, this.at);
    this.at += b.length;
    return this;
  }

  /** A u32 length, then the bytes. */
  lenBytes(b: Uint8Array): this {
    return this.u32(b.length).bytes(b);
  }

  /**
   * A string as UTF-8 behind a little-endian length field of `lenBytes` (2 or 4), encoded in
   * place; returns its byte count. The caller judges the count (and may move `at` back).
   */
  text(s: string, lenBytes: 2 | 4): number {
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    this.room(lenBytes + s.length * 3);
    const start = this.at + lenBytes;
    const n = utf8e.encodeInto(s, this.buf.subarray(start)).written;
    if (lenBytes === 2) putU16(this.buf, this.at, n);
    else putU32(this.buf, this.at, n);
    this.at = start + n;
    return n;
  }

  /** Starts over at `start` (a reused writer); a growing writer gives back a buffer above `keep` bytes. */
  reset(start = 0, keep = 1 << 20): this {
    this.at = start;
    if (!this.fixed && this.buf.length > keep) {
      this.buf = new Uint8Array(64);
      this.dv = undefined;
    }
    return this;
  }

  /**
   * A u32 at offset `at` of the buffer, leaving the cursor where it is: for tight loops that
   * fill fixed-offset headers (one cached DataView; past the buffer's end is a RangeError, as
   * a caller sized the buffer wrong).
   */
  u32At(at: number, v: number): this {
    if (this.dv === undefined) this.dv = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    this.dv.setUint32(at, v, true);
    return this;
  }

  /** The bytes written: a view of the buffer from 0 to the cursor. */
  finish(): Uint8Array {
    return this.buf.subarray(0, this.at);
  }

  /** The bytes written, copied out (for a reused writer). */
  copy(): Uint8Array {
    return this.buf.slice(0, this.at);
  }
}

const utf8e = new TextEncoder();

// Fixed-offset fields, for tight loops and headers whose length was checked first: plain
// functions over a Uint8Array (no cursor, no DataView, no bounds check; the caller has
// checked that the field lies inside `b`). The same little-endian layout as the cursor's.

/** The little-endian u16 at b[at]. */
export function getU16(b: Uint8Array, at: number): number {
  return (b[at] as number) | ((b[at + 1] as number) << 8);
}

/** The little-endian u32 at b[at]. */
export function getU32(b: Uint8Array, at: number): number {
  return (
    ((b[at] as number) |
      ((b[at + 1] as number) << 8) |
      ((b[at + 2] as number) << 16) |
      ((b[at + 3] as number) << 24)) >>>
    0
  );
}

/** The big-endian u32 at b[at] (older formats only). */
export function getU32be(b: Uint8Array, at: number): number {
  return (
    (((b[at] as number) << 24) |
      ((b[at + 1] as number) << 16) |
      ((b[at + 2] as number) << 8) |
      (b[at + 3] as number)) >>>
    0
  );
}

/** The little-endian u64 at b[at] as a number; the caller checks the high word (`getU32(b, at + 4) <= 0x1fffff`) where it may be above 2^53 - 1. */
export function getU64(b: Uint8Array, at: number): number {
  return getU32(b, at + 4) * TWO_32 + getU32(b, at);
}

/** The little-endian u64 at b[at] as a bigint. */
export function getU64n(b: Uint8Array, at: number): bigint {
  return (BigInt(getU32(b, at + 4)) << 32n) | BigInt(getU32(b, at));
}

export function putU16(b: Uint8Array, at: number, v: number): void {
  b[at] = v & 0xff;
  b[at + 1] = (v >>> 8) & 0xff;
}

export function putU32(b: Uint8Array, at: number, v: number): void {
  b[at] = v & 0xff;
  b[at + 1] = (v >>> 8) & 0xff;
  b[at + 2] = (v >>> 16) & 0xff;
  b[at + 3] = (v >>> 24) & 0xff;
}

/** A safe integer (0 .. 2^53 - 1) as a little-endian u64 at b[at]. */
export function putU64(b: Uint8Array, at: number, v: number): void {
  putU32(b, at, v % TWO_32);
  putU32(b, at + 4, Math.floor(v / TWO_32));
}

/** A bigint (0 .. 2^64 - 1) as a little-endian u64 at b[at]. */
export function putU64n(b: Uint8Array, at: number, v: bigint): void {
  putU32(b, at, Number(v & 0xffff_ffffn));
  putU32(b, at + 4, Number(v >> 32n));
}
