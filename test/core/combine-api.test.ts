import { describe, expect, it } from 'vitest';
import { combine, ElementType, ReduceOp } from '../../ts/core/index.js';

const code = (f: () => void): string => {
  try {
    f();
  } catch (e) {
    return (e as { code: string }).code;
  }
  return 'none';
};

describe('combine (public API) refuses bad arguments before touching any element', () => {
  it('checks op, type, allowed pair, whole elements and equal lengths', () => {
    const a = new Float64Array([1, 2]);
    const b = new Float64Array([3, 4]);
    expect(code(() => combine(a, b, 0))).toBe('PLX_CORE_BAD_OP');
    expect(code(() => combine(a, b, 11))).toBe('PLX_CORE_BAD_OP');
    expect(code(() => combine(a, b, 'avg' as 'sum'))).toBe('PLX_CORE_BAD_OP');
    expect(code(() => combine(a, b, 'sum', 7))).toBe('PLX_CORE_BAD_TYPE');
    expect(code(() => combine(a, b, 'sum', 'f16' as 'f64'))).toBe('PLX_CORE_BAD_TYPE');
    expect(code(() => combine(a, b, 'bxor'))).toBe('PLX_CORE_OP_NOT_ALLOWED');
    expect(code(() => combine(a, b, 'land'))).toBe('PLX_CORE_OP_NOT_ALLOWED');
    const u = new Uint8Array(4);
    for (const op of ['sum', 'prod', 'min', 'max', 'land', 'lor', 'lxor'] as const) {
      expect(code(() => combine(u, u.slice(), op))).toBe('PLX_CORE_OP_NOT_ALLOWED');
    }
    expect(code(() => combine(new Uint8Array(12), new Uint8Array(12), 'sum', 'f64'))).toBe('PLX_CORE_BAD_LENGTH');
    expect(code(() => combine(new Float64Array(2), new Float64Array(3), 'sum'))).toBe('PLX_CORE_LENGTH_MISMATCH');
    expect(code(() => combine([1, 2] as unknown as Float64Array, b, 'sum'))).toBe('PLX_CORE_BAD_INPUT');
    expect(code(() => combine(new DataView(new ArrayBuffer(8)), new DataView(new ArrayBuffer(8)), 'sum'))).toBe(
      'PLX_CORE_BAD_TYPE',
    );
    expect(Array.from(a)).toEqual([1, 2]);
  });

  it('infers the element type from the array and accepts names or codes', () => {
    const a = new Int32Array([5, -3]);
    combine(a, new Int32Array([-7, 10]), 'min');
    expect(Array.from(a)).toEqual([-7, -3]);
    const u = new Uint32Array([5, 0xffffffff]);
    combine(u, new Uint32Array([7, 1]), ReduceOp.min, ElementType.u32);
    expect(Array.from(u)).toEqual([5, 1]);
    const big = new BigInt64Array([-1n, 2n]);
    combine(big, new BigInt64Array([1n, 3n]), 'sum');
    expect(Array.from(big)).toEqual([0n, 5n]);
    const bytes = new Uint8Array([0xf0, 0x0f]);
    combine(bytes, new Uint8Array([0xff, 0xff]), 'bxor');
    expect(Array.from(bytes)).toEqual([0x0f, 0xf0]);
    const raw = new Uint8Array(new Float64Array([1.5]).buffer);
    combine(raw, new Uint8Array(new Float64Array([2]).buffer), 'prod', 'f64');
    expect(new Float64Array(raw.buffer)[0]).toBe(3);
  });
});
