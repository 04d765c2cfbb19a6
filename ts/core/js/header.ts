/**
 * The TypeScript twin of asm/header.ts: a DataView interpreter of the same compiled
 * schema (ts/core/header-schema.ts), with the same order of checks and the same verdicts.
 */
import { type HeaderSchema, type HeaderVerdicts, VERDICT_INCOMPLETE } from '../header-schema.js';

function readUint(dv: DataView, p: number, width: number): bigint {
  if (width === 1) return BigInt(dv.getUint8(p));
  if (width === 2) return BigInt(dv.getUint16(p, true));
  if (width === 4) return BigInt(dv.getUint32(p, true));
  return dv.getBigUint64(p, true);
}

/** Reads up to 4-byte unsigned fields as numbers: the length field's fast path. */
function readSmall(dv: DataView, p: number, width: number): number {
  if (width === 1) return dv.getUint8(p);
  if (width === 2) return dv.getUint16(p, true);
  return dv.getUint32(p, true);
}

function verdictOf(s: DataView, sb: Uint8Array, dv: DataView, p: number): number {
  const size = s.getUint32(0, true);
  const len = readSmall(dv, p + s.getUint32(4, true), s.getUint32(8, true));
  if (len > s.getUint32(12, true)) return s.getInt32(20, true);
  if (s.getUint32(16, true) !== 0 && len < size) return s.getInt32(24, true);
  const n = s.getUint32(36, true);
  let c = s.getUint32(40, true);
  for (let i = 0; i < n; i++, c += 48) {
    const whenWidth = s.getUint8(c + 10);
    if (whenWidth !== 0) {
      const w = readUint(dv, p + s.getUint16(c + 8, true), whenWidth);
      const whenOp = s.getUint8(c + 11);
      const lo = s.getBigUint64(c + 32, true);
      const hit = whenOp <= 2 ? w === lo : w >= lo && w <= s.getBigUint64(c + 40, true);
      if ((whenOp === 1 || whenOp === 3) !== hit) continue;
    }
    const op = s.getUint8(c + 3);
    const fp = p + s.getUint16(c, true);
    const width = s.getUint8(c + 2);
    if (op === 4) {
      const exp = Number(s.getBigUint64(c + 16, true));
      for (let k = 0; k < width; k++) {
        if (dv.getUint8(fp + k) !== sb[exp + k]) return s.getInt16(c + 4, true);
      }
      continue;
    }
    const v = readUint(dv, fp, width);
    const a = s.getBigUint64(c + 16, true);
    if (op === 1) {
      if (v < a || v > s.getBigUint64(c + 24, true)) return s.getInt16(c + 4, true);
    } else if (op === 2) {
      if (v !== a) return s.getInt16(c + 4, true);
    } else if (op === 3) {
      if (v > a) return s.getInt16(c + 4, true);
      if (v < a) return s.getInt16(c + 6, true);
    } else if (op === 5) {
      if ((v & a) !== 0n) return s.getInt16(c + 4, true);
    }
  }
  return 0;
}

function views(schema: HeaderSchema, data: Uint8Array): [DataView, DataView] {
  return [
    new DataView(schema.bytes.buffer, schema.bytes.byteOffset, schema.bytes.byteLength),
    new DataView(data.buffer, data.byteOffset, data.byteLength),
  ];
}

export function headerCheck(schema: HeaderSchema, data: Uint8Array): number {
  if (data.length < schema.size) return VERDICT_INCOMPLETE;
  const [s, dv] = views(schema, data);
  return verdictOf(s, schema.bytes, dv, 0);
}

export function headerDecodeBatch(schema: HeaderSchema, data: Uint8Array, maxFrames: number): HeaderVerdicts {
  const [s, dv] = views(schema, data);
  const size = schema.size;
  const cap = Math.max(0, Math.min(maxFrames, Math.floor(data.length / size)));
  const offsets = new Int32Array(cap);
  const lengths = new Int32Array(cap);
  const verdicts = new Int32Array(cap);
  const lenOff = schema.lengthField.offset;
  const lenWidth = schema.lengthField.width;
  const maxLen = schema.maxLength;
  const incl = schema.includesHeader;
  const vTooLong = s.getInt32(20, true);
  const vTooShort = s.getInt32(24, true);
  let off = 0;
  let n = 0;
  while (n < cap && data.length - off >= size) {
    const v = verdictOf(s, schema.bytes, dv, off);
    let len = readSmall(dv, off + lenOff, lenWidth);
    if (len > maxLen) {
      offsets[n] = off;
      verdicts[n] = vTooLong;
      n++;
      break;
    }
    if (incl) {
      if (len < size) {
        offsets[n] = off;
        verdicts[n] = vTooShort;
        n++;
        break;
      }
      len -= size;
    }
    if (data.length - off - size < len) break;
    offsets[n] = off;
    lengths[n] = len;
    verdicts[n] = v;
    n++;
    off += size + len;
  }
  return {
    count: n,
    offsets: offsets.subarray(0, n),
    lengths: lengths.subarray(0, n),
    verdicts: verdicts.subarray(0, n),
    consumed: off,
  };
}

export function headerEncode(schema: HeaderSchema, values: readonly (bigint | Uint8Array)[], out: Uint8Array): void {
  const dv = new DataView(out.buffer, out.byteOffset, out.byteLength);
  schema.fields.forEach((f, i) => {
    const v = values[i] as bigint | Uint8Array;
    if (v instanceof Uint8Array) out.set(v, f.offset);
    else if (f.width === 1) dv.setUint8(f.offset, Number(v));
    else if (f.width === 2) dv.setUint16(f.offset, Number(v), true);
    else if (f.width === 4) dv.setUint32(f.offset, Number(v), true);
    else dv.setBigUint64(f.offset, v, true);
  });
}
