import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeLaneRecord,
  encodeMark,
  encodePositioned,
  LANE_HEADER,
  LANE_MARK_BYTES,
  LANE_OLD_HEADER,
  lanePayloadOffset,
  laneWord,
  positionedWord,
  writePositionedHeader,
} from '../../ts/codec/multiplexed-log.js';

describe('multiplexed log lane records', () => {
  it('writes a positioned record at its documented offsets, little endian', () => {
    const b = encodePositioned(positionedWord(5), 0x0102030405060708n, 2 ** 40 + 3, Uint8Array.of(0xaa, 0xbb));
    expect(b.length).toBe(LANE_HEADER + 2);
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    expect(dv.getUint32(0, true)).toBe(0x80000005);
    expect(dv.getBigUint64(4, true)).toBe(0x0102030405060708n);
    expect(dv.getBigUint64(12, true)).toBe(BigInt(2 ** 40 + 3));
    expect([...b.subarray(LANE_HEADER)]).toEqual([0xaa, 0xbb]);
    expect(decodeLaneRecord(b)).toEqual({
      kind: 'positioned',
      shard: 5,
      epoch: 0x0102030405060708n,
      position: 2 ** 40 + 3,
    });
    expect(lanePayloadOffset(laneWord(b))).toBe(LANE_HEADER);
  });

  it('writes a mark at its documented offsets and reads it back', () => {
    const m = encodeMark(0x3fffffff, 9n, 4, 70, 2);
    expect(m.length).toBe(LANE_MARK_BYTES);
    const dv = new DataView(m.buffer, m.byteOffset, m.byteLength);
    expect(dv.getUint32(0, true)).toBe(0x7fffffff);
    expect([12, 20, 28].map((o) => dv.getBigUint64(o, true))).toEqual([4n, 70n, 2n]);
    expect(decodeLaneRecord(m)).toEqual({ kind: 'mark', shard: 0x3fffffff, epoch: 9n, start: 4, last: 70, oldLast: 2 });
  });

  it('reads the first (legacy) format: shard u32, epoch u64, then the record', () => {
    const b = new Uint8Array(LANE_OLD_HEADER + 3);
    const dv = new DataView(b.buffer);
    dv.setUint32(0, 7, true);
    dv.setBigUint64(4, 3n, true);
    expect(decodeLaneRecord(b)).toEqual({ kind: 'old', shard: 7, epoch: 3n });
    expect(lanePayloadOffset(laneWord(b))).toBe(LANE_OLD_HEADER);
  });

  it('refuses short records and both kind bits, never throws on any bytes', () => {
    expect(decodeLaneRecord(new Uint8Array(LANE_OLD_HEADER - 1))).toBe('short');
    expect(decodeLaneRecord(encodePositioned(positionedWord(1), 1n, 1, new Uint8Array(0)).subarray(0, 19))).toBe(
      'short',
    );
    expect(decodeLaneRecord(encodeMark(1, 1n, 1, 1, 1).subarray(0, 35))).toBe('short');
    const both = new Uint8Array(LANE_MARK_BYTES);
    new DataView(both.buffer).setUint32(0, 0xc0000001, true);
    expect(decodeLaneRecord(both)).toBe('kind');
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        const r = decodeLaneRecord(bytes);
        expect(typeof r === 'string' || ['old', 'positioned', 'mark'].includes(r.kind)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it('the batch writer lays down the same header bytes as the record encoder, and checks its bounds', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 0x3fffffff }),
        fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
        fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
        (shard, epoch, pos) => {
          const out = new Uint8Array(LANE_HEADER + 8);
          writePositionedHeader(out, 8, positionedWord(shard), epoch, pos);
          const one = encodePositioned(positionedWord(shard), epoch, pos, new Uint8Array(0));
          expect([...out.subarray(8)]).toEqual([...one]);
          expect(decodeLaneRecord(one)).toEqual({ kind: 'positioned', shard, epoch, position: pos });
        },
      ),
      { numRuns: 300 },
    );
    expect(() => writePositionedHeader(new Uint8Array(LANE_HEADER), 1, positionedWord(0), 0n, 1)).toThrow(RangeError);
  });
});
