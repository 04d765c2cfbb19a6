import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  fnv1a64,
  fnv1a64Batch,
  isPlexusError,
  kernels,
  MAX_SHARDS,
  shardOf,
  shardOfBatch,
} from '../../ts/core/index.js';
import { externalVectors } from '../helpers/paths.js';
import { randomBytes, rng } from '../helpers/rng.js';

const vectors = readFileSync(externalVectors('fnv1a64.txt'), 'utf8')
  .split('\n')
  .filter((l) => l.length > 0 && !l.startsWith('#'))
  .map((l) => {
    const [hex, want] = l.split('\t') as [string, string];
    return { input: Uint8Array.from(Buffer.from(hex, 'hex')), want: BigInt(`0x${want}`) };
  });

/** A deliberately plain BigInt FNV-1a 64 to check both twins against. */
function reference(bytes: Uint8Array): bigint {
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) h = BigInt.asUintN(64, (h ^ BigInt(b)) * 0x100000001b3n);
  return h;
}

const SAMPLE_STRINGS = [
  '',
  'vt:orders/1234',
  'vt:users/αβγ',
  'vt:emoji/😀🎉',
  'lone high \ud800 surrogate',
  'lone low \udc00 surrogate',
  '\ud83d',
  '\ude00',
  'ascii'.repeat(50),
  '中文字符',
];

describe.each(kernels())('FNV-1a 64 ($name)', (k) => {
  it('matches the FNV reference vectors (vectors/external/fnv1a64.txt)', () => {
    expect(vectors.length).toBe(20);
    for (const v of vectors) expect(k.fnv1a64(v.input)).toBe(v.want);
  });

  it('matches a plain BigInt reference on seeded random inputs', () => {
    const next = rng(7);
    for (let n = 0; n < 300; n++) {
      const b = randomBytes(next, n);
      expect(k.fnv1a64(b)).toBe(reference(b));
      expect(k.fnv1a64(b.subarray(1))).toBe(reference(b.subarray(1)));
    }
  });

  it('hashes strings as their UTF-8 (lone surrogates as U+FFFD, like TextEncoder)', () => {
    const enc = new TextEncoder();
    for (const s of SAMPLE_STRINGS) expect(k.fnv1a64String(s)).toBe(reference(enc.encode(s)));
  });

  it('batch equals one at a time, including surrogate halves split across items', () => {
    const items = [...SAMPLE_STRINGS, 'end high \ud83d', '\ude00 start low', 'x', ''];
    const want = items.map((s) => k.fnv1a64String(s));
    expect(Array.from(k.fnv1a64Batch(items))).toEqual(want);
    expect(Array.from(k.shardBatch(items, 1024))).toEqual(want.map((h) => Number(h & 1023n)));
    expect(k.fnv1a64Batch([]).length).toBe(0);
  });

  it('batch of many random IRIs equals one at a time', () => {
    const next = rng(11);
    const items: string[] = [];
    for (let i = 0; i < 2000; i++) {
      let s = 'vt:';
      const len = next() % 60;
      for (let j = 0; j < len; j++) {
        const r = next() % 100;
        s +=
          r < 90
            ? String.fromCharCode(0x21 + (next() % 94))
            : r < 97
              ? String.fromCharCode(0xa0 + (next() % 0x700))
              : '😀';
      }
      items.push(s);
    }
    const batch = k.fnv1a64Batch(items);
    for (let i = 0; i < items.length; i++) expect(batch[i]).toBe(k.fnv1a64String(items[i] as string));
  });
});

describe('shard hash version 1 (public API)', () => {
  it('is FNV-1a-64 of the UTF-8 IRI mod the shard count', () => {
    expect(shardOf('vt:orders/1234', 1)).toBe(0);
    const h = fnv1a64('vt:orders/1234');
    for (const n of [2, 4, 256, 65536, MAX_SHARDS]) expect(shardOf('vt:orders/1234', n)).toBe(Number(h % BigInt(n)));
    expect(Array.from(shardOfBatch(['a', 'b'], 16))).toEqual([shardOf('a', 16), shardOf('b', 16)]);
  });

  it('refuses shard counts that are not a power of two from 1 to 2^20', () => {
    for (const bad of [0, 3, 6, 1000, MAX_SHARDS * 2, -4, 1.5, Number.NaN, '8', undefined]) {
      let err: unknown;
      try {
        shardOf('x', bad as number);
      } catch (e) {
        err = e;
      }
      expect(isPlexusError(err, 'PLX_CORE_BAD_SHARD_COUNT')).toBe(true);
      expect(() => shardOfBatch(['x'], bad as number)).toThrow(/power of two/);
    }
  });

  it('refuses input that is neither string nor bytes', () => {
    for (const bad of [42, null, undefined, {}, [1, 2]]) {
      expect(() => fnv1a64(bad as unknown as string)).toThrow(expect.objectContaining({ code: 'PLX_CORE_BAD_INPUT' }));
    }
    expect(() => shardOf(7 as unknown as string, 4)).toThrow(expect.objectContaining({ code: 'PLX_CORE_BAD_INPUT' }));
    expect(() => fnv1a64Batch(['a', 3 as unknown as string])).toThrow(/item 1/);
    expect(() => fnv1a64Batch('abc' as unknown as string[])).toThrow(
      expect.objectContaining({ code: 'PLX_CORE_BAD_INPUT' }),
    );
  });
});
