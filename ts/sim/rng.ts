/**
 * A seeded pseudo-random generator (xoshiro128**, seeded through splitmix32) so a simulation
 * run is a pure function of its seed. Never Math.random.
 */
import { SimErrorCode, simError } from './errors.js';

function splitmix32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
}

export class SimRandom {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(readonly seed: number) {
    if (!Number.isSafeInteger(seed) || seed < 0) {
      throw simError(SimErrorCode.BAD_CONFIG, `seed ${seed} must be a non-negative safe integer`);
    }
    const sm = splitmix32((seed ^ Math.floor(seed / 2 ** 32)) >>> 0);
    this.a = sm();
    this.b = sm();
    this.c = sm();
    this.d = sm();
    if ((this.a | this.b | this.c | this.d) === 0) this.a = 1;
  }

  /** A uniform 32-bit unsigned integer. */
  next(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result;
  }

  /** A uniform integer in [0, n). */
  int(n: number): number {
    if (!Number.isInteger(n) || n <= 0 || n > 2 ** 32) {
      throw simError(SimErrorCode.BAD_CONFIG, `int(n) needs an integer n in [1, 2^32], got ${n}`);
    }
    // Rejection sampling keeps the result unbiased.
    const limit = 2 ** 32 - (2 ** 32 % n);
    let x = this.next();
    while (x >= limit) x = this.next();
    return x % n;
  }

  /** A uniform integer in [lo, hi]. */
  between(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  /** A uniform float in [0, 1). */
  float(): number {
    return this.next() / 2 ** 32;
  }

  chance(p: number): boolean {
    return this.float() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw simError(SimErrorCode.BAD_CONFIG, 'pick() from an empty list');
    return items[this.int(items.length)]!;
  }

  /** An independent generator derived from this one (e.g. one per node). */
  fork(): SimRandom {
    return new SimRandom(this.next() * 2 ** 21 + (this.next() >>> 11));
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
