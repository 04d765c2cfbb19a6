// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, RFC 3720 §12.1), slicing-by-8.
// The eight 256-entry tables are computed once when the module is instantiated.

const POLY: u32 = 0x82f63b78;
const TABLES: usize = memory.data(8 * 256 * 4, 16);

function initTables(): void {
  for (let n: u32 = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
    store<u32>(TABLES + (<usize>n << 2), c);
  }
  for (let n: u32 = 0; n < 256; n++) {
    let c = load<u32>(TABLES + (<usize>n << 2));
    for (let t: usize = 1; t < 8; t++) {
      c = load<u32>(TABLES + (<usize>(c & 0xff) << 2)) ^ (c >>> 8);
      store<u32>(TABLES + (t << 10) + (<usize>n << 2), c);
    }
  }
}
initTables();

@inline
function tab(t: usize, i: u32): u32 {
  return load<u32>(TABLES + (t << 10) + (<usize>(i & 0xff) << 2));
}

/** CRC-32C of memory[ptr .. ptr + len), continuing from `prev` (0 for a fresh checksum). */
export function crc32c(ptr: usize, len: usize, prev: u32): u32 {
  let c = ~prev;
  let p = ptr;
  const end = ptr + len;
  while (p + 8 <= end) {
    const lo = load<u32>(p) ^ c;
    const hi = load<u32>(p, 4);
    c =
      tab(7, lo) ^
      tab(6, lo >>> 8) ^
      tab(5, lo >>> 16) ^
      tab(4, lo >>> 24) ^
      tab(3, hi) ^
      tab(2, hi >>> 8) ^
      tab(1, hi >>> 16) ^
      tab(0, hi >>> 24);
    p += 8;
  }
  while (p < end) {
    c = tab(0, c ^ <u32>load<u8>(p)) ^ (c >>> 8);
    p++;
  }
  return ~c;
}
