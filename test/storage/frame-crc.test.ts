/**
 * frameBatch fills in each record's CRC-32C: with the wasm backend by calling the kernel on
 * the batch copied once into its memory, with the js backend (and for batches above the
 * copy block's 1 MiB) record by record. Every path must give the CRC docs/storage.md
 * defines, checked here against a bitwise CRC-32C written from the definition.
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { backend, useBackend } from '../../ts/core/index.js';
import { frameBatch, RECORD_HEADER_BYTES } from '../../ts/storage/format.js';

const seed = process.env.PLEXUS_FUZZ_SEED;
const fuzz = seed === 'random' ? {} : { seed: seed === undefined ? 20_261_130 : Number(seed) };
const initial = backend().name;

afterEach(() => useBackend(initial));

/** CRC-32C (reflected polynomial 0x82F63B78) over the parts, one bit at a time. */
function referenceCrc(parts: Uint8Array[]): number {
  let c = 0xffffffff;
  for (const p of parts) {
    for (const b of p) {
      c ^= b;
      for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    }
  }
  return ~c >>> 0;
}

/** Lays the payloads out with their gaps (filled with junk) at `start` of a larger buffer, frames them. */
function framed(payloads: Uint8Array[], start: number, epoch: bigint): Uint8Array {
  const total = payloads.reduce((n, p) => n + RECORD_HEADER_BYTES + p.length, 0);
  const buf = new Uint8Array(start + total + 7).fill(0xa5);
  let off = start;
  for (const p of payloads) {
    buf.set(p, off + RECORD_HEADER_BYTES);
    off += RECORD_HEADER_BYTES + p.length;
  }
  const end = frameBatch(
    buf,
    start,
    payloads.map((p) => p.length),
    1_000,
    epoch,
    new Uint8Array(16).fill(3),
  );
  expect(end).toBe(start + total);
  return buf;
}

/** Checks every record's stored CRC and length against the reference. */
function checkCrcs(buf: Uint8Array, start: number, payloads: Uint8Array[]): void {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let off = start;
  for (const p of payloads) {
    expect(dv.getUint32(off, true)).toBe(p.length);
    const want = referenceCrc([
      buf.subarray(off, off + 4),
      buf.subarray(off + 8, off + RECORD_HEADER_BYTES),
      buf.subarray(off + RECORD_HEADER_BYTES, off + RECORD_HEADER_BYTES + p.length),
    ]);
    expect(dv.getUint32(off + 4, true)).toBe(want);
    off += RECORD_HEADER_BYTES + p.length;
  }
}

describe('frameBatch CRCs', () => {
  for (const name of ['wasm', 'js'] as const) {
    it(`match the definition on the ${name} backend, for batches of any shape at any offset`, () => {
      useBackend(name);
      fc.assert(
        fc.property(
          fc.array(fc.uint8Array({ maxLength: 300 }), { minLength: 1, maxLength: 40 }),
          fc.nat(64),
          fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
          (payloads, start, epoch) => {
            checkCrcs(framed(payloads, start, epoch), start, payloads);
          },
        ),
        { ...fuzz, numRuns: 150 },
      );
    });
  }

  it('match the definition for a batch above the 1 MiB copy block (record by record)', () => {
    useBackend('wasm');
    const payloads = Array.from({ length: 5 }, (_, i) => new Uint8Array(300_000).fill(i + 1));
    checkCrcs(framed(payloads, 5, 0n), 5, payloads);
  });
});
