import { describe, expect, it } from 'vitest';
import { ELEMENT_TYPE_NAMES, ELEMENT_WIDTH, REDUCE_OP_NAMES, reduceAllowed } from '../../ts/core/codes.js';
import { combine as jsCombine } from '../../ts/core/js/reduce.js';
import { combine as wasmCombine } from '../../ts/core/wasm/reduce.js';
import { wasmRuntime } from '../../ts/core/wasm/runtime.js';

type Combine = (a: Uint8Array, b: Uint8Array, op: number, type: number) => void;

const U8 = 0;
const I32 = 1;
const U32 = 2;
const I64 = 3;
const U64 = 4;
const F32 = 5;
const F64 = 6;

const SUM = 1;
const PROD = 2;
const MIN = 3;
const MAX = 4;
const LAND = 5;
const LOR = 6;
const LXOR = 7;
const BAND = 8;
const BOR = 9;
const BXOR = 10;

const BACKENDS: readonly [string, Combine][] = [
  ['js', jsCombine],
  ['wasm', wasmCombine],
];

const PAIRS: [number, number][] = [];
for (let type = 0; type <= 6; type++) {
  for (let op = 1; op <= 10; op++) if (reduceAllowed(op, type)) PAIRS.push([type, op]);
}

const LENGTHS = [0, 1, 2, 3, 15, 16, 17, 33, 1000];

// ---------------------------------------------------------------------------------------
// Deterministic data

/** mulberry32: a small seeded PRNG returning uint32 values. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

const EDGE_U8 = [0n, 1n, 2n, 3n, 0x7fn, 0x80n, 0xffn];
const EDGE_32 = [0n, 1n, 2n, 3n, 0xffffffffn, 0xfffffffen, 0x7fffffffn, 0x80000000n, 0x80000001n, 0x10000n];
const EDGE_64 = [
  0n,
  1n,
  2n,
  3n,
  0xffffffffffffffffn,
  0xfffffffffffffffen,
  0x7fffffffffffffffn,
  0x8000000000000000n,
  0x8000000000000001n,
  0xffffffffn,
  0x100000000n,
  0x7fffffffn,
  0x80000000n,
  0xffffffff00000000n,
];
const EDGE_F32 = [
  0x00000000n, // +0
  0x80000000n, // -0
  0x3f800000n, // 1
  0xbf800000n, // -1
  0x7f800000n, // +Infinity
  0xff800000n, // -Infinity
  0x7fc00000n, // canonical NaN
  0xffc00000n, // negative quiet NaN
  0x7fc12345n, // quiet NaN with payload
  0x7f800001n, // signalling NaN
  0xff812345n, // negative signalling NaN with payload
  0x00000001n, // smallest denormal
  0x807fffffn, // largest negative denormal
  0x00800000n, // smallest normal
  0x7f7fffffn, // MAX_VALUE
  0xff7fffffn, // -MAX_VALUE
  0x4b800000n, // 2^24
];
const EDGE_F64 = [
  0x0000000000000000n,
  0x8000000000000000n,
  0x3ff0000000000000n,
  0xbff0000000000000n,
  0x7ff0000000000000n,
  0xfff0000000000000n,
  0x7ff8000000000000n,
  0xfff8000000000000n,
  0x7ff8000000012345n,
  0x7ff0000000000001n,
  0xfff4000000000abcn,
  0x0000000000000001n,
  0x800fffffffffffffn,
  0x0010000000000000n,
  0x7fefffffffffffffn,
  0xffefffffffffffffn,
  0x4340000000000000n, // 2^53
  0x36a0000000000000n, // 2^-149 (f32 denormal range)
];

function edgeValues(type: number): bigint[] {
  switch (type) {
    case U8:
      return EDGE_U8;
    case I32:
    case U32:
      return EDGE_32;
    case I64:
    case U64:
      return EDGE_64;
    case F32:
      return EDGE_F32;
    default:
      return EDGE_F64;
  }
}

function putBits(dv: DataView, offset: number, width: number, bits: bigint): void {
  if (width === 1) dv.setUint8(offset, Number(bits & 0xffn));
  else if (width === 4) dv.setUint32(offset, Number(bits & 0xffffffffn), true);
  else dv.setBigUint64(offset, BigInt.asUintN(64, bits), true);
}

/** One element's bits: an edge value, a random bit pattern, or a small or moderate value. */
function randomBits(type: number, next: () => number): bigint {
  const edges = edgeValues(type);
  const kind = next() % 8;
  const w = ELEMENT_WIDTH[type] as number;
  if (kind < 3) return edges[next() % edges.length] as bigint;
  if (kind < 5) {
    const lo = BigInt(next());
    return w === 8 ? (BigInt(next()) << 32n) | lo : lo;
  }
  if (type === F32 || type === F64) {
    const scale = [1, 1000, 1e-30, 1e30][next() % 4] as number;
    const x = ((next() / 4294967296) * 2 - 1) * scale;
    const dv = new DataView(new ArrayBuffer(8));
    if (type === F32) {
      dv.setFloat32(0, x, true);
      return BigInt(dv.getUint32(0, true));
    }
    dv.setFloat64(0, x, true);
    return dv.getBigUint64(0, true);
  }
  if (kind < 7) return BigInt(next() % 4);
  return BigInt.asUintN(w * 8, -BigInt(next() % 4));
}

/** Two operand byte arrays of `count` elements; some elements of b equal those of a. */
function makeInputs(type: number, count: number, seed: number): [Uint8Array, Uint8Array] {
  const w = ELEMENT_WIDTH[type] as number;
  const next = prng(seed);
  const a = new Uint8Array(count * w);
  const b = new Uint8Array(count * w);
  const da = new DataView(a.buffer);
  const db = new DataView(b.buffer);
  for (let i = 0; i < count; i++) {
    const x = randomBits(type, next);
    const y = next() % 10 === 0 ? x : randomBits(type, next);
    putBits(da, i * w, w, x);
    putBits(db, i * w, w, y);
  }
  return [a, b];
}

// ---------------------------------------------------------------------------------------
// An independent scalar reference: DataView reads, BigInt integers, one element at a time

function intOp(x: bigint, y: bigint, op: number): bigint {
  switch (op) {
    case SUM:
      return x + y;
    case PROD:
      return x * y;
    case MIN:
      return x < y ? x : y;
    case MAX:
      return x > y ? x : y;
    case LAND:
      return x !== 0n && y !== 0n ? 1n : 0n;
    case LOR:
      return x !== 0n || y !== 0n ? 1n : 0n;
    case LXOR:
      return (x !== 0n) !== (y !== 0n) ? 1n : 0n;
    case BAND:
      return x & y;
    case BOR:
      return x | y;
    default:
      return x ^ y;
  }
}

function floatOp(x: number, y: number, op: number): number {
  switch (op) {
    case SUM:
      return x + y;
    case PROD:
      return x * y;
    case MIN:
      return Math.min(x, y);
    default:
      return Math.max(x, y);
  }
}

function reference(a: Uint8Array, b: Uint8Array, op: number, type: number): Uint8Array {
  const out = a.slice();
  const A = new DataView(out.buffer);
  const B = new DataView(b.slice().buffer);
  const w = ELEMENT_WIDTH[type] as number;
  for (let o = 0; o + w <= out.length; o += w) {
    if (type === F32) {
      const r = Math.fround(floatOp(A.getFloat32(o, true), B.getFloat32(o, true), op));
      if (Number.isNaN(r)) A.setUint32(o, 0x7fc00000, true);
      else A.setFloat32(o, r, true);
    } else if (type === F64) {
      const r = floatOp(A.getFloat64(o, true), B.getFloat64(o, true), op);
      if (Number.isNaN(r)) A.setBigUint64(o, 0x7ff8000000000000n, true);
      else A.setFloat64(o, r, true);
    } else if (w === 1) {
      A.setUint8(o, Number(intOp(BigInt(A.getUint8(o)), BigInt(B.getUint8(o)), op) & 0xffn));
    } else if (w === 4) {
      const get = (dv: DataView): bigint => BigInt(type === I32 ? dv.getInt32(o, true) : dv.getUint32(o, true));
      A.setUint32(o, Number(BigInt.asUintN(32, intOp(get(A), get(B), op))), true);
    } else {
      const get = (dv: DataView): bigint => (type === I64 ? dv.getBigInt64(o, true) : dv.getBigUint64(o, true));
      A.setBigUint64(o, BigInt.asUintN(64, intOp(get(A), get(B), op)), true);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Operand layouts

interface Operands {
  a: Uint8Array;
  b: Uint8Array;
  /** Current bytes of a (re-reading linear memory, which the call may have grown). */
  readA(): Uint8Array;
  readB(): Uint8Array;
  release(): void;
}

const LAYOUTS = ['fresh', 'offset 1/3', 'offset 3/1', 'arena', 'arena odd', 'arena a', 'arena b', 'same'] as const;
type Layout = (typeof LAYOUTS)[number];

function plainAt(bytes: Uint8Array, offset: number): Uint8Array {
  const v = new Uint8Array(new ArrayBuffer(bytes.length + offset + 5), offset, bytes.length);
  v.set(bytes);
  return v;
}

function arenaAt(bytes: Uint8Array, offset: number): { ptr: number; size: number } {
  const { arena } = wasmRuntime();
  const size = bytes.length + offset + 16;
  const ptr = arena.alloc(size);
  arena.u8.set(bytes, ptr + offset);
  return { ptr: ptr + offset, size };
}

function arenaView(ptr: number, length: number): Uint8Array {
  return new Uint8Array(wasmRuntime().arena.buffer, ptr, length);
}

function layout(kind: Layout, aBytes: Uint8Array, bBytes: Uint8Array): Operands {
  const n = aBytes.length;
  const { arena } = wasmRuntime();
  switch (kind) {
    case 'fresh':
    case 'offset 1/3':
    case 'offset 3/1': {
      const [ao, bo] = kind === 'fresh' ? [0, 0] : kind === 'offset 1/3' ? [1, 3] : [3, 1];
      const a = plainAt(aBytes, ao);
      const b = plainAt(bBytes, bo);
      return { a, b, readA: () => a.slice(), readB: () => b.slice(), release: () => {} };
    }
    case 'arena':
    case 'arena odd': {
      const off = kind === 'arena' ? 0 : 1;
      const pa = arenaAt(aBytes, off);
      const pb = arenaAt(bBytes, off + 2);
      return {
        a: arenaView(pa.ptr, n),
        b: arenaView(pb.ptr, n),
        readA: () => arenaView(pa.ptr, n).slice(),
        readB: () => arenaView(pb.ptr, n).slice(),
        release: () => {
          arena.release(pa.ptr - off, pa.size);
          arena.release(pb.ptr - off - 2, pb.size);
        },
      };
    }
    case 'arena a': {
      const pa = arenaAt(aBytes, 0);
      const b = plainAt(bBytes, 1);
      return {
        a: arenaView(pa.ptr, n),
        b,
        readA: () => arenaView(pa.ptr, n).slice(),
        readB: () => b.slice(),
        release: () => arena.release(pa.ptr, pa.size),
      };
    }
    case 'arena b': {
      const a = plainAt(aBytes, 3);
      const pb = arenaAt(bBytes, 0);
      return {
        a,
        b: arenaView(pb.ptr, n),
        readA: () => a.slice(),
        readB: () => arenaView(pb.ptr, n).slice(),
        release: () => arena.release(pb.ptr, pb.size),
      };
    }
    case 'same': {
      const a = plainAt(aBytes, 1);
      return { a, b: a, readA: () => a.slice(), readB: () => a.slice(), release: () => {} };
    }
  }
}

function repeat(bytes: Uint8Array, times: number): Uint8Array {
  const out = new Uint8Array(bytes.length * times);
  for (let i = 0; i < times; i++) out.set(bytes, i * bytes.length);
  return out;
}

function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (x) => x.toString(16).padStart(2, '0')).join('');
}

/** Fails with the first differing element (as little-endian hex) when the bytes differ. */
function expectBytes(actual: Uint8Array, expected: Uint8Array, width: number, what: string): void {
  expect(actual.length, `${what}: length`).toBe(expected.length);
  for (let o = 0; o < actual.length; o += width) {
    for (let k = 0; k < width; k++) {
      if (actual[o + k] !== expected[o + k]) {
        const got = hex(actual.subarray(o, o + width));
        const want = hex(expected.subarray(o, o + width));
        expect.fail(`${what}: element ${o / width} is ${got}, expected ${want} (little-endian bytes)`);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------

describe('combine: all allowed pairs, both backends, against a scalar reference', () => {
  it('covers the 51 allowed pairs among the 70 (type, op) pairs', () => {
    expect(PAIRS.length).toBe(51);
  });

  for (const [type, op] of PAIRS) {
    const name = `${ELEMENT_TYPE_NAMES[type]} ${REDUCE_OP_NAMES[op - 1]}`;
    it(name, () => {
      const w = ELEMENT_WIDTH[type] as number;
      for (const count of LENGTHS) {
        const [aBytes, bBytes] = makeInputs(type, count, type * 1000 + op * 37 + count);
        for (const kind of LAYOUTS) {
          const expected = kind === 'same' ? reference(aBytes, aBytes, op, type) : reference(aBytes, bBytes, op, type);
          const results: Uint8Array[] = [];
          for (const [backend, fn] of BACKENDS) {
            const ops = layout(kind, aBytes, bBytes);
            fn(ops.a, ops.b, op, type);
            const what = `${name}, ${count} elements, ${kind}, ${backend}`;
            const got = ops.readA();
            expectBytes(got, expected, w, what);
            if (kind !== 'same') expectBytes(ops.readB(), bBytes, w, `${what}: b unchanged`);
            results.push(got);
            ops.release();
          }
          expectBytes(results[1] as Uint8Array, results[0] as Uint8Array, w, `${name}, ${count}, ${kind}: js vs wasm`);
        }
      }
    });
  }
});

describe('combine: hand-computed results', () => {
  const u32s = (...xs: number[]): Uint8Array => new Uint8Array(new Uint32Array(xs).buffer);
  const u64s = (...xs: bigint[]): Uint8Array => new Uint8Array(new BigUint64Array(xs).buffer);
  const f32bits = (...xs: number[]): Uint8Array => u32s(...xs);
  const f64bits = (...xs: bigint[]): Uint8Array => u64s(...xs);
  const f32s = (...xs: number[]): Uint8Array => new Uint8Array(new Float32Array(xs).buffer);
  const f64s = (...xs: number[]): Uint8Array => new Uint8Array(new Float64Array(xs).buffer);

  const cases: [string, number, number, Uint8Array, Uint8Array, Uint8Array][] = [
    ['i32 sum wraps', I32, SUM, u32s(0x7fffffff, 0xffffffff), u32s(1, 2), u32s(0x80000000, 1)],
    [
      'u32 prod wraps',
      U32,
      PROD,
      u32s(0xffffffff, 0x10000, 0x12345),
      u32s(2, 0x10000, 0x10001),
      u32s(0xfffffffe, 0, 0x23462345),
    ],
    ['i32 min is signed', I32, MIN, u32s(0xffffffff), u32s(1), u32s(0xffffffff)],
    ['u32 min is unsigned', U32, MIN, u32s(0xffffffff), u32s(1), u32s(1)],
    ['i32 max is signed', I32, MAX, u32s(0xffffffff), u32s(1), u32s(1)],
    ['u32 max is unsigned', U32, MAX, u32s(0xffffffff), u32s(1), u32s(0xffffffff)],
    ['i64 min is signed', I64, MIN, u64s(0xffffffffffffffffn), u64s(1n), u64s(0xffffffffffffffffn)],
    ['u64 min is unsigned', U64, MIN, u64s(0xffffffffffffffffn), u64s(1n), u64s(1n)],
    [
      'i64 max compares low halves unsigned',
      I64,
      MAX,
      u64s(0x00000001_80000000n, 0xffffffff_00000000n),
      u64s(0x00000001_7fffffffn, 0xfffffffe_ffffffffn),
      u64s(0x00000001_80000000n, 0xffffffff_00000000n),
    ],
    ['i64 sum carries', I64, SUM, u64s(0xffffffffn, 0xffffffffffffffffn), u64s(1n, 1n), u64s(0x100000000n, 0n)],
    [
      'u64 prod wraps',
      U64,
      PROD,
      u64s(0xffffffffn, 0xffffffffffffffffn, 0x123456789abcdefn),
      u64s(0xffffffffn, 0xffffffffffffffffn, 0xfedcba987654321n),
      u64s(0xfffffffe00000001n, 1n, BigInt.asUintN(64, 0x123456789abcdefn * 0xfedcba987654321n)),
    ],
    ['i32 lxor of 2 and 3 is 0', I32, LXOR, u32s(2, 2, 0), u32s(3, 0, 0), u32s(0, 1, 0)],
    ['i32 land of 2 and 0 is 0', I32, LAND, u32s(2, 2, 0), u32s(0, 3, 0), u32s(0, 1, 0)],
    ['u32 lor', U32, LOR, u32s(0, 0, 0x80000000), u32s(0, 5, 0), u32s(0, 1, 1)],
    ['u64 lxor', U64, LXOR, u64s(2n, 0x100000000n, 0n), u64s(3n, 0n, 0n), u64s(0n, 1n, 0n)],
    [
      'u8 band/bor/bxor',
      U8,
      BXOR,
      new Uint8Array([0xff, 0x0f, 0]),
      new Uint8Array([0x0f, 0x0f, 0]),
      new Uint8Array([0xf0, 0, 0]),
    ],
    ['f32 min(-0, +0) = -0', F32, MIN, f32bits(0x80000000, 0), f32bits(0, 0x80000000), f32bits(0x80000000, 0x80000000)],
    ['f32 max(-0, +0) = +0', F32, MAX, f32bits(0x80000000, 0), f32bits(0, 0x80000000), f32bits(0, 0)],
    [
      'f64 min(-0, +0) = -0',
      F64,
      MIN,
      f64bits(0x8000000000000000n, 0n),
      f64bits(0n, 0x8000000000000000n),
      f64bits(0x8000000000000000n, 0x8000000000000000n),
    ],
    [
      'f64 max(-0, +0) = +0',
      F64,
      MAX,
      f64bits(0x8000000000000000n, 0n),
      f64bits(0n, 0x8000000000000000n),
      f64bits(0n, 0n),
    ],
    [
      'f32 NaN results are canonical',
      F32,
      SUM,
      f32bits(0xffc12345, 0x7f800000, 0x7f800001, 0x3f800000),
      f32bits(0x3f800000, 0xff800000, 0x3f800000, 0xff812345),
      f32bits(0x7fc00000, 0x7fc00000, 0x7fc00000, 0x7fc00000),
    ],
    [
      'f32 min with NaN is canonical NaN',
      F32,
      MIN,
      f32bits(0xffc12345, 0x3f800000),
      f32bits(0x3f800000, 0x7f812345),
      f32bits(0x7fc00000, 0x7fc00000),
    ],
    [
      'f64 NaN results are canonical',
      F64,
      PROD,
      f64bits(0xfff4000000000abcn, 0x7ff0000000000000n, 0x3ff0000000000000n),
      f64bits(0x3ff0000000000000n, 0n, 0x7ff8000000012345n),
      f64bits(0x7ff8000000000000n, 0x7ff8000000000000n, 0x7ff8000000000000n),
    ],
    [
      'f64 max with NaN is canonical NaN',
      F64,
      MAX,
      f64bits(0xfff8000000000001n, 0x7ff0000000000000n),
      f64bits(0x7ff0000000000000n, 0xfff0000000000001n),
      f64bits(0x7ff8000000000000n, 0x7ff8000000000000n),
    ],
    [
      'f32 sum rounds once, to even',
      F32,
      SUM,
      f32s(16777216, 16777218, 1),
      f32s(1, 1, 2 ** -24),
      f32s(16777216, 16777220, 1),
    ],
    [
      'f32 prod keeps denormals',
      F32,
      PROD,
      f32bits(0x00000001, 0x00800000),
      f32bits(0x3f800000, 0x3f000000),
      f32bits(0x00000001, 0x00400000),
    ],
    [
      'f64 sum keeps denormals',
      F64,
      SUM,
      f64bits(0x0000000000000001n, 0x000fffffffffffffn),
      f64bits(0x0000000000000001n, 0x0000000000000001n),
      f64bits(0x0000000000000002n, 0x0010000000000000n),
    ],
    [
      'f64 sum overflows to Infinity',
      F64,
      SUM,
      f64s(Number.MAX_VALUE, -0),
      f64s(Number.MAX_VALUE, -0),
      f64s(Infinity, -0),
    ],
  ];

  for (const [name, type, op, a, b, want] of cases) {
    for (const [backend, fn] of BACKENDS) {
      it(`${name} (${backend})`, () => {
        // Once as given (scalar code), and repeated 37 times (vector loops and tails).
        for (const times of [1, 37]) {
          for (const off of [0, 1]) {
            const x = plainAt(repeat(a, times), off);
            const y = plainAt(repeat(b, times), 3 - off);
            fn(x, y, op, type);
            expectBytes(x, repeat(want, times), ELEMENT_WIDTH[type] as number, `${name}, x${times}, offset ${off}`);
          }
        }
      });
    }
  }
});

describe('combine: aliasing', () => {
  for (const [backend, fn] of BACKENDS) {
    it(`reads b as before the call when it overlaps a (${backend})`, () => {
      for (const [type, op] of [
        [I32, SUM],
        [F64, MAX],
        [U64, PROD],
        [U8, BXOR],
      ] as [number, number][]) {
        const w = ELEMENT_WIDTH[type] as number;
        const count = 40;
        const [bytes] = makeInputs(type, count + 3, 99 + type);
        for (const shift of [-1, 1, 2]) {
          const aAt = 1 * w;
          const bAt = aAt + shift * w;
          const expected = reference(bytes.slice(aAt, aAt + count * w), bytes.slice(bAt, bAt + count * w), op, type);
          // In a plain buffer.
          const buf = bytes.slice();
          fn(buf.subarray(aAt, aAt + count * w), buf.subarray(bAt, bAt + count * w), op, type);
          expectBytes(buf.slice(aAt, aAt + count * w), expected, w, `plain, shift ${shift}`);
          // In linear memory.
          const { arena } = wasmRuntime();
          const ptr = arena.alloc(bytes.length);
          arena.u8.set(bytes, ptr);
          fn(arenaView(ptr + aAt, count * w), arenaView(ptr + bAt, count * w), op, type);
          expectBytes(arenaView(ptr + aAt, count * w).slice(), expected, w, `arena, shift ${shift}`);
          arena.release(ptr, bytes.length);
        }
      }
    });
  }
});

describe('combine: the WebAssembly export', () => {
  it('returns 1 and touches nothing for a pair that is not allowed', () => {
    const { x, arena } = wasmRuntime();
    const pa = arena.alloc(64);
    const pb = arena.alloc(64);
    const before = new Uint8Array(64).map((_, i) => i + 1);
    for (const [op, type] of [
      [SUM, U8],
      [LAND, U8],
      [BAND, F32],
      [LXOR, F64],
      [0, I32],
      [11, I32],
      [SUM, 7],
      [SUM, -1],
    ] as [number, number][]) {
      arena.u8.set(before, pa);
      arena.u8.set(before, pb);
      expect(x.combine(pa, pb, 64, op, type), `op ${op} type ${type}`).toBe(1);
      expect(Array.from(arena.u8.subarray(pa, pa + 64))).toEqual(Array.from(before));
    }
    expect(x.combine(pa, pb, 64, BXOR, F64)).toBe(1);
    expect(x.combine(pa, pb, 64, SUM, F64)).toBe(0);
    arena.release(pa, 64);
    arena.release(pb, 64);
  });

  it('the wasm backend throws a plain Error when the export refuses', () => {
    expect(() => wasmCombine(new Uint8Array(4), new Uint8Array(4), SUM, U8)).toThrow(Error);
  });

  it('leaves trailing bytes that do not fill an element untouched', () => {
    const { x, arena } = wasmRuntime();
    const pa = arena.alloc(64);
    const pb = arena.alloc(64);
    arena.u8.fill(7, pa, pa + 64);
    arena.u8.fill(1, pb, pb + 64);
    expect(x.combine(pa, pb, 22, SUM, I64)).toBe(0);
    const got = Array.from(arena.u8.subarray(pa, pa + 24));
    expect(got.slice(0, 16)).toEqual(
      Array.from(new Uint8Array(new BigUint64Array([0x0808080808080808n, 0x0808080808080808n]).buffer)),
    );
    expect(got.slice(16)).toEqual([7, 7, 7, 7, 7, 7, 7, 7]);
    arena.release(pa, 64);
    arena.release(pb, 64);
  });
});
