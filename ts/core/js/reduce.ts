/*
 * Reduce kernels, pure TypeScript twin of asm/reduce.ts: combine(a, b, op, type)
 * computes a[i] = a[i] op b[i] element-wise, in place into a. Both give bit-identical
 * results under these rules:
 *
 * Element types (codes, ts/core/codes.ts): 0 u8, 1 i32, 2 u32, 3 i64, 4 u64, 5 f32,
 * 6 f64; widths 1, 4, 4, 8, 8, 4, 8 bytes; little endian.
 * Operations: 1 sum, 2 prod, 3 min, 4 max, 5 land, 6 lor, 7 lxor, 8 band, 9 bor, 10 bxor.
 * Allowed pairs (reduceAllowed): u8 takes band/bor/bxor; f32 and f64 take
 * sum/prod/min/max; the integer types take all ten. The caller validates the pair and
 * the lengths (equal, a whole number of elements).
 *
 * - Integers wrap (two's complement). min/max compare signed for i32/i64 and unsigned
 *   for u32/u64.
 * - Logical ops: the result is 1 if (a != 0) OP (b != 0) holds, else 0, written as an
 *   element of the type.
 * - Bitwise ops act on the bytes and do not depend on the type.
 * - Floats follow IEEE 754 per element: sum = a + b and prod = a * b, rounded once to
 *   the type. For f32 the sum or product of two f32 values is computed as a double and
 *   rounded to f32 on the store; this equals a single f32 rounding. min/max return NaN
 *   if either operand is NaN, and order -0 below +0: min(-0, +0) = -0,
 *   max(-0, +0) = +0 (Math.min/Math.max, IEEE 754-2019 minimum/maximum).
 * - Every NaN result of a float operation is written as the canonical quiet NaN:
 *   0x7FC00000 for f32, 0x7FF8000000000000 for f64, through an integer view (a NaN
 *   stored through a float view may keep any bit pattern).
 * - Denormals are neither flushed on input nor on output.
 *
 * Trailing bytes that do not fill an element are left untouched. If a and b overlap
 * without being the same range, b is read as it was before the call.
 *
 * Paths: bitwise ops work on 32-bit words (when a and b are equally aligned modulo 4)
 * or bytes, at any alignment. Other ops work on typed-array views over the callers'
 * buffers when both byte offsets are multiples of the element width; otherwise on
 * aligned copies that are written back. 64-bit integers are handled as two 32-bit
 * halves (no BigInt). On a big-endian host the elements are byte-swapped into aligned
 * copies first.
 */

const SUM = 1;
const PROD = 2;
const MIN = 3;
const MAX = 4;
const LAND = 5;
const LOR = 6;
const LXOR = 7;
const BAND = 8;
const BOR = 9;

const T_I32 = 1;
const T_U32 = 2;
const T_I64 = 3;
const T_U64 = 4;
const T_F32 = 5;
const T_F64 = 6;

const WIDTH: readonly number[] = [1, 4, 4, 8, 8, 4, 8];

const HOST_LE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
/** Index of the low and high 32-bit half of a 64-bit element in a Uint32Array. */
const LO = HOST_LE ? 0 : 1;
const HI = 1 - LO;

const NAN32 = 0x7fc00000;
const NAN64_HI = 0x7ff80000;

/**
 * a[i] = a[i] op b[i] over the `type` elements of a and b (byte views of equal length),
 * in place into a.
 */
export function combine(a: Uint8Array, b: Uint8Array, op: number, type: number): void {
  const n = a.byteLength;
  if (n === 0) return;
  let bb = b;
  if (
    a.buffer === b.buffer &&
    a.byteOffset !== b.byteOffset &&
    a.byteOffset < b.byteOffset + n &&
    b.byteOffset < a.byteOffset + n
  ) {
    bb = b.slice();
  }
  if (op >= BAND) {
    bitwise(a, bb, n, op);
    return;
  }
  const w = WIDTH[type] as number;
  const count = Math.floor(n / w);
  if (HOST_LE && a.byteOffset % w === 0 && bb.byteOffset % w === 0) {
    elements(a.buffer, a.byteOffset, bb.buffer, bb.byteOffset, count, op, type);
    return;
  }
  const ta = a.slice(0, count * w);
  const tb = HOST_LE && bb.byteOffset % w === 0 ? bb : bb.slice(0, count * w);
  if (!HOST_LE) {
    swapElements(ta, w);
    swapElements(tb, w);
  }
  elements(ta.buffer, ta.byteOffset, tb.buffer, tb.byteOffset, count, op, type);
  if (!HOST_LE) swapElements(ta, w);
  a.set(ta);
}

/** Reverses the bytes of each w-byte element of u (in place). */
function swapElements(u: Uint8Array, w: number): void {
  for (let i = 0; i + w <= u.length; i += w) {
    for (let p = i, q = i + w - 1; p < q; p++, q--) {
      const t = u[p] as number;
      u[p] = u[q] as number;
      u[q] = t;
    }
  }
}

function bitwise(a: Uint8Array, b: Uint8Array, n: number, op: number): void {
  let i = 0;
  if ((a.byteOffset - b.byteOffset) % 4 === 0) {
    // Bytes up to the first 4-byte boundary of a (and so of b), then whole words.
    const head = Math.min(n, (4 - (a.byteOffset % 4)) % 4);
    bytes(a, b, 0, head, op);
    i = head;
    const words = (n - head) >>> 2;
    if (words > 0) {
      const A = new Int32Array(a.buffer, a.byteOffset + head, words);
      const B = new Int32Array(b.buffer, b.byteOffset + head, words);
      if (op === BAND) for (let k = 0; k < words; k++) A[k] = (A[k] as number) & (B[k] as number);
      else if (op === BOR) for (let k = 0; k < words; k++) A[k] = (A[k] as number) | (B[k] as number);
      // bxor
      else for (let k = 0; k < words; k++) A[k] = (A[k] as number) ^ (B[k] as number);
      i += words * 4;
    }
  }
  bytes(a, b, i, n, op);
}

function bytes(a: Uint8Array, b: Uint8Array, from: number, to: number, op: number): void {
  if (op === BAND) for (let i = from; i < to; i++) a[i] = (a[i] as number) & (b[i] as number);
  else if (op === BOR) for (let i = from; i < to; i++) a[i] = (a[i] as number) | (b[i] as number);
  // bxor
  else for (let i = from; i < to; i++) a[i] = (a[i] as number) ^ (b[i] as number);
}

/** Element-wise op over `count` elements at aligned byte offsets ao and bo. */
function elements(
  ab: ArrayBufferLike,
  ao: number,
  bb: ArrayBufferLike,
  bo: number,
  count: number,
  op: number,
  type: number,
): void {
  switch (type) {
    case T_I32:
    case T_U32:
      if (op === MIN || op === MAX) {
        if (type === T_I32) minMaxI32(new Int32Array(ab, ao, count), new Int32Array(bb, bo, count), op);
        else minMaxU32(new Uint32Array(ab, ao, count), new Uint32Array(bb, bo, count), op);
      } else {
        int32(new Int32Array(ab, ao, count), new Int32Array(bb, bo, count), op);
      }
      return;
    case T_I64:
    case T_U64:
      int64(new Uint32Array(ab, ao, count * 2), new Uint32Array(bb, bo, count * 2), op, type === T_I64);
      return;
    case T_F32:
      float32(new Float32Array(ab, ao, count), new Float32Array(bb, bo, count), new Uint32Array(ab, ao, count), op);
      return;
    case T_F64:
      float64(new Float64Array(ab, ao, count), new Float64Array(bb, bo, count), new Uint32Array(ab, ao, count * 2), op);
      return;
  }
}

/** sum, prod and the logical ops: identical bits for i32 and u32. */
function int32(A: Int32Array, B: Int32Array, op: number): void {
  const n = A.length;
  switch (op) {
    case SUM:
      for (let i = 0; i < n; i++) A[i] = ((A[i] as number) + (B[i] as number)) | 0;
      return;
    case PROD:
      for (let i = 0; i < n; i++) A[i] = Math.imul(A[i] as number, B[i] as number);
      return;
    case LAND:
      for (let i = 0; i < n; i++) A[i] = A[i] !== 0 && B[i] !== 0 ? 1 : 0;
      return;
    case LOR:
      for (let i = 0; i < n; i++) A[i] = ((A[i] as number) | (B[i] as number)) !== 0 ? 1 : 0;
      return;
    case LXOR:
      for (let i = 0; i < n; i++) A[i] = (A[i] !== 0) !== (B[i] !== 0) ? 1 : 0;
      return;
  }
}

function minMaxI32(A: Int32Array, B: Int32Array, op: number): void {
  const n = A.length;
  if (op === MIN) {
    for (let i = 0; i < n; i++) {
      const y = B[i] as number;
      if (y < (A[i] as number)) A[i] = y;
    }
  } else {
    for (let i = 0; i < n; i++) {
      const y = B[i] as number;
      if (y > (A[i] as number)) A[i] = y;
    }
  }
}

function minMaxU32(A: Uint32Array, B: Uint32Array, op: number): void {
  const n = A.length;
  if (op === MIN) {
    for (let i = 0; i < n; i++) {
      const y = B[i] as number;
      if (y < (A[i] as number)) A[i] = y;
    }
  } else {
    for (let i = 0; i < n; i++) {
      const y = B[i] as number;
      if (y > (A[i] as number)) A[i] = y;
    }
  }
}

/**
 * 64-bit integers as Uint32 halves: A[2i + LO] is the low half of element i, A[2i + HI]
 * the high half. Every element reads all four halves before writing, so A and B may be
 * the same range.
 */
function int64(A: Uint32Array, B: Uint32Array, op: number, signed: boolean): void {
  const n = A.length;
  switch (op) {
    case SUM:
      for (let j = 0; j < n; j += 2) {
        const al = A[j + LO] as number;
        const lo = (al + (B[j + LO] as number)) >>> 0;
        const hi = ((A[j + HI] as number) + (B[j + HI] as number) + (lo < al ? 1 : 0)) >>> 0;
        A[j + LO] = lo;
        A[j + HI] = hi;
      }
      return;
    case PROD:
      for (let j = 0; j < n; j += 2) {
        const al = A[j + LO] as number;
        const ah = A[j + HI] as number;
        const bl = B[j + LO] as number;
        const bh = B[j + HI] as number;
        // (ah * 2^32 + al) * (bh * 2^32 + bl) mod 2^64
        //   = al * bl + ((al * bh + ah * bl) mod 2^32) * 2^32.
        // al * bl in full from 16-bit limbs; every partial sum stays below 2^53.
        const a0 = al & 0xffff;
        const a1 = al >>> 16;
        const b0 = bl & 0xffff;
        const b1 = bl >>> 16;
        const p01 = a0 * b1;
        const p10 = a1 * b0;
        const low = a0 * b0 + (p01 % 65536) * 65536 + (p10 % 65536) * 65536;
        const carry = Math.floor(low / 4294967296);
        const high = a1 * b1 + Math.floor(p01 / 65536) + Math.floor(p10 / 65536) + carry;
        A[j + LO] = low >>> 0;
        A[j + HI] = (high + Math.imul(al, bh) + Math.imul(ah, bl)) >>> 0;
      }
      return;
    case MIN:
    case MAX: {
      const isMin = op === MIN;
      for (let j = 0; j < n; j += 2) {
        const ah = A[j + HI] as number;
        const bh = B[j + HI] as number;
        const bl = B[j + LO] as number;
        // Compare high halves (signed for i64, unsigned for u64), then low halves.
        const sah = signed ? ah | 0 : ah;
        const sbh = signed ? bh | 0 : bh;
        const less = sbh < sah || (sbh === sah && bl < (A[j + LO] as number));
        const greater = sbh > sah || (sbh === sah && bl > (A[j + LO] as number));
        if (isMin ? less : greater) {
          A[j + LO] = bl;
          A[j + HI] = bh;
        }
      }
      return;
    }
    case LAND:
      for (let j = 0; j < n; j += 2) {
        const r = ((A[j] as number) | (A[j + 1] as number)) !== 0 && ((B[j] as number) | (B[j + 1] as number)) !== 0;
        A[j + LO] = r ? 1 : 0;
        A[j + HI] = 0;
      }
      return;
    case LOR:
      for (let j = 0; j < n; j += 2) {
        const r = ((A[j] as number) | (A[j + 1] as number) | (B[j] as number) | (B[j + 1] as number)) !== 0;
        A[j + LO] = r ? 1 : 0;
        A[j + HI] = 0;
      }
      return;
    case LXOR:
      for (let j = 0; j < n; j += 2) {
        const r =
          (((A[j] as number) | (A[j + 1] as number)) !== 0) !== (((B[j] as number) | (B[j + 1] as number)) !== 0);
        A[j + LO] = r ? 1 : 0;
        A[j + HI] = 0;
      }
      return;
  }
}

/** f32: A and AU view the same bytes; NaN results are written as bits through AU. */
function float32(A: Float32Array, B: Float32Array, AU: Uint32Array, op: number): void {
  const n = A.length;
  switch (op) {
    case SUM:
      for (let i = 0; i < n; i++) {
        const r = (A[i] as number) + (B[i] as number);
        // biome-ignore lint/suspicious/noSelfCompare: false only for NaN; faster than Number.isNaN
        if (r === r) A[i] = r;
        else AU[i] = NAN32;
      }
      return;
    case PROD:
      for (let i = 0; i < n; i++) {
        const r = (A[i] as number) * (B[i] as number);
        // biome-ignore lint/suspicious/noSelfCompare: false only for NaN; faster than Number.isNaN
        if (r === r) A[i] = r;
        else AU[i] = NAN32;
      }
      return;
    case MIN:
      for (let i = 0; i < n; i++) {
        const r = Math.min(A[i] as number, B[i] as number);
        // biome-ignore lint/suspicious/noSelfCompare: false only for NaN; faster than Number.isNaN
        if (r === r) A[i] = r;
        else AU[i] = NAN32;
      }
      return;
    case MAX:
      for (let i = 0; i < n; i++) {
        const r = Math.max(A[i] as number, B[i] as number);
        // biome-ignore lint/suspicious/noSelfCompare: false only for NaN; faster than Number.isNaN
        if (r === r) A[i] = r;
        else AU[i] = NAN32;
      }
      return;
  }
}

/** f64: A and AU view the same bytes; NaN results are written as bits through AU. */
function float64(A: Float64Array, B: Float64Array, AU: Uint32Array, op: number): void {
  const n = A.length;
  switch (op) {
    case SUM:
      for (let i = 0; i < n; i++) {
        const r = (A[i] as number) + (B[i] as number);
        // biome-ignore lint/suspicious/noSelfCompare: false only for NaN; faster than Number.isNaN
        if (r === r) A[i] = r;
        else nan64(AU, i);
      }
      return;
    case PROD:
      for (let i = 0; i < n; i++) {
        const r = (A[i] as number) * (B[i] as number);
        // biome-ignore lint/suspicious/noSelfCompare: false only for NaN; faster than Number.isNaN
        if (r === r) A[i] = r;
        else nan64(AU, i);
      }
      return;
    case MIN:
      for (let i = 0; i < n; i++) {
        const r = Math.min(A[i] as number, B[i] as number);
        // biome-ignore lint/suspicious/noSelfCompare: false only for NaN; faster than Number.isNaN
        if (r === r) A[i] = r;
        else nan64(AU, i);
      }
      return;
    case MAX:
      for (let i = 0; i < n; i++) {
        const r = Math.max(A[i] as number, B[i] as number);
        // biome-ignore lint/suspicious/noSelfCompare: false only for NaN; faster than Number.isNaN
        if (r === r) A[i] = r;
        else nan64(AU, i);
      }
      return;
  }
}

function nan64(AU: Uint32Array, i: number): void {
  AU[2 * i + LO] = 0;
  AU[2 * i + HI] = NAN64_HI;
}
