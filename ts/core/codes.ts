/**
 * Element-type and reduce-operation codes shared by the reduce kernels and the SPERLI
 * collective header (docs/core.md). Multi-byte elements are little endian.
 */
export const ElementType = {
  u8: 0,
  i32: 1,
  u32: 2,
  i64: 3,
  u64: 4,
  f32: 5,
  f64: 6,
} as const;
export type ElementTypeName = keyof typeof ElementType;
export type ElementTypeCode = (typeof ElementType)[ElementTypeName];

/** Width in bytes of each element type, indexed by code. */
export const ELEMENT_WIDTH: readonly number[] = [1, 4, 4, 8, 8, 4, 8];
export const ELEMENT_TYPE_NAMES: readonly ElementTypeName[] = ['u8', 'i32', 'u32', 'i64', 'u64', 'f32', 'f64'];

export const ReduceOp = {
  sum: 1,
  prod: 2,
  min: 3,
  max: 4,
  land: 5,
  lor: 6,
  lxor: 7,
  band: 8,
  bor: 9,
  bxor: 10,
} as const;
export type ReduceOpName = keyof typeof ReduceOp;
export type ReduceOpCode = (typeof ReduceOp)[ReduceOpName];
export const REDUCE_OP_NAMES: readonly ReduceOpName[] = [
  'sum',
  'prod',
  'min',
  'max',
  'land',
  'lor',
  'lxor',
  'band',
  'bor',
  'bxor',
];

/**
 * Whether operation `op` is defined on element type `type`. Bytes take only the bitwise
 * operations; floats take sum, prod, min and max; the integer types take all ten.
 */
export function reduceAllowed(op: number, type: number): boolean {
  if (!Number.isInteger(op) || op < 1 || op > 10) return false;
  if (!Number.isInteger(type) || type < 0 || type > 6) return false;
  if (type === ElementType.u8) return op >= ReduceOp.band;
  if (type === ElementType.f32 || type === ElementType.f64) return op <= ReduceOp.max;
  return true;
}

/** Element type of each typed-array type, most specific first (a Buffer is a Uint8Array). */
const TYPE_OF_ARRAY: readonly [abstract new (...args: never[]) => ArrayBufferView, ElementTypeCode][] = [
  [Float64Array, ElementType.f64],
  [Float32Array, ElementType.f32],
  [Int32Array, ElementType.i32],
  [Uint32Array, ElementType.u32],
  [BigInt64Array, ElementType.i64],
  [BigUint64Array, ElementType.u64],
  [Uint8Array, ElementType.u8],
];

/** The element type a typed array holds, or undefined for other views. */
export function elementTypeOf(a: ArrayBufferView): ElementTypeCode | undefined {
  for (const [ctor, code] of TYPE_OF_ARRAY) if (a instanceof ctor) return code;
  return undefined;
}
