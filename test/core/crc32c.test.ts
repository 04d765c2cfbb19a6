import { describe, expect, it } from 'vitest';
import { allocShared, crc32c, kernels } from '../../ts/core/index.js';
import { randomBytes, rng } from '../helpers/rng.js';

/** Bit-at-a-time CRC-32C, the simplest correct form, as the reference. */
function reference(bytes: Uint8Array, prev = 0): number {
  let c = ~prev >>> 0;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return ~c >>> 0;
}

const inc = Uint8Array.from({ length: 32 }, (_, i) => i);
const dec = Uint8Array.from({ length: 32 }, (_, i) => 31 - i);

describe.each(kernels())('CRC-32C ($name)', (k) => {
  it('matches RFC 3720 B.4 and the check value', () => {
    expect(k.crc32c(new Uint8Array(32), 0)).toBe(0x8a9136aa);
    expect(k.crc32c(new Uint8Array(32).fill(0xff), 0)).toBe(0x62a8ab43);
    expect(k.crc32c(inc, 0)).toBe(0x46dd794e);
    expect(k.crc32c(dec, 0)).toBe(0x113fdb5c);
    expect(k.crc32c(new TextEncoder().encode('123456789'), 0)).toBe(0xe3069283);
    expect(k.crc32c(new Uint8Array(0), 0)).toBe(0);
  });

  it('matches the bitwise reference at every length 0..300 and offset, and chains', () => {
    const next = rng(3);
    const buf = randomBytes(next, 400);
    for (let n = 0; n <= 300; n++) {
      const off = n % 7;
      const b = buf.subarray(off, off + n);
      expect(k.crc32c(b, 0)).toBe(reference(b));
      const cut = n >> 1;
      expect(k.crc32c(b.subarray(cut), k.crc32c(b.subarray(0, cut), 0))).toBe(reference(b));
    }
  });
});

describe('crc32c (public API)', () => {
  it('is zero copy on shared blocks and handles inputs above the scratch chunk', () => {
    const big = randomBytes(rng(5), (1 << 20) * 2 + 13);
    const want = reference(big);
    expect(crc32c(big)).toBe(want);
    const s = allocShared(big.length);
    s.u8.set(big);
    expect(crc32c(s.u8)).toBe(want);
    s.free();
  });

  it('refuses bad arguments', () => {
    expect(() => crc32c('abc' as unknown as Uint8Array)).toThrow(
      expect.objectContaining({ code: 'PLX_CORE_BAD_INPUT' }),
    );
    expect(() => crc32c(new Uint8Array(1), -1)).toThrow(expect.objectContaining({ code: 'PLX_CORE_BAD_INPUT' }));
    expect(() => crc32c(new Uint8Array(1), 2 ** 32)).toThrow(/32-bit/);
  });
});
