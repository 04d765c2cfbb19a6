// FNV-1a 64-bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3; Fowler, Noll, Vo,
// draft-eastlake-fnv), and shard hash version 1 = FNV-1a-64(UTF-8 of the IRI) mod shardCount.

const OFFSET: u64 = 0xcbf29ce484222325;
const PRIME: u64 = 0x100000001b3;

@inline
function hashRange(ptr: usize, len: usize): u64 {
  let h = OFFSET;
  const end = ptr + len;
  let p = ptr;
  // Four bytes per iteration: one 32-bit load instead of four byte loads.
  while (p + 4 <= end) {
    const w = load<u32>(p);
    h = (h ^ <u64>(w & 0xff)) * PRIME;
    h = (h ^ <u64>((w >> 8) & 0xff)) * PRIME;
    h = (h ^ <u64>((w >> 16) & 0xff)) * PRIME;
    h = (h ^ <u64>(w >> 24)) * PRIME;
    p += 4;
  }
  while (p < end) {
    h = (h ^ <u64>load<u8>(p)) * PRIME;
    p++;
  }
  return h;
}

/** FNV-1a 64 of memory[ptr .. ptr + len). */
export function fnv1a64(ptr: usize, len: usize): u64 {
  return hashRange(ptr, len);
}

/**
 * Walks `bytesLen` bytes of well-formed UTF-8 at `bytesPtr` holding `count` strings
 * back to back, where string i is `unitLens[i]` UTF-16 code units long, and calls the
 * hash on each string's bytes. A 4-byte sequence (2 units) that would cross the end of
 * a string means the strings were joined across a surrogate boundary: the walk stops
 * and returns that string's index, so the caller hashes the batch another way.
 * Returns -1 when every string was hashed. Never reads past bytesPtr + bytesLen.
 * mode 0 writes u64 hashes at outPtr; mode 1 writes u32 (hash & mask).
 */
@inline
function walkUtf8(bytesPtr: usize, bytesLen: usize, unitLensPtr: usize, count: i32, mask: u32, outPtr: usize, mode: i32): i32 {
  let p = bytesPtr;
  const end = bytesPtr + bytesLen;
  for (let i = 0; i < count; i++) {
    let units = <i32>load<u32>(unitLensPtr + (<usize>i << 2));
    const start = p;
    while (units > 0 && p < end) {
      const b = <u32>load<u8>(p);
      if (b < 0x80) {
        p += 1;
        units -= 1;
      } else if (b < 0xe0) {
        p += 2;
        units -= 1;
      } else if (b < 0xf0) {
        p += 3;
        units -= 1;
      } else {
        if (units < 2) return i;
        p += 4;
        units -= 2;
      }
    }
    if (units != 0 || p > end) return i;
    const h = hashRange(start, p - start);
    if (mode == 0) store<u64>(outPtr + (<usize>i << 3), h);
    else store<u32>(outPtr + (<usize>i << 2), <u32>h & mask);
  }
  return -1;
}

export function fnv1a64Utf8Batch(bytesPtr: usize, bytesLen: usize, unitLensPtr: usize, count: i32, outPtr: usize): i32 {
  return walkUtf8(bytesPtr, bytesLen, unitLensPtr, count, 0, outPtr, 0);
}

export function shardUtf8Batch(bytesPtr: usize, bytesLen: usize, unitLensPtr: usize, count: i32, mask: u32, outPtr: usize): i32 {
  return walkUtf8(bytesPtr, bytesLen, unitLensPtr, count, mask, outPtr, 1);
}
