/*
 * Reduce kernels: combine(a, b, op, type) computes a[i] = a[i] op b[i] element-wise,
 * in place into a. ts/core/js/reduce.ts is the pure TypeScript twin; both give
 * bit-identical results under these rules:
 *
 * Element types (codes, ts/core/codes.ts): 0 u8, 1 i32, 2 u32, 3 i64, 4 u64, 5 f32,
 * 6 f64; widths 1, 4, 4, 8, 8, 4, 8 bytes; little endian.
 * Operations: 1 sum, 2 prod, 3 min, 4 max, 5 land, 6 lor, 7 lxor, 8 band, 9 bor, 10 bxor.
 * Allowed pairs: u8 takes band/bor/bxor; f32 and f64 take sum/prod/min/max; the integer
 * types take all ten. Any other pair returns 1 and touches nothing.
 *
 * - Integers wrap (two's complement). min/max compare signed for i32/i64 and unsigned
 *   for u32/u64.
 * - Logical ops: the result is 1 if (a != 0) OP (b != 0) holds, else 0, written as an
 *   element of the type.
 * - Bitwise ops act on the bytes and do not depend on the type.
 * - Floats follow IEEE 754 per element: sum = a + b and prod = a * b, rounded once to
 *   the type (round to nearest, ties to even). min/max return NaN if either operand is
 *   NaN, and order -0 below +0: min(-0, +0) = -0, max(-0, +0) = +0 (IEEE 754-2019
 *   minimum/maximum, as f32x4.min/f64x2.min and f32.min/f64.min do).
 * - Every NaN result of a float operation is written as the canonical quiet NaN:
 *   0x7FC00000 for f32, 0x7FF8000000000000 for f64 (payload and sign are not kept).
 * - Denormals are neither flushed on input nor on output.
 *
 * Pointers need no alignment. byteLen is expected to be a whole number of elements;
 * trailing bytes that do not fill an element are left untouched. a and b may be the same
 * block; partially overlapping blocks give an order-dependent result (the TypeScript
 * wrapper hands in a copy of b in that case).
 *
 * Structure: run<T>(op) is one loop nest per (type, op) pair: four vectors per
 * iteration, then single vectors, then scalar elements. Every call site passes a
 * constant op, so after inlining the op switches fold away and each pair becomes a
 * straight loop.
 */

const SUM: i32 = 1;
const PROD: i32 = 2;
const MIN: i32 = 3;
const MAX: i32 = 4;
const LAND: i32 = 5;
const LOR: i32 = 6;
const LXOR: i32 = 7;
const BAND: i32 = 8;
const BOR: i32 = 9;
const BXOR: i32 = 10;

const T_U8: i32 = 0;
const T_I32: i32 = 1;
const T_U32: i32 = 2;
const T_I64: i32 = 3;
const T_U64: i32 = 4;
const T_F32: i32 = 5;
const T_F64: i32 = 6;

const NAN32: u32 = 0x7fc00000;
const NAN64: u64 = 0x7ff8000000000000;

/** One vector of a op b for element type T (integer or float, 4 or 8 bytes wide). */
// @ts-ignore: decorator
@inline
function vop<T>(op: i32, a: v128, b: v128): v128 {
  if (isFloat<T>()) {
    let r: v128;
    if (sizeof<T>() == 4) {
      if (op == SUM) r = f32x4.add(a, b);
      else if (op == PROD) r = f32x4.mul(a, b);
      else if (op == MIN) r = f32x4.min(a, b);
      else r = f32x4.max(a, b);
      return v128.bitselect(i32x4.splat(NAN32), r, f32x4.ne(r, r));
    } else {
      if (op == SUM) r = f64x2.add(a, b);
      else if (op == PROD) r = f64x2.mul(a, b);
      else if (op == MIN) r = f64x2.min(a, b);
      else r = f64x2.max(a, b);
      return v128.bitselect(i64x2.splat(NAN64), r, f64x2.ne(r, r));
    }
  } else if (sizeof<T>() == 4) {
    const zero = i32x4.splat(0);
    const one = i32x4.splat(1);
    if (op == SUM) return i32x4.add(a, b);
    if (op == PROD) return i32x4.mul(a, b);
    if (op == MIN) return isSigned<T>() ? i32x4.min_s(a, b) : i32x4.min_u(a, b);
    if (op == MAX) return isSigned<T>() ? i32x4.max_s(a, b) : i32x4.max_u(a, b);
    if (op == LAND) return v128.and(v128.and(i32x4.ne(a, zero), i32x4.ne(b, zero)), one);
    if (op == LOR) return v128.and(i32x4.ne(v128.or(a, b), zero), one);
    return v128.and(v128.xor(i32x4.ne(a, zero), i32x4.ne(b, zero)), one);
  } else {
    const zero = i64x2.splat(0);
    const one = i64x2.splat(1);
    if (op == SUM) return i64x2.add(a, b);
    if (op == PROD) return i64x2.mul(a, b);
    if (op == MIN || op == MAX) {
      // gt_s is the only 64-bit lane compare; flipping the sign bit of both operands
      // turns it into an unsigned compare.
      let gt: v128;
      if (isSigned<T>()) {
        gt = i64x2.gt_s(a, b);
      } else {
        const sign = i64x2.splat(<i64>0x8000000000000000);
        gt = i64x2.gt_s(v128.xor(a, sign), v128.xor(b, sign));
      }
      return op == MIN ? v128.bitselect(b, a, gt) : v128.bitselect(a, b, gt);
    }
    if (op == LAND) return v128.and(v128.and(i64x2.ne(a, zero), i64x2.ne(b, zero)), one);
    if (op == LOR) return v128.and(i64x2.ne(v128.or(a, b), zero), one);
    return v128.and(v128.xor(i64x2.ne(a, zero), i64x2.ne(b, zero)), one);
  }
}

/** One integer element: a op b (wrapping), for op in sum .. lxor. */
// @ts-ignore: decorator
@inline
function iop<T>(op: i32, a: T, b: T): T {
  if (op == SUM) return a + b;
  if (op == PROD) return a * b;
  if (op == MIN) return min<T>(a, b);
  if (op == MAX) return max<T>(a, b);
  if (op == LAND) return <T>(<i32>(a != 0) & <i32>(b != 0));
  if (op == LOR) return <T>(<i32>((a | b) != 0));
  return <T>(<i32>(a != 0) ^ <i32>(b != 0));
}

/** One float element: a op b, for op in sum .. max (NaN not yet canonical). */
// @ts-ignore: decorator
@inline
function fop<T>(op: i32, a: T, b: T): T {
  if (op == SUM) return a + b;
  if (op == PROD) return a * b;
  if (op == MIN) return min<T>(a, b);
  return max<T>(a, b);
}

/** a[i] = a[i] op b[i] over the whole elements of type T in byteLen bytes. */
// @ts-ignore: decorator
@inline
function run<T>(a: usize, b: usize, n: usize, op: i32): void {
  let i: usize = 0;
  if (n >= 64) {
    const last = n - 64;
    while (i <= last) {
      const pa = a + i;
      const pb = b + i;
      const a0 = v128.load(pa);
      const a1 = v128.load(pa, 16);
      const a2 = v128.load(pa, 32);
      const a3 = v128.load(pa, 48);
      const b0 = v128.load(pb);
      const b1 = v128.load(pb, 16);
      const b2 = v128.load(pb, 32);
      const b3 = v128.load(pb, 48);
      v128.store(pa, vop<T>(op, a0, b0));
      v128.store(pa, vop<T>(op, a1, b1), 16);
      v128.store(pa, vop<T>(op, a2, b2), 32);
      v128.store(pa, vop<T>(op, a3, b3), 48);
      i += 64;
    }
  }
  while (i + 16 <= n) {
    v128.store(a + i, vop<T>(op, v128.load(a + i), v128.load(b + i)));
    i += 16;
  }
  while (i + sizeof<T>() <= n) {
    const pa = a + i;
    if (isFloat<T>()) {
      const r = fop<T>(op, load<T>(pa), load<T>(b + i));
      if (sizeof<T>() == 4) store<u32>(pa, r != r ? NAN32 : reinterpret<u32>(r));
      else store<u64>(pa, r != r ? NAN64 : reinterpret<u64>(r));
    } else {
      store<T>(pa, iop<T>(op, load<T>(pa), load<T>(b + i)));
    }
    i += sizeof<T>();
  }
}

/** Bitwise a op b over every byte of the range, whatever the element type. */
// @ts-ignore: decorator
@inline
function runBits(a: usize, b: usize, n: usize, op: i32): void {
  let i: usize = 0;
  if (n >= 64) {
    const last = n - 64;
    while (i <= last) {
      const pa = a + i;
      const pb = b + i;
      const a0 = v128.load(pa);
      const a1 = v128.load(pa, 16);
      const a2 = v128.load(pa, 32);
      const a3 = v128.load(pa, 48);
      const b0 = v128.load(pb);
      const b1 = v128.load(pb, 16);
      const b2 = v128.load(pb, 32);
      const b3 = v128.load(pb, 48);
      if (op == BAND) {
        v128.store(pa, v128.and(a0, b0));
        v128.store(pa, v128.and(a1, b1), 16);
        v128.store(pa, v128.and(a2, b2), 32);
        v128.store(pa, v128.and(a3, b3), 48);
      } else if (op == BOR) {
        v128.store(pa, v128.or(a0, b0));
        v128.store(pa, v128.or(a1, b1), 16);
        v128.store(pa, v128.or(a2, b2), 32);
        v128.store(pa, v128.or(a3, b3), 48);
      } else {
        v128.store(pa, v128.xor(a0, b0));
        v128.store(pa, v128.xor(a1, b1), 16);
        v128.store(pa, v128.xor(a2, b2), 32);
        v128.store(pa, v128.xor(a3, b3), 48);
      }
      i += 64;
    }
  }
  while (i + 16 <= n) {
    const x = v128.load(a + i);
    const y = v128.load(b + i);
    v128.store(a + i, op == BAND ? v128.and(x, y) : op == BOR ? v128.or(x, y) : v128.xor(x, y));
    i += 16;
  }
  while (i + 8 <= n) {
    const x = load<u64>(a + i);
    const y = load<u64>(b + i);
    store<u64>(a + i, op == BAND ? x & y : op == BOR ? x | y : x ^ y);
    i += 8;
  }
  while (i < n) {
    const x = load<u8>(a + i);
    const y = load<u8>(b + i);
    store<u8>(a + i, op == BAND ? x & y : op == BOR ? x | y : x ^ y);
    i++;
  }
}

// One function per (type, op) pair: each inlines its own loop nest with a constant op,
// so the op tests fold away inside it (in one function, the optimizer would merge the
// loop nests of different ops and keep the tests).
function band(a: usize, b: usize, n: usize): void { runBits(a, b, n, BAND); }
function bor(a: usize, b: usize, n: usize): void { runBits(a, b, n, BOR); }
function bxor(a: usize, b: usize, n: usize): void { runBits(a, b, n, BXOR); }

// sum, prod, land, lor and lxor give identical bits for signed and unsigned types.
function sum32(a: usize, b: usize, n: usize): void { run<i32>(a, b, n, SUM); }
function prod32(a: usize, b: usize, n: usize): void { run<i32>(a, b, n, PROD); }
function land32(a: usize, b: usize, n: usize): void { run<i32>(a, b, n, LAND); }
function lor32(a: usize, b: usize, n: usize): void { run<i32>(a, b, n, LOR); }
function lxor32(a: usize, b: usize, n: usize): void { run<i32>(a, b, n, LXOR); }
function minI32(a: usize, b: usize, n: usize): void { run<i32>(a, b, n, MIN); }
function maxI32(a: usize, b: usize, n: usize): void { run<i32>(a, b, n, MAX); }
function minU32(a: usize, b: usize, n: usize): void { run<u32>(a, b, n, MIN); }
function maxU32(a: usize, b: usize, n: usize): void { run<u32>(a, b, n, MAX); }

function sum64(a: usize, b: usize, n: usize): void { run<i64>(a, b, n, SUM); }
function prod64(a: usize, b: usize, n: usize): void { run<i64>(a, b, n, PROD); }
function land64(a: usize, b: usize, n: usize): void { run<i64>(a, b, n, LAND); }
function lor64(a: usize, b: usize, n: usize): void { run<i64>(a, b, n, LOR); }
function lxor64(a: usize, b: usize, n: usize): void { run<i64>(a, b, n, LXOR); }
function minI64(a: usize, b: usize, n: usize): void { run<i64>(a, b, n, MIN); }
function maxI64(a: usize, b: usize, n: usize): void { run<i64>(a, b, n, MAX); }
function minU64(a: usize, b: usize, n: usize): void { run<u64>(a, b, n, MIN); }
function maxU64(a: usize, b: usize, n: usize): void { run<u64>(a, b, n, MAX); }

function sumF32(a: usize, b: usize, n: usize): void { run<f32>(a, b, n, SUM); }
function prodF32(a: usize, b: usize, n: usize): void { run<f32>(a, b, n, PROD); }
function minF32(a: usize, b: usize, n: usize): void { run<f32>(a, b, n, MIN); }
function maxF32(a: usize, b: usize, n: usize): void { run<f32>(a, b, n, MAX); }

function sumF64(a: usize, b: usize, n: usize): void { run<f64>(a, b, n, SUM); }
function prodF64(a: usize, b: usize, n: usize): void { run<f64>(a, b, n, PROD); }
function minF64(a: usize, b: usize, n: usize): void { run<f64>(a, b, n, MIN); }
function maxF64(a: usize, b: usize, n: usize): void { run<f64>(a, b, n, MAX); }

/**
 * a[i] = a[i] op b[i] over byteLen bytes of `type` elements at aPtr and bPtr, in place
 * into a. Returns 0, or 1 (touching nothing) when op is not defined on type.
 */
export function combine(aPtr: usize, bPtr: usize, byteLen: usize, op: i32, type: i32): i32 {
  const a = aPtr;
  const b = bPtr;
  const n = byteLen;
  if (type < T_U8 || type > T_F64 || op < SUM || op > BXOR) return 1;
  if (type == T_F32) {
    if (op == SUM) sumF32(a, b, n);
    else if (op == PROD) prodF32(a, b, n);
    else if (op == MIN) minF32(a, b, n);
    else if (op == MAX) maxF32(a, b, n);
    else return 1;
    return 0;
  }
  if (type == T_F64) {
    if (op == SUM) sumF64(a, b, n);
    else if (op == PROD) prodF64(a, b, n);
    else if (op == MIN) minF64(a, b, n);
    else if (op == MAX) maxF64(a, b, n);
    else return 1;
    return 0;
  }
  if (op == BAND) band(a, b, n);
  else if (op == BOR) bor(a, b, n);
  else if (op == BXOR) bxor(a, b, n);
  else if (type == T_U8) return 1;
  else if (type == T_I32 || type == T_U32) {
    if (op == SUM) sum32(a, b, n);
    else if (op == PROD) prod32(a, b, n);
    else if (op == LAND) land32(a, b, n);
    else if (op == LOR) lor32(a, b, n);
    else if (op == LXOR) lxor32(a, b, n);
    else if (type == T_I32) {
      if (op == MIN) minI32(a, b, n);
      else maxI32(a, b, n);
    } else if (op == MIN) minU32(a, b, n);
    else maxU32(a, b, n);
  } else {
    if (op == SUM) sum64(a, b, n);
    else if (op == PROD) prod64(a, b, n);
    else if (op == LAND) land64(a, b, n);
    else if (op == LOR) lor64(a, b, n);
    else if (op == LXOR) lxor64(a, b, n);
    else if (type == T_I64) {
      if (op == MIN) minI64(a, b, n);
      else maxI64(a, b, n);
    } else if (op == MIN) minU64(a, b, n);
    else maxU64(a, b, n);
  }
  return 0;
}
