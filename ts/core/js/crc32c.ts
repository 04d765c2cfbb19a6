/**
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78; RFC 3720 §12.1), slicing-by-8:
 * the reference twin of asm/crc32c.ts.
 */
const POLY = 0x82f63b78;
const T = new Int32Array(8 * 256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
  T[n] = c;
}
for (let n = 0; n < 256; n++) {
  let c = T[n] as number;
  for (let t = 1; t < 8; t++) {
    c = (T[c & 0xff] as number) ^ (c >>> 8);
    T[t * 256 + n] = c;
  }
}

export function crc32c(data: Uint8Array, prev: number): number {
  let c = ~prev;
  let i = 0;
  const n = data.length;
  const end8 = n - (n & 7);
  while (i < end8) {
    const lo =
      ((data[i] as number) |
        ((data[i + 1] as number) << 8) |
        ((data[i + 2] as number) << 16) |
        ((data[i + 3] as number) << 24)) ^
      c;
    const hi =
      (data[i + 4] as number) |
      ((data[i + 5] as number) << 8) |
      ((data[i + 6] as number) << 16) |
      ((data[i + 7] as number) << 24);
    c =
      (T[1792 + (lo & 0xff)] as number) ^
      (T[1536 + ((lo >>> 8) & 0xff)] as number) ^
      (T[1280 + ((lo >>> 16) & 0xff)] as number) ^
      (T[1024 + (lo >>> 24)] as number) ^
      (T[768 + (hi & 0xff)] as number) ^
      (T[512 + ((hi >>> 8) & 0xff)] as number) ^
      (T[256 + ((hi >>> 16) & 0xff)] as number) ^
      (T[hi >>> 24] as number);
    i += 8;
  }
  while (i < n) {
    c = (T[(c ^ (data[i] as number)) & 0xff] as number) ^ (c >>> 8);
    i++;
  }
  return ~c >>> 0;
}
