import fc from 'fast-check';
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

// The WebAssembly kernel runs 16 streams at once over chunks of CHUNK bytes (16 blocks of
// BLOCK) and slicing-by-16 below that and after the last whole chunk (asm/crc32c.ts).
const BLOCK = 256;
const CHUNK = 16 * BLOCK;
/** Lengths on and around every path boundary: whole chunks, blocks, 16- and 8-byte steps. */
const EDGES = [
  ...[0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33],
  ...[BLOCK, CHUNK, CHUNK + BLOCK, 2 * CHUNK, 3 * CHUNK, 4 * CHUNK - 24].flatMap((n) =>
    [-17, -16, -9, -8, -1, 0, 1, 4, 7, 8, 15, 16, 17].map((d) => n + d),
  ),
  18_000,
];

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

  it('matches the bitwise reference on and around every chunk, block and step boundary', () => {
    const next = rng(11);
    const buf = randomBytes(next, 4 * CHUNK + 24);
    for (const [i, n] of EDGES.entries()) {
      const off = i % 8;
      const b = buf.subarray(off, off + n);
      const prev = next();
      expect(k.crc32c(b, prev), `length ${n} at offset ${off}`).toBe(reference(b, prev));
    }
  });

  it('chains across calls cut anywhere, inside and between chunks', () => {
    const next = rng(13);
    const b = randomBytes(next, 3 * CHUNK + 1234);
    const want = reference(b, 0x12345678);
    const cuts = [
      1,
      15,
      16,
      255,
      BLOCK,
      CHUNK - 1,
      CHUNK,
      CHUNK + 1,
      CHUNK + BLOCK + 3,
      2 * CHUNK,
      3 * CHUNK + 1,
      b.length - 1,
    ];
    for (let i = 0; i < 8; i++) cuts.push(next() % b.length);
    for (const cut of cuts) {
      expect(k.crc32c(b.subarray(cut), k.crc32c(b.subarray(0, cut), 0x12345678)), `cut at ${cut}`).toBe(want);
    }
    // Three pieces, each long enough for the 16-stream path.
    const a1 = CHUNK + 5;
    const a2 = a1 + 2 * CHUNK + 1;
    const c1 = k.crc32c(b.subarray(0, a1), 0x12345678);
    expect(k.crc32c(b.subarray(a2), k.crc32c(b.subarray(a1, a2), c1))).toBe(want);
  });

  it('matches the bitwise reference on random lengths up to 3 MiB', () => {
    const next = rng(17);
    const buf = randomBytes(next, (3 << 20) + 8);
    for (let i = 0; i < 4; i++) {
      const n = i === 0 ? 3 << 20 : next() % (3 << 20);
      const off = (i * 3) % 8;
      const b = buf.subarray(off, off + n);
      const prev = next();
      expect(k.crc32c(b, prev), `length ${n}`).toBe(reference(b, prev));
    }
  });
});

describe('CRC-32C (WebAssembly) against the TypeScript twin', () => {
  const kernel = (name: string) => {
    const k = kernels().find((x) => x.name === name);
    if (!k) throw new Error(`no ${name} kernel`);
    return k;
  };
  const wasm = kernel('wasm');
  const js = kernel('js');

  it('agrees with the twin and the bitwise reference on any bytes, offset, prev and cut (property)', () => {
    fc.assert(
      fc.property(
        // Lengths spread evenly up to past three chunks (fc.uint8Array keeps arrays short).
        fc.oneof(fc.nat(64), fc.nat(3 * CHUNK + 100)),
        fc.nat(),
        fc.nat(7),
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.nat(),
        (n, seed, off, prev, cutSeed) => {
          const buf = randomBytes(rng(seed), n + off);
          const b = buf.subarray(off);
          const want = reference(b, prev);
          expect(wasm.crc32c(b, prev)).toBe(want);
          expect(js.crc32c(b, prev)).toBe(want);
          const cut = b.length === 0 ? 0 : cutSeed % (b.length + 1);
          expect(wasm.crc32c(b.subarray(cut), wasm.crc32c(b.subarray(0, cut), prev))).toBe(want);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('agrees with the twin on long random inputs that start at any offset inside shared memory', () => {
    const next = rng(19);
    for (let i = 0; i < 12; i++) {
      const n = CHUNK * (1 + (next() % 40)) + (next() % CHUNK);
      const off = next() % 16;
      const s = allocShared(n + off);
      try {
        const view = s.u8.subarray(off, off + n);
        view.set(randomBytes(next, n));
        const prev = next();
        expect(wasm.crc32c(view, prev), `length ${n} at offset ${off}`).toBe(js.crc32c(view, prev));
      } finally {
        s.free();
      }
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
    // Chained through the scratch chunks, from a non-zero start.
    const cut = (1 << 20) + 77;
    expect(crc32c(big.subarray(cut), crc32c(big.subarray(0, cut), 0xdeadbeef))).toBe(reference(big, 0xdeadbeef));
  });

  it('refuses bad arguments', () => {
    expect(() => crc32c('abc' as unknown as Uint8Array)).toThrow(
      expect.objectContaining({ code: 'PLX_CORE_BAD_INPUT' }),
    );
    expect(() => crc32c(new Uint8Array(1), -1)).toThrow(expect.objectContaining({ code: 'PLX_CORE_BAD_INPUT' }));
    expect(() => crc32c(new Uint8Array(1), 2 ** 32)).toThrow(/32-bit/);
  });
});
