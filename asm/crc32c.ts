// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, RFC 3720 §12.1).
//
// Two table-driven paths compute the same function:
//
// - Slicing-by-16, for inputs below CHUNK bytes and for what the wide path leaves over. One
//   step XORs sixteen lookups, one per input byte. The twelve lookups that do not depend on the
//   running CRC are XORed together first and the four that do are paired in a balanced tree, so
//   the chain carried from one step to the next is one lookup and three XORs long.
// - 16 streams at once (v128), for inputs of CHUNK bytes and more. Each CHUNK-byte chunk is cut
//   into 16 consecutive blocks of BLOCK bytes; byte lane k of the vector state runs the
//   byte-at-a-time CRC over block k, its 256-entry lookup done as two 16-entry lookups
//   (i8x16.swizzle) of the low and the high nibble, as the table is linear. Loads take 4 bytes
//   from each block and transpose them so that vector i holds byte i of every block. At the
//   chunk's end the 16 lane CRCs are joined: CRC(A ‖ B) = shift(CRC(A), |B|) ^ CRC0(B), where
//   CRC0 starts from 0 and shift multiplies by x^(8·|B|) modulo the polynomial, which is linear
//   in the CRC and done with four byte-indexed tables.
//
// The tables are computed once when the module is instantiated.

const POLY: u32 = 0x82f63b78;

/** 16 tables of 256 u32: T[t][n] is the CRC register after byte n followed by t zero bytes. */
const SLICE: usize = memory.data(16 * 256 * 4, 64);
const T0: usize = SLICE;
const T1: usize = SLICE + 1024;
const T2: usize = SLICE + 2 * 1024;
const T3: usize = SLICE + 3 * 1024;
const T4: usize = SLICE + 4 * 1024;
const T5: usize = SLICE + 5 * 1024;
const T6: usize = SLICE + 6 * 1024;
const T7: usize = SLICE + 7 * 1024;
const T8: usize = SLICE + 8 * 1024;
const T9: usize = SLICE + 9 * 1024;
const T10: usize = SLICE + 10 * 1024;
const T11: usize = SLICE + 11 * 1024;
const T12: usize = SLICE + 12 * 1024;
const T13: usize = SLICE + 13 * 1024;
const T14: usize = SLICE + 14 * 1024;
const T15: usize = SLICE + 15 * 1024;

/** Bytes per stream block of the wide path, and bytes per chunk (16 blocks). */
const BLOCK: usize = 256;
const CHUNK: usize = 16 * BLOCK;

/** 4 tables of 256 u32: the shift by BLOCK zero bytes, applied one byte of the CRC at a time. */
const SHIFT: usize = memory.data(4 * 256 * 4, 64);

/** 8 vectors of 16 bytes: byte j of T0[n] (j = 0..3), then byte j of T0[n << 4]. */
const NIBBLES: usize = memory.data(8 * 16, 16);

function initTables(): void {
  for (let n: u32 = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
    store<u32>(T0 + (<usize>n << 2), c);
  }
  for (let n: usize = 0; n < 256; n++) {
    let c = load<u32>(T0 + (n << 2));
    for (let t: usize = 1; t < 16; t++) {
      c = load<u32>(T0 + (<usize>(c & 0xff) << 2)) ^ (c >>> 8);
      store<u32>(SLICE + (t << 10) + (n << 2), c);
    }
  }
  // The shift is linear: its value on each of the 32 single bits, then on every byte value.
  for (let k: usize = 0; k < 4; k++) {
    const tab = SHIFT + (k << 10);
    store<u32>(tab, 0);
    for (let j: u32 = 0; j < 8; j++) {
      let c: u32 = 1 << ((<u32>k << 3) + j);
      for (let n: usize = 0; n < BLOCK; n++) c = load<u32>(T0 + (<usize>(c & 0xff) << 2)) ^ (c >>> 8);
      store<u32>(tab + (<usize>4 << j), c);
    }
    for (let b: usize = 3; b < 256; b++) {
      const low = b & (~b + 1);
      if (low != b) store<u32>(tab + (b << 2), load<u32>(tab + (low << 2)) ^ load<u32>(tab + ((b ^ low) << 2)));
    }
  }
  for (let j: usize = 0; j < 4; j++) {
    for (let n: usize = 0; n < 16; n++) {
      store<u8>(NIBBLES + (j << 4) + n, <u8>(load<u32>(T0 + (n << 2)) >>> (<u32>j << 3)));
      store<u8>(NIBBLES + 64 + (j << 4) + n, <u8>(load<u32>(T0 + (n << 6)) >>> (<u32>j << 3)));
    }
  }
}
initTables();

// Byte k of a 32-bit word as a byte offset into a 256-entry u32 table.
@inline function at0(w: u32): usize {
  return <usize>((w << 2) & 0x3fc);
}
@inline function at1(w: u32): usize {
  return <usize>((w >>> 6) & 0x3fc);
}
@inline function at2(w: u32): usize {
  return <usize>((w >>> 14) & 0x3fc);
}
@inline function at3(w: u32): usize {
  return <usize>((w >>> 24) << 2);
}

/** CRC shifted over BLOCK zero bytes (multiplied by x^(8·BLOCK) modulo the polynomial). */
@inline function shiftBlock(c: u32): u32 {
  return (
    load<u32>(at0(c), SHIFT) ^
    load<u32>(at1(c), SHIFT + 1024) ^
    (load<u32>(at2(c), SHIFT + 2048) ^ load<u32>(at3(c), SHIFT + 3072))
  );
}

/** Joins four lane CRCs (lanes 0..3 of `w`, in stream order) onto `c`. */
@inline function joinLanes(c: u32, w: v128): u32 {
  c = shiftBlock(c) ^ i32x4.extract_lane(w, 0);
  c = shiftBlock(c) ^ i32x4.extract_lane(w, 1);
  c = shiftBlock(c) ^ i32x4.extract_lane(w, 2);
  return shiftBlock(c) ^ i32x4.extract_lane(w, 3);
}

// Byte interleaves: lo8 takes bytes 0..7 of a and b alternately, hi8 bytes 8..15; lo16 and
// hi16 the same for 16-bit units.
@inline function lo8(a: v128, b: v128): v128 {
  return i8x16.shuffle(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
@inline function hi8(a: v128, b: v128): v128 {
  return i8x16.shuffle(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}
@inline function lo16(a: v128, b: v128): v128 {
  return i8x16.shuffle(a, b, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
}
@inline function hi16(a: v128, b: v128): v128 {
  return i8x16.shuffle(a, b, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
}

/** One state byte's lookup: the table of the low nibble at `l` XOR that of the high nibble at `h`. */
@inline function nibbles(tl: v128, th: v128, l: v128, h: v128): v128 {
  return v128.xor(i8x16.swizzle(tl, l), i8x16.swizzle(th, h));
}

/** CRC-32C of memory[ptr .. ptr + len), continuing from `prev` (0 for a fresh checksum). */
export function crc32c(ptr: usize, len: usize, prev: u32): u32 {
  let c = ~prev;
  let p = ptr;
  const end = ptr + len;

  if (len >= CHUNK) {
    const m = i8x16.splat(0x0f);
    const zero = i8x16.splat(0);
    const tl0 = v128.load(NIBBLES);
    const tl1 = v128.load(NIBBLES, 16);
    const tl2 = v128.load(NIBBLES, 32);
    const tl3 = v128.load(NIBBLES, 48);
    const th0 = v128.load(NIBBLES, 64);
    const th1 = v128.load(NIBBLES, 80);
    const th2 = v128.load(NIBBLES, 96);
    const th3 = v128.load(NIBBLES, 112);
    do {
      // State byte j of every lane in s_j; lane 0 (the first block) continues from c, the
      // other lanes start from 0.
      let s0 = i32x4.replace_lane(zero, 0, c & 0xff);
      let s1 = i32x4.replace_lane(zero, 0, (c >>> 8) & 0xff);
      let s2 = i32x4.replace_lane(zero, 0, (c >>> 16) & 0xff);
      let s3 = i32x4.replace_lane(zero, 0, c >>> 24);
      const stop = p + BLOCK;
      do {
        // 4 bytes of each block, transposed: d_i holds byte i of blocks 0..15.
        const a0 = lo8(v128.load32_zero(p), v128.load32_zero(p, 8 * BLOCK));
        const a1 = lo8(v128.load32_zero(p, BLOCK), v128.load32_zero(p, 9 * BLOCK));
        const a2 = lo8(v128.load32_zero(p, 2 * BLOCK), v128.load32_zero(p, 10 * BLOCK));
        const a3 = lo8(v128.load32_zero(p, 3 * BLOCK), v128.load32_zero(p, 11 * BLOCK));
        const a4 = lo8(v128.load32_zero(p, 4 * BLOCK), v128.load32_zero(p, 12 * BLOCK));
        const a5 = lo8(v128.load32_zero(p, 5 * BLOCK), v128.load32_zero(p, 13 * BLOCK));
        const a6 = lo8(v128.load32_zero(p, 6 * BLOCK), v128.load32_zero(p, 14 * BLOCK));
        const a7 = lo8(v128.load32_zero(p, 7 * BLOCK), v128.load32_zero(p, 15 * BLOCK));
        const b0 = lo8(a0, a4);
        const b1 = lo8(a1, a5);
        const b2 = lo8(a2, a6);
        const b3 = lo8(a3, a7);
        const e0 = lo8(b0, b2);
        const e1 = hi8(b0, b2);
        const e2 = lo8(b1, b3);
        const e3 = hi8(b1, b3);
        const d0 = lo8(e0, e2);
        const d1 = hi8(e0, e2);
        const d2 = lo8(e1, e3);
        const d3 = hi8(e1, e3);

        // One byte step per d_i, the four written out: the state stays in locals (a helper
        // cannot return four vectors, and an array of them would live in memory).
        let x = v128.xor(s0, d0);
        let l = v128.and(x, m);
        let h = v128.and(i16x8.shr_u(x, 4), m);
        s0 = v128.xor(s1, nibbles(tl0, th0, l, h));
        s1 = v128.xor(s2, nibbles(tl1, th1, l, h));
        s2 = v128.xor(s3, nibbles(tl2, th2, l, h));
        s3 = nibbles(tl3, th3, l, h);

        x = v128.xor(s0, d1);
        l = v128.and(x, m);
        h = v128.and(i16x8.shr_u(x, 4), m);
        s0 = v128.xor(s1, nibbles(tl0, th0, l, h));
        s1 = v128.xor(s2, nibbles(tl1, th1, l, h));
        s2 = v128.xor(s3, nibbles(tl2, th2, l, h));
        s3 = nibbles(tl3, th3, l, h);

        x = v128.xor(s0, d2);
        l = v128.and(x, m);
        h = v128.and(i16x8.shr_u(x, 4), m);
        s0 = v128.xor(s1, nibbles(tl0, th0, l, h));
        s1 = v128.xor(s2, nibbles(tl1, th1, l, h));
        s2 = v128.xor(s3, nibbles(tl2, th2, l, h));
        s3 = nibbles(tl3, th3, l, h);

        x = v128.xor(s0, d3);
        l = v128.and(x, m);
        h = v128.and(i16x8.shr_u(x, 4), m);
        s0 = v128.xor(s1, nibbles(tl0, th0, l, h));
        s1 = v128.xor(s2, nibbles(tl1, th1, l, h));
        s2 = v128.xor(s3, nibbles(tl2, th2, l, h));
        s3 = nibbles(tl3, th3, l, h);

        p += 4;
      } while (p < stop);
      // Lane k's CRC as a u32 in lane k & 3 of w_(k >> 2), then joined in block order.
      const f0 = lo8(s0, s1);
      const f1 = hi8(s0, s1);
      const f2 = lo8(s2, s3);
      const f3 = hi8(s2, s3);
      const w0 = lo16(f0, f2);
      c = i32x4.extract_lane(w0, 0);
      c = shiftBlock(c) ^ i32x4.extract_lane(w0, 1);
      c = shiftBlock(c) ^ i32x4.extract_lane(w0, 2);
      c = shiftBlock(c) ^ i32x4.extract_lane(w0, 3);
      c = joinLanes(c, hi16(f0, f2));
      c = joinLanes(c, lo16(f1, f3));
      c = joinLanes(c, hi16(f1, f3));
      p += 15 * BLOCK;
    } while (end - p >= CHUNK);
  }

  while (end - p >= 16) {
    const w0 = load<u32>(p) ^ c;
    const w1 = load<u32>(p, 4);
    const w2 = load<u32>(p, 8);
    const w3 = load<u32>(p, 12);
    const rest =
      load<u32>(at0(w1), T11) ^
      load<u32>(at1(w1), T10) ^
      (load<u32>(at2(w1), T9) ^ load<u32>(at3(w1), T8)) ^
      (load<u32>(at0(w2), T7) ^ load<u32>(at1(w2), T6) ^ (load<u32>(at2(w2), T5) ^ load<u32>(at3(w2), T4))) ^
      (load<u32>(at0(w3), T3) ^ load<u32>(at1(w3), T2) ^ (load<u32>(at2(w3), T1) ^ load<u32>(at3(w3), T0)));
    c = rest ^ (load<u32>(at0(w0), T15) ^ load<u32>(at1(w0), T14) ^ (load<u32>(at2(w0), T13) ^ load<u32>(at3(w0), T12)));
    p += 16;
  }
  if (end - p >= 8) {
    const w0 = load<u32>(p) ^ c;
    const w1 = load<u32>(p, 4);
    const rest = load<u32>(at0(w1), T3) ^ load<u32>(at1(w1), T2) ^ (load<u32>(at2(w1), T1) ^ load<u32>(at3(w1), T0));
    c = rest ^ (load<u32>(at0(w0), T7) ^ load<u32>(at1(w0), T6) ^ (load<u32>(at2(w0), T5) ^ load<u32>(at3(w0), T4)));
    p += 8;
  }
  while (p < end) {
    c = load<u32>(at0(c ^ <u32>load<u8>(p)), T0) ^ (c >>> 8);
    p++;
  }
  return ~c;
}
