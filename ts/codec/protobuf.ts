/**
 * Protocol Buffers wire primitives (proto3 encoding) for the hand-written codecs of hot
 * messages: a bounds-checked reader over a span of a buffer and the varint writer. The
 * message schemas stay with their product (Chronacta's AppendRequest and AppendResponse in
 * ts/chronacta/wire.ts); what is here knows fields only by number and wire type.
 *
 * The reader is length-first: a LEN field's length is checked against the bytes left before
 * the cursor moves, a varint longer than 10 bytes or cut short is refused, and a group or an
 * unknown wire type is refused. Every refusal is built by the `fail` the format passes
 * (Chronacta's is PLX_CHRONACTA_BAD_INPUT), with a message that names the span being read.
 */

/** Wire types of proto3 (groups, 3 and 4, are never taken). */
export const WT_VARINT = 0;
export const WT_I64 = 1;
export const WT_LEN = 2;
export const WT_I32 = 5;

/** Builds the refusal of a format for `message` (what was read and what is wrong with it). */
export type ProtoFail = (message: string) => Error;

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** A protobuf reading cursor over `buf[pos..end)`. */
export class ProtoReader {
  constructor(
    readonly buf: Uint8Array,
    public pos: number,
    public end: number,
    private readonly name: string,
    private readonly fail: ProtoFail,
    /** The repeated element this cursor reads, named in errors (-1: none); the name is built only then. */
    public event = -1,
  ) {}

  /** The span being read, as errors name it. */
  get what(): string {
    return this.event < 0 ? this.name : `${this.name}: event ${this.event}`;
  }

  get more(): boolean {
    return this.pos < this.end;
  }

  /** A varint of at most 64 bits, as a number; exact below 2^53 (above: returns > 2^53 - 1). */
  varint(): number {
    const b = this.buf;
    let pos = this.pos;
    let result = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      if (pos >= this.end) throw this.fail(`${this.what}: a varint runs past the end`);
      const x = b[pos++] as number;
      result += (x & 0x7f) * mul;
      if (x < 0x80) {
        this.pos = pos;
        return result;
      }
      mul *= 128;
    }
    throw this.fail(`${this.what}: a varint longer than 10 bytes`);
  }

  /** The length of a LEN field, checked against the bytes left; the cursor is then at its start. */
  len(): number {
    const n = this.varint();
    if (n > this.end - this.pos) throw this.fail(`${this.what}: a field of ${n} bytes runs past the end`);
    return n;
  }

  /** Skips the value of a field of wire type `wireType` (an unknown field). */
  skip(wireType: number): void {
    switch (wireType) {
      case WT_VARINT:
        this.varint();
        return;
      case WT_I64:
        this.fixed(8);
        return;
      case WT_LEN: {
        const n = this.len();
        this.pos += n;
        return;
      }
      case WT_I32:
        this.fixed(4);
        return;
      default:
        throw this.fail(`${this.what}: wire type ${wireType} (groups or unknown) is not taken`);
    }
  }

  private fixed(n: number): void {
    if (this.end - this.pos < n) throw this.fail(`${this.what}: a fixed field runs past the end`);
    this.pos += n;
  }

  /** The next `n` bytes (a length already checked by `len`) as a string; refused unless UTF-8. */
  text(n: number, field: string): string {
    const start = this.pos;
    this.pos += n;
    if (n === 0) return '';
    let ascii = true;
    for (let i = start; i < this.pos; i++) {
      if ((this.buf[i] as number) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return latin1(this.buf, start, this.pos);
    try {
      return utf8.decode(this.buf.subarray(start, this.pos));
    } catch {
      throw this.fail(`${this.what}: ${field} is not UTF-8`);
    }
  }

  /** The refusal of a known field that arrived with a wire type its type does not use. */
  wrongType(field: number, wireType: number): Error {
    return this.fail(`${this.what}: field ${field} has wire type ${wireType}, which its type does not use`);
  }
}

function latin1(b: Uint8Array, start: number, end: number): string {
  if (end - start > 64) return Buffer.from(b.buffer, b.byteOffset + start, end - start).toString('latin1');
  let s = '';
  for (let i = start; i < end; i++) s += String.fromCharCode(b[i] as number);
  return s;
}

/** Bytes of `v` (0 .. 2^53 - 1) as a varint. */
export function varintSize(v: number): number {
  let n = 1;
  while (v >= 128) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}

/** Writes `v` (0 .. 2^53 - 1) as a varint at `pos`; returns the offset after it. */
export function putVarint(out: Uint8Array, pos: number, v: number): number {
  while (v >= 128) {
    out[pos++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  out[pos++] = v;
  return pos;
}
