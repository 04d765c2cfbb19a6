/**
 * Generic fixed-size little-endian frame headers with length-first validation.
 *
 * `defineHeader()` compiles a description (fields, the length field, checks in their
 * declared order) into a small binary schema that both backends interpret: the WASM
 * decoder (asm/header.ts) and the TypeScript twin (ts/core/js/header.ts). Decoding reads
 * the length field first and refuses a length above the maximum before anything else,
 * then runs the checks in order; the first failing check's verdict is the result.
 * Verdicts are the caller's own small integers; 0 means accepted, -1 (INCOMPLETE) means
 * fewer bytes than a header. Check arguments can be changed later (`set`) for values that
 * belong to a connection: the expected job id, the peer count, the current incarnation.
 *
 * Binary schema layout (all u32 little endian unless noted), see docs/core.md:
 *   0 size | 4 length offset | 8 length width (1, 2 or 4) | 12 max length
 *   16 length includes header (0/1) | 20 verdict: too long | 24 verdict: shorter than header
 *   28 field count | 32 field table offset | 36 check count | 40 check table offset
 *   field record (8 bytes): u16 offset, u8 width, u8 kind (0 integer, 1 bytes), u32 0
 *   check record (48 bytes): u16 offset, u8 width, u8 op, i16 verdict, i16 verdict2,
 *     u16 when-offset, u8 when-width (0 = always), u8 when-op (1 equal, 2 not equal,
 *     3 inside [when-value, when-max], 4 outside it), u32 0, u64 a, u64 b, u64 when-value,
 *     u64 when-max
 *   then the expected bytes of bytes-equality checks (check.a holds their offset).
 */
import { PlexusError } from './errors.js';

export const VERDICT_INCOMPLETE = -1;

export type IntWidth = 1 | 2 | 4 | 8;

export interface HeaderFieldDef {
  readonly name: string;
  readonly offset: number;
  /** Integer width in bytes, or the byte count of a bytes field. */
  readonly width: number;
  /** 'uint' (default) or 'bytes'. */
  readonly kind?: 'uint' | 'bytes';
}

export type Int = number | bigint;

export type HeaderCheckDef =
  | {
      readonly name?: string;
      readonly field: string;
      readonly op: 'range';
      readonly min: Int;
      readonly max: Int;
      readonly verdict: number;
      readonly when?: HeaderCondition;
    }
  | {
      readonly name?: string;
      readonly field: string;
      readonly op: 'eq';
      readonly value: Int;
      readonly verdict: number;
      readonly when?: HeaderCondition;
    }
  | {
      /** Three-way: above `value` gives `verdict`, below it gives `below`. */
      readonly name?: string;
      readonly field: string;
      readonly op: 'order';
      readonly value: Int;
      readonly verdict: number;
      readonly below: number;
      readonly when?: HeaderCondition;
    }
  | {
      readonly name?: string;
      readonly field: string;
      readonly op: 'bytes-eq';
      readonly value: Uint8Array;
      readonly verdict: number;
      readonly when?: HeaderCondition;
    }
  | {
      /** Bits in `mask` must be zero (reserved flags). */
      readonly name?: string;
      readonly field: string;
      readonly op: 'mask-zero';
      readonly mask: Int;
      readonly verdict: number;
      readonly when?: HeaderCondition;
    };

/** When a check applies: exactly one of the four forms. */
export interface HeaderCondition {
  readonly field: string;
  readonly equals?: Int;
  readonly notEquals?: Int;
  /** Applies when min <= field <= max. */
  readonly inside?: readonly [Int, Int];
  /** Applies when the field is below min or above max. */
  readonly outside?: readonly [Int, Int];
}

export interface HeaderDef {
  readonly size: number;
  readonly fields: readonly HeaderFieldDef[];
  readonly length: {
    readonly field: string;
    readonly max: number;
    /** Whether the length counts the header too (default: payload only). */
    readonly includesHeader?: boolean;
    readonly verdictTooLong: number;
    readonly verdictTooShort?: number;
  };
  readonly checks: readonly HeaderCheckDef[];
}

export interface HeaderVerdicts {
  /** Frames walked. */
  readonly count: number;
  /** Per frame: offset of its header in the input. */
  readonly offsets: Int32Array;
  /** Per frame: payload length. */
  readonly lengths: Int32Array;
  /** Per frame: verdict (0 accepted). */
  readonly verdicts: Int32Array;
  /** Bytes consumed by whole frames; the rest is an incomplete frame or unread. */
  readonly consumed: number;
}

const OPS = { range: 1, eq: 2, order: 3, 'bytes-eq': 4, 'mask-zero': 5 } as const;
const CHECK_SIZE = 48;
const U64_MAX = (1n << 64n) - 1n;

function bad(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_CORE_HEADER_SCHEMA', message, details);
}

function toU64(v: Int, what: string): bigint {
  if (typeof v === 'number' && !Number.isSafeInteger(v)) throw bad(`${what}: ${v} is not a safe integer`);
  const b = BigInt(v);
  if (b < 0n || b > U64_MAX) throw bad(`${what}: ${v} is outside 0 .. 2^64-1`);
  return b;
}

function maxOfWidth(width: number): bigint {
  return width >= 8 ? U64_MAX : (1n << BigInt(width * 8)) - 1n;
}

export class HeaderSchema {
  readonly size: number;
  readonly fields: readonly HeaderFieldDef[];
  /** The compiled schema; both backends read it. Changes bump `version`. */
  readonly bytes: Uint8Array;
  private readonly dv: DataView;
  private readonly fieldIndex = new Map<string, number>();
  private readonly checkIndex = new Map<string, { at: number; op: number; width: number }>();
  readonly lengthField: HeaderFieldDef;
  readonly maxLength: number;
  readonly includesHeader: boolean;
  version = 0;

  constructor(def: HeaderDef) {
    if (!Number.isInteger(def.size) || def.size < 1 || def.size > 4096) {
      throw bad(`header size ${def.size} must be an integer from 1 to 4096`);
    }
    this.size = def.size;
    this.fields = def.fields;
    def.fields.forEach((f, i) => {
      if (this.fieldIndex.has(f.name)) throw bad(`field "${f.name}" is declared twice`);
      const kind = f.kind ?? 'uint';
      if (kind === 'uint' && ![1, 2, 4, 8].includes(f.width)) {
        throw bad(`field "${f.name}": integer width ${f.width} must be 1, 2, 4 or 8`);
      }
      if (kind === 'bytes' && (!Number.isInteger(f.width) || f.width < 1 || f.width > 255)) {
        throw bad(`field "${f.name}": bytes width ${f.width} must be 1..255`);
      }
      if (!Number.isInteger(f.offset) || f.offset < 0 || f.offset + f.width > def.size) {
        throw bad(`field "${f.name}" at ${f.offset} (+${f.width}) does not fit in a ${def.size}-byte header`);
      }
      this.fieldIndex.set(f.name, i);
    });
    const lf = this.field(def.length.field);
    if ((lf.kind ?? 'uint') !== 'uint' || lf.width > 4) {
      throw bad(`length field "${lf.name}" must be an integer of width 1, 2 or 4`);
    }
    if (!Number.isInteger(def.length.max) || def.length.max < 0 || BigInt(def.length.max) > maxOfWidth(lf.width)) {
      throw bad(`maximum length ${def.length.max} does not fit the ${lf.width}-byte length field`);
    }
    this.lengthField = lf;
    this.maxLength = def.length.max;
    this.includesHeader = def.length.includesHeader === true;

    let extra = 0;
    for (const c of def.checks) if (c.op === 'bytes-eq') extra += this.field(c.field).width;
    const fieldsOff = 48;
    const checksOff = fieldsOff + def.fields.length * 8;
    let bytesOff = checksOff + def.checks.length * CHECK_SIZE;
    const total = (bytesOff + extra + 7) & ~7;
    this.bytes = new Uint8Array(total);
    const dv = new DataView(this.bytes.buffer);
    this.dv = dv;
    dv.setUint32(0, def.size, true);
    dv.setUint32(4, lf.offset, true);
    dv.setUint32(8, lf.width, true);
    dv.setUint32(12, def.length.max, true);
    dv.setUint32(16, this.includesHeader ? 1 : 0, true);
    dv.setInt32(20, def.length.verdictTooLong, true);
    dv.setInt32(24, def.length.verdictTooShort ?? def.length.verdictTooLong, true);
    dv.setUint32(28, def.fields.length, true);
    dv.setUint32(32, fieldsOff, true);
    dv.setUint32(36, def.checks.length, true);
    dv.setUint32(40, checksOff, true);
    def.fields.forEach((f, i) => {
      dv.setUint16(fieldsOff + i * 8, f.offset, true);
      dv.setUint8(fieldsOff + i * 8 + 2, f.width);
      dv.setUint8(fieldsOff + i * 8 + 3, f.kind === 'bytes' ? 1 : 0);
    });
    def.checks.forEach((c, i) => {
      const at = checksOff + i * CHECK_SIZE;
      const f = this.field(c.field);
      const isBytes = f.kind === 'bytes';
      if (isBytes !== (c.op === 'bytes-eq')) {
        throw bad(`check on "${c.field}": ${c.op} does not apply to a ${isBytes ? 'bytes' : 'integer'} field`);
      }
      for (const v of [c.verdict, c.op === 'order' ? c.below : 1]) {
        if (!Number.isInteger(v) || v < 1 || v > 32767)
          throw bad(`check on "${c.field}": verdict ${v} must be 1..32767`);
      }
      const name = c.name ?? c.field;
      if (this.checkIndex.has(name)) throw bad(`check "${name}" is declared twice; give one a name`);
      this.checkIndex.set(name, { at, op: OPS[c.op], width: f.width });
      dv.setUint16(at, f.offset, true);
      dv.setUint8(at + 2, f.width);
      dv.setUint8(at + 3, OPS[c.op]);
      dv.setInt16(at + 4, c.verdict, true);
      dv.setInt16(at + 6, c.op === 'order' ? c.below : 0, true);
      if (c.when) {
        const wf = this.field(c.when.field);
        if (wf.kind === 'bytes') throw bad(`condition on bytes field "${wf.name}" is not supported`);
        const w = c.when;
        const forms = [w.equals, w.notEquals, w.inside, w.outside].filter((x) => x !== undefined);
        if (forms.length !== 1) {
          throw bad(`condition on "${wf.name}" needs exactly one of equals, notEquals, inside, outside`);
        }
        const what = `condition on "${wf.name}"`;
        const range = w.inside ?? w.outside;
        const whenOp = w.equals !== undefined ? 1 : w.notEquals !== undefined ? 2 : w.inside ? 3 : 4;
        const lo = range ? range[0] : ((w.equals ?? w.notEquals) as Int);
        dv.setUint16(at + 8, wf.offset, true);
        dv.setUint8(at + 10, wf.width);
        dv.setUint8(at + 11, whenOp);
        dv.setBigUint64(at + 32, toU64(lo, what), true);
        if (range) dv.setBigUint64(at + 40, toU64(range[1], what), true);
      }
      if (c.op === 'bytes-eq') {
        dv.setBigUint64(at + 16, BigInt(bytesOff), true);
        bytesOff += f.width;
      }
      this.writeArgs(name, c);
    });
  }

  field(name: string): HeaderFieldDef {
    const i = this.fieldIndex.get(name);
    if (i === undefined) throw bad(`no field named "${name}"`, { field: name });
    return this.fields[i] as HeaderFieldDef;
  }

  private writeArgs(name: string, c: HeaderCheckDef): void {
    const ci = this.checkIndex.get(name);
    if (!ci) throw bad(`no check named "${name}"`);
    const { at, width } = ci;
    const lim = maxOfWidth(width);
    const what = `check "${name}"`;
    switch (c.op) {
      case 'range': {
        const lo = toU64(c.min, what);
        const hi = toU64(c.max, what);
        if (hi > lim) throw bad(`${what}: maximum ${c.max} does not fit ${width} bytes`);
        this.dv.setBigUint64(at + 16, lo, true);
        this.dv.setBigUint64(at + 24, hi, true);
        break;
      }
      case 'eq':
      case 'order':
        this.dv.setBigUint64(at + 16, toU64(c.value, what), true);
        break;
      case 'mask-zero':
        this.dv.setBigUint64(at + 16, toU64(c.mask, what), true);
        break;
      case 'bytes-eq': {
        if (!(c.value instanceof Uint8Array) || c.value.length !== width) {
          throw bad(`${what}: expected ${width} bytes`);
        }
        const off = Number(this.dv.getBigUint64(at + 16, true));
        this.bytes.set(c.value, off);
        break;
      }
    }
    this.version++;
  }

  /**
   * Changes a check's argument: a number/bigint for eq, order and mask-zero; [min, max]
   * for range; bytes for bytes-eq.
   */
  set(check: string, value: Int | readonly [Int, Int] | Uint8Array): void {
    const ci = this.checkIndex.get(check);
    if (!ci) throw bad(`no check named "${check}"`, { check });
    const base = { field: '', verdict: 1, below: 1 };
    if (ci.op === OPS.range) {
      if (!Array.isArray(value)) throw bad(`check "${check}" is a range: pass [min, max]`);
      const [min, max] = value as readonly [Int, Int];
      this.writeArgs(check, { ...base, op: 'range', min, max });
    } else if (ci.op === OPS['bytes-eq']) {
      if (!(value instanceof Uint8Array)) throw bad(`check "${check}" compares bytes: pass a Uint8Array`);
      this.writeArgs(check, { ...base, op: 'bytes-eq', value });
    } else {
      if (typeof value !== 'number' && typeof value !== 'bigint') throw bad(`check "${check}" takes an integer`);
      const op = ci.op === OPS.eq ? 'eq' : ci.op === OPS.order ? 'order' : 'mask-zero';
      this.writeArgs(check, op === 'mask-zero' ? { ...base, op, mask: value } : { ...base, op, value });
    }
  }

  /** Reads every field of the header at data[0 ..] (integers as number, or bigint above 2^53). */
  read(data: Uint8Array): Record<string, number | bigint | Uint8Array> {
    if (data.length < this.size) {
      throw new PlexusError('PLX_CORE_HEADER_SHORT', `a header needs ${this.size} bytes, got ${data.length}`);
    }
    const dv = new DataView(data.buffer, data.byteOffset, this.size);
    const out: Record<string, number | bigint | Uint8Array> = {};
    for (const f of this.fields) {
      if (f.kind === 'bytes') out[f.name] = data.slice(f.offset, f.offset + f.width);
      else if (f.width === 1) out[f.name] = dv.getUint8(f.offset);
      else if (f.width === 2) out[f.name] = dv.getUint16(f.offset, true);
      else if (f.width === 4) out[f.name] = dv.getUint32(f.offset, true);
      else {
        const b = dv.getBigUint64(f.offset, true);
        out[f.name] = b <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(b) : b;
      }
    }
    return out;
  }

  /**
   * Turns named values into the per-field u64 values the encoders take, checking that
   * each fits its width. Bytes fields keep their Uint8Array.
   */
  normalize(values: Readonly<Record<string, Int | Uint8Array>>): (bigint | Uint8Array)[] {
    return this.fields.map((f) => {
      const v = values[f.name];
      if (v === undefined) {
        if (f.kind === 'bytes') return new Uint8Array(f.width);
        return 0n;
      }
      if (f.kind === 'bytes') {
        if (!(v instanceof Uint8Array) || v.length !== f.width) {
          throw new PlexusError('PLX_CORE_HEADER_VALUE', `field "${f.name}" takes exactly ${f.width} bytes`);
        }
        return v;
      }
      if (v instanceof Uint8Array) {
        throw new PlexusError('PLX_CORE_HEADER_VALUE', `field "${f.name}" takes an integer, not bytes`);
      }
      if (typeof v === 'number' && !Number.isSafeInteger(v)) {
        throw new PlexusError('PLX_CORE_HEADER_VALUE', `field "${f.name}": ${v} is not an integer`);
      }
      const b = BigInt(v);
      if (b < 0n || b > maxOfWidth(f.width)) {
        throw new PlexusError('PLX_CORE_HEADER_VALUE', `field "${f.name}": ${v} does not fit in ${f.width} bytes`);
      }
      if (f === this.lengthField && b > BigInt(this.maxLength)) {
        throw new PlexusError(
          'PLX_CORE_HEADER_VALUE',
          `length ${v} is above the maximum ${this.maxLength}; split the message`,
        );
      }
      return b;
    });
  }
}

export function defineHeader(def: HeaderDef): HeaderSchema {
  return new HeaderSchema(def);
}
