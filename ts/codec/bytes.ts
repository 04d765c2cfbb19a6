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
 * Builds the error a format throws for a refused read; `what` names the field. A `short` read
 * also gives the bytes the field needs and the bytes left (for formats that name them).
 */
export type ByteFail = (reason: ByteRefusal, what: string, message: string, need?: number, have?: number) => Error;

const TWO_32 = 0x1_0000_0000;

export const defaultFail: ByteFail = (reason, what, message) =>
  new PlexusError(reason === 'short' ? 'PLX_CODEC_SHORT' : 'PLX_CODEC_RANGE', message, { field: what, reason });

/** A bounds-checked cursor over `bytes`; views returned by `bytes()` share its memory. */
export class ByteReader {
  /** The offset of the next read. */
  at: number;
  private readonly dv: DataView;

  constructor(
    readonly buf: Uint8Array,
    private readonly fail: ByteFail = defaultFail,
    start = 0,
  ) {
    this.dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
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
      throw this.fail('short', what, `${what} needs ${n} bytes at offset ${this.at}; ${have} remain`, n, have);
    }
  }

  u8(what = 'u8'): number {
    this.need(1, what);
    return this.buf[this.at++] as number;
  }

  u16(what = 'u16'): number {
    this.need(2, what);
    const v = this.dv.getUint16(this.at, true);
    this.at += 2;
    return v;
  }

  u32(what = 'u32'): number {
    this.need(4, what);
    const v = this.dv.getUint32(this.at, true);
    this.at += 4;
    return v;
  }

  /** A little-endian u64 as a number; above 2^53 - 1 is refused (`range`). */
  u64(what = 'u64'): number {
    this.need(8, what);
    const lo = this.dv.getUint32(this.at, true);
    const hi = this.dv.getUint32(this.at + 4, true);
    if (hi > 0x1fffff) throw this.fail('range', what, `${what} is above 2^53 - 1`);
    this.at += 8;
    return hi * TWO_32 + lo;
  }

  /** A little-endian u64 as a bigint (the full range: epochs and ids that are not positions). */
  u64n(what = 'u64'): bigint {
    this.need(8, what);
    const v = this.dv.getBigUint64(this.at, true);
    this.at += 8;
    return v;
  }

  /** A big-endian u32 (older formats only). */
  u32be(what = 'u32'): number {
    this.need(4, what);
    const v = this.dv.getUint32(this.at, false);
    this.at += 4;
    return v;
  }

  /** A big-endian u64 as a number (older formats only); above 2^53 - 1 is refused. */
  u64be(what = 'u64'): number {
    this.need(8, what);
    const hi = this.dv.getUint32(this.at, false);
    const lo = this.dv.getUint32(this.at + 4, false);
    if (hi > 0x1fffff) throw this.fail('range', what, `${what} is above 2^53 - 1`);
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
      throw this.fail('range', what, `${this.buf.length - this.at} bytes follow the ${what}'s last field`);
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
  private dv: DataView;
  private readonly fixed: boolean;

  constructor(into?: Uint8Array | number, start = 0) {
    this.fixed = into instanceof Uint8Array;
    this.buf = into instanceof Uint8Array ? into : new Uint8Array(into ?? 64);
    this.dv = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
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
    this.dv = new DataView(next.buffer);
  }

  u8(v: number): this {
    this.room(1);
    this.buf[this.at++] = v;
    return this;
  }

  u16(v: number): this {
    this.room(2);
    this.dv.setUint16(this.at, v, true);
    this.at += 2;
    return this;
  }

  u32(v: number): this {
    this.room(4);
    this.dv.setUint32(this.at, v, true);
    this.at += 4;
    return this;
  }

  /** A safe integer (0 .. 2^53 - 1) as a little-endian u64. */
  u64(v: number): this {
    this.room(8);
    this.dv.setUint32(this.at, v % TWO_32, true);
    this.dv.setUint32(this.at + 4, Math.floor(v / TWO_32), true);
    this.at += 8;
    return this;
  }

  /** A bigint (0 .. 2^64 - 1) as a little-endian u64. */
  u64n(v: bigint): this {
    this.room(8);
    this.dv.setBigUint64(this.at, v, true);
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

  /** The bytes written: a view of the buffer from 0 to the cursor. */
  finish(): Uint8Array {
    return this.buf.subarray(0, this.at);
  }
}
