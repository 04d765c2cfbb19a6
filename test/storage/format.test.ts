/**
 * The record encoder against the byte layout of docs/storage.md: a reference encoder
 * written field by field from the table (three CRC-32C ranges, as the format states), the
 * SHA-256 of fixed batches (golden: these bytes are on disk in existing logs), and
 * `recordCrc` on what the encoder wrote.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32c } from '../../ts/core/index.js';
import { encodeBatch, FLAG_BATCH_END, frameBatch, RECORD_HEADER_BYTES, recordCrc } from '../../ts/storage/format.js';

const seed = process.env.PLEXUS_FUZZ_SEED;
const fuzz = seed === 'random' ? {} : { seed: seed === undefined ? 20_261_130 : Number(seed) };

/** docs/storage.md, "Record": every field written on its own, the CRC over its three ranges. */
function reference(payloads: readonly Uint8Array[], first: number, epoch: bigint, batchId: Uint8Array): Buffer {
  const parts: Buffer[] = [];
  payloads.forEach((p, i) => {
    const h = Buffer.alloc(RECORD_HEADER_BYTES);
    h.writeUInt32LE(p.length, 0);
    h.writeBigUInt64LE(BigInt(first + i), 8);
    h.writeBigUInt64LE(epoch, 16);
    Buffer.from(batchId).copy(h, 24);
    h.writeUInt32LE(i, 40);
    h.writeUInt16LE(i === payloads.length - 1 ? FLAG_BATCH_END : 0, 44);
    let c = crc32c(h.subarray(0, 4));
    c = crc32c(h.subarray(8, 48), c);
    c = crc32c(p, c);
    h.writeUInt32LE(c, 4);
    parts.push(h, Buffer.from(p));
  });
  return Buffer.concat(parts);
}

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

describe('record encoding', () => {
  const payloads = [
    new Uint8Array(0),
    Uint8Array.from([1, 2, 3]),
    new Uint8Array(100).map((_, i) => (i * 7) & 0xff),
    new Uint8Array(9).fill(0xff),
  ];
  const batchId = Uint8Array.from({ length: 16 }, (_, i) => 0xa0 + i);

  it('writes the same bytes as ever (golden SHA-256 of fixed batches)', () => {
    const cases: [number, bigint, string][] = [
      [1, 0n, 'ab7dfc5458db5ca4209721555f1ec6e2a5cde1327ae03340e25baea41d804f2c'],
      [0xffff_fffe, 0x0123_4567_89ab_cdefn, 'c3614bd4565609cf2ba4a63c26440dde6785913cd9a74496d5a6cb1438aacf99'],
      [2 ** 53 - 4, (1n << 64n) - 1n, '5b914a2da554dbe7b37e560f592527610ad88fdd9dbae4ad1c3a75f9668a8dd5'],
    ];
    for (const [first, epoch, digest] of cases) {
      const b = encodeBatch(payloads, first, epoch, batchId);
      expect(b.length).toBe(4 * RECORD_HEADER_BYTES + 112);
      expect(sha(b)).toBe(digest);
      expect(b.equals(reference(payloads, first, epoch, batchId))).toBe(true);
    }
  });

  it('matches the field-by-field layout for any batch, and recordCrc reads back each CRC', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 300 }), { minLength: 1, maxLength: 24 }),
        fc.oneof(
          fc.integer({ min: 1, max: 2 ** 40 }),
          fc.integer({ min: 0xffff_ff00, max: 0x1_0000_0100 }),
          fc.integer({ min: 2 ** 53 - 100, max: 2 ** 53 - 25 }),
        ),
        fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
        fc.uint8Array({ minLength: 16, maxLength: 16 }),
        (ps, first, epoch, id) => {
          const b = encodeBatch(ps, first, epoch, id);
          expect(b.equals(reference(ps, first, epoch, id))).toBe(true);
          let off = 0;
          for (const p of ps) {
            expect(recordCrc(b, off, p.length)).toBe(b.readUInt32LE(off + 4));
            off += RECORD_HEADER_BYTES + p.length;
          }
          expect(off).toBe(b.length);
        },
      ),
      { ...fuzz, numRuns: 300 },
    );
  });

  it('frames a batch laid out inside a larger buffer in place, touching nothing around it', () => {
    const lengths = payloads.map((p) => p.length);
    const inner = reference(payloads, 77, 5n, batchId);
    const buf = new Uint8Array(inner.length + 20).fill(0xee);
    let off = 10;
    for (const p of payloads) {
      buf.set(p, off + RECORD_HEADER_BYTES);
      off += RECORD_HEADER_BYTES + p.length;
    }
    expect(frameBatch(buf, 10, lengths, 77, 5n, batchId)).toBe(10 + inner.length);
    expect(Buffer.from(buf.subarray(10, 10 + inner.length)).equals(inner)).toBe(true);
    expect(buf.subarray(0, 10).every((x) => x === 0xee)).toBe(true);
    expect(buf.subarray(10 + inner.length).every((x) => x === 0xee)).toBe(true);
  });
});
