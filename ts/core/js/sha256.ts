/**
 * SHA-256 (FIPS 180-4, Secure Hash Standard, section 6.2): the reference twin of
 * asm/sha256.ts. 32-bit arithmetic on Int32 values (`| 0` after every sum), one message
 * schedule array and one tail block shared by all calls, so hashing allocates nothing
 * per block.
 */
import { PlexusError } from '../errors.js';
import type { Sha256Stream } from '../types.js';

/**
 * The constants K0..K63 of FIPS 180-4 section 4.2.2: the first 32 bits of the
 * fractional parts of the cube roots of the first 64 primes.
 */
const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);

/**
 * The initial hash value H(0) of FIPS 180-4 section 5.3.3: the first 32 bits of the
 * fractional parts of the square roots of the first 8 primes.
 */
const IV = new Int32Array([
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]);

/** The message schedule W0..W63 (FIPS 180-4 section 6.2.2, step 1). */
const W = new Int32Array(64);
/** The padded final block or two (FIPS 180-4 section 5.1.1). */
const TAIL = new Uint8Array(128);
/** Intermediate hash value of one-shot and batch digests. */
const H1 = new Int32Array(8);

/**
 * The compression function (FIPS 180-4 section 6.2.2) over `blocks` consecutive 64-byte
 * blocks of `src` starting at `pos`, updating the hash value `H`.
 */
function compress(H: Int32Array, src: Uint8Array, pos: number, blocks: number): void {
  let h0 = H[0] as number;
  let h1 = H[1] as number;
  let h2 = H[2] as number;
  let h3 = H[3] as number;
  let h4 = H[4] as number;
  let h5 = H[5] as number;
  let h6 = H[6] as number;
  let h7 = H[7] as number;
  for (let n = 0; n < blocks; n++) {
    for (let t = 0; t < 16; t++, pos += 4) {
      W[t] =
        ((src[pos] as number) << 24) |
        ((src[pos + 1] as number) << 16) |
        ((src[pos + 2] as number) << 8) |
        (src[pos + 3] as number);
    }
    for (let t = 16; t < 64; t++) {
      const x = W[t - 15] as number;
      const y = W[t - 2] as number;
      // W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16]
      W[t] =
        ((((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10)) +
          (W[t - 7] as number) +
          (((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3)) +
          (W[t - 16] as number)) |
        0;
    }
    let a = h0;
    let b = h1;
    let c = h2;
    let d = h3;
    let e = h4;
    let f = h5;
    let g = h6;
    let h = h7;
    for (let t = 0; t < 64; t++) {
      // T1 = h + Σ1(e) + Ch(e, f, g) + K[t] + W[t]; T2 = Σ0(a) + Maj(a, b, c)
      const t1 =
        (h +
          (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
          (g ^ (e & (f ^ g))) +
          (K[t] as number) +
          (W[t] as number)) |
        0;
      const t2 =
        ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) + ((a & b) | (c & (a | b)))) |
        0;
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h0 = (h0 + a) | 0;
    h1 = (h1 + b) | 0;
    h2 = (h2 + c) | 0;
    h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0;
    h5 = (h5 + f) | 0;
    h6 = (h6 + g) | 0;
    h7 = (h7 + h) | 0;
  }
  H[0] = h0;
  H[1] = h1;
  H[2] = h2;
  H[3] = h3;
  H[4] = h4;
  H[5] = h5;
  H[6] = h6;
  H[7] = h7;
}

/**
 * Finishes a message of `total` bytes whose last `r` bytes (0..63, not yet compressed)
 * are src[pos .. pos + r): pads them (FIPS 180-4 section 5.1.1), compresses, and writes
 * the digest (H0 first, each word big endian) to out[outPos .. outPos + 32).
 */
function finish(
  H: Int32Array,
  src: Uint8Array,
  pos: number,
  r: number,
  total: number,
  out: Uint8Array,
  outPos: number,
): void {
  const end = r < 56 ? 64 : 128;
  for (let i = 0; i < r; i++) TAIL[i] = src[pos + i] as number;
  TAIL[r] = 0x80;
  TAIL.fill(0, r + 1, end - 8);
  // The length in bits as a big-endian u64 (exact for messages below 2^50 bytes).
  const hi = Math.floor(total / 0x20000000);
  const lo = (total * 8) >>> 0;
  TAIL[end - 8] = hi >>> 24;
  TAIL[end - 7] = hi >>> 16;
  TAIL[end - 6] = hi >>> 8;
  TAIL[end - 5] = hi;
  TAIL[end - 4] = lo >>> 24;
  TAIL[end - 3] = lo >>> 16;
  TAIL[end - 2] = lo >>> 8;
  TAIL[end - 1] = lo;
  compress(H, TAIL, 0, end >> 6);
  for (let i = 0; i < 8; i++, outPos += 4) {
    const v = H[i] as number;
    out[outPos] = v >>> 24;
    out[outPos + 1] = v >>> 16;
    out[outPos + 2] = v >>> 8;
    out[outPos + 3] = v;
  }
}

/** Digest of data[start .. end) into out[outPos .. outPos + 32). */
function hashInto(data: Uint8Array, start: number, end: number, out: Uint8Array, outPos: number): void {
  const len = end - start;
  const blocks = Math.floor(len / 64);
  H1.set(IV);
  compress(H1, data, start, blocks);
  finish(H1, data, start + blocks * 64, len & 63, len, out, outPos);
}

/** SHA-256 of `data`: 32 bytes. */
export function sha256(data: Uint8Array): Uint8Array {
  const out = new Uint8Array(32);
  hashInto(data, 0, data.length, out, 0);
  return out;
}

/** Digests of many messages: message i is data[offsets[i] .. offsets[i + 1]); 32 bytes each. */
export function sha256Batch(data: Uint8Array, offsets: Uint32Array): Uint8Array {
  const count = Math.max(offsets.length - 1, 0);
  const out = new Uint8Array(count * 32);
  for (let i = 0; i < count; i++) {
    hashInto(data, offsets[i] as number, offsets[i + 1] as number, out, i * 32);
  }
  return out;
}

/** A streaming SHA-256: `update` any number of times, then `digest` once. */
export class Sha256Js implements Sha256Stream {
  private readonly h = IV.slice();
  /** Bytes of the incomplete block not yet compressed. */
  private readonly buf = new Uint8Array(64);
  private fill = 0;
  /** Message bytes absorbed so far. */
  private total = 0;
  private done = false;

  update(data: Uint8Array): this {
    if (this.done) throw digested();
    let len = data.length;
    let pos = 0;
    this.total += len;
    if (this.fill > 0) {
      const take = Math.min(64 - this.fill, len);
      this.buf.set(take === len ? data : data.subarray(0, take), this.fill);
      this.fill += take;
      pos = take;
      len -= take;
      if (this.fill < 64) return this;
      compress(this.h, this.buf, 0, 1);
      this.fill = 0;
    }
    const blocks = Math.floor(len / 64);
    compress(this.h, data, pos, blocks);
    pos += blocks * 64;
    const r = len & 63;
    if (r > 0) this.buf.set(data.subarray(pos, pos + r));
    this.fill = r;
    return this;
  }

  digest(): Uint8Array {
    if (this.done) throw digested();
    this.done = true;
    const out = new Uint8Array(32);
    finish(this.h, this.buf, 0, this.fill, this.total, out, 0);
    return out;
  }
}

function digested(): PlexusError {
  return new PlexusError(
    'PLX_CORE_DIGESTED',
    'This SHA-256 stream has already produced its digest and cannot be used again; start a new stream.',
  );
}
