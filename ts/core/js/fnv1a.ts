/**
 * FNV-1a 64 in TypeScript, the reference twin of asm/fnv1a.ts.
 * The 64-bit state is two unsigned 32-bit halves. With prime = 2^40 + 0x1b3,
 * h·prime mod 2^64 = h·0x1b3 + (h << 40): the low half is (lo·0x1b3) mod 2^32 (exact in a
 * double, lo·0x1b3 < 2^41), and the high half gathers hi·0x1b3, the carry of the low
 * product and lo << 8.
 */
const OFFSET_HI = 0xcbf29ce4;
const OFFSET_LO = 0x84222325;
const P = 0x1b3;
const TWO32 = 4294967296;

function join(hi: number, lo: number): bigint {
  return (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0);
}

export function fnv1a64(data: Uint8Array): bigint {
  let hi = OFFSET_HI;
  let lo = OFFSET_LO;
  for (let i = 0; i < data.length; i++) {
    lo = (lo ^ (data[i] as number)) >>> 0;
    const t = lo * P;
    hi = (Math.imul(hi, P) + Math.floor(t / TWO32) + (lo << 8)) >>> 0;
    lo = t >>> 0;
  }
  return join(hi, lo);
}

/** Hashes the UTF-8 encoding of `s` without materialising it (lone surrogates as U+FFFD). */
export function fnv1a64String(s: string): bigint {
  let hi = OFFSET_HI;
  let lo = OFFSET_LO;
  const step = (b: number): void => {
    lo = (lo ^ b) >>> 0;
    const t = lo * P;
    hi = (Math.imul(hi, P) + Math.floor(t / TWO32) + (lo << 8)) >>> 0;
    lo = t >>> 0;
  };
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      step(c);
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const d = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
      if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
        step(0xf0 | (c >> 18));
        step(0x80 | ((c >> 12) & 0x3f));
        step(0x80 | ((c >> 6) & 0x3f));
        step(0x80 | (c & 0x3f));
        continue;
      }
      c = 0xfffd;
    }
    if (c < 0x800) {
      step(0xc0 | (c >> 6));
      step(0x80 | (c & 0x3f));
    } else {
      step(0xe0 | (c >> 12));
      step(0x80 | ((c >> 6) & 0x3f));
      step(0x80 | (c & 0x3f));
    }
  }
  return join(hi, lo);
}

export function fnv1a64Batch(items: readonly string[]): BigUint64Array {
  const out = new BigUint64Array(items.length);
  for (let i = 0; i < items.length; i++) out[i] = fnv1a64String(items[i] as string);
  return out;
}

export function shardBatch(items: readonly string[], shardCount: number): Uint32Array {
  const out = new Uint32Array(items.length);
  const mask = BigInt(shardCount - 1);
  for (let i = 0; i < items.length; i++) out[i] = Number(fnv1a64String(items[i] as string) & mask);
  return out;
}
