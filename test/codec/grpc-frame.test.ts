/**
 * The gRPC message prefix and the protobuf primitives of plexus/codec: the prefix is the
 * gRPC protocol's (flag 0, big-endian u32 length), messages in any chunking come out of the
 * shared FrameAssembler whole, a compressed or too large message is refused from its prefix
 * alone, and the protobuf reader reads back what the varint writer writes and refuses cut input
 * with the format's own refusal.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FrameAssembler } from '../../ts/codec/frames.js';
import {
  GRPC_HEADER_BYTES,
  grpcFrame,
  grpcMessageFormat,
  grpcMessageLength,
  putGrpcPrefix,
} from '../../ts/codec/grpc-frame.js';
import { ProtoReader, putVarint, varintSize, WT_I32, WT_I64, WT_LEN, WT_VARINT } from '../../ts/codec/protobuf.js';

class Refused extends Error {
  constructor(
    readonly why: string,
    readonly n: number,
    readonly max = 0,
  ) {
    super(why);
  }
}
const refusals = {
  compressed: (flag: number) => new Refused('compressed', flag),
  tooLarge: (length: number, max: number) => new Refused('large', length, max),
};

describe('gRPC message prefix', () => {
  it('is a zero flag and the big-endian length, as gRPC defines it', () => {
    const f = grpcFrame(Uint8Array.of(7, 8, 9));
    expect([...f]).toEqual([0, 0, 0, 0, 3, 7, 8, 9]);
    const b = new Uint8Array(GRPC_HEADER_BYTES);
    for (const n of [0, 1, 255, 256, 65_535, 0x01_02_03_04, 0xffff_ffff]) {
      putGrpcPrefix(b, 0, n);
      expect(Buffer.from(b).readUInt32BE(1)).toBe(n);
      expect(b[0]).toBe(0);
      expect(grpcMessageLength(b)).toBe(n);
    }
  });

  it('assembles the same messages for any chunking', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 6 }),
        fc.array(fc.nat(), { maxLength: 10 }),
        (msgs, cuts) => {
          const all = Buffer.concat(msgs.map((m) => grpcFrame(m)));
          const at = [...new Set(cuts.map((c) => c % (all.length + 1)))].sort((a, b) => a - b);
          const a = new FrameAssembler(grpcMessageFormat(300, refusals));
          const got: Uint8Array[] = [];
          let from = 0;
          for (const c of [...at, all.length]) {
            for (const f of a.push(all.subarray(from, c))) got.push(f.subarray(GRPC_HEADER_BYTES));
            from = c;
          }
          expect(got.map((g) => [...g])).toEqual(msgs.map((m) => [...m]));
          expect(a.midFrame).toBe(false);
        },
      ),
      { numRuns: 300, seed: 5 },
    );
  });

  it('refuses a compressed or too large message from its prefix, before any message byte', () => {
    const compressed = grpcFrame(new Uint8Array(4));
    compressed[0] = 1;
    const a = new FrameAssembler(grpcMessageFormat(100, refusals));
    expect(() => a.push(compressed.subarray(0, GRPC_HEADER_BYTES))).toThrow(
      expect.objectContaining({ why: 'compressed', n: 1 }),
    );
    expect(a.refused).toBe(true);
    expect(a.buffered).toBe(0);
    const b = new FrameAssembler(grpcMessageFormat(100, refusals));
    expect(b.push(grpcFrame(new Uint8Array(100)))).toHaveLength(1);
    expect(() => b.push(grpcFrame(new Uint8Array(101)).subarray(0, GRPC_HEADER_BYTES))).toThrow(
      expect.objectContaining({ why: 'large', n: 101, max: 100 }),
    );
    expect(b.buffered).toBe(0);
  });
});

describe('protobuf primitives', () => {
  const fail = (m: string) => new Refused(m, 0);

  it('reads back every varint the writer writes, in the size it says', () => {
    fc.assert(
      fc.property(fc.array(fc.maxSafeNat(), { maxLength: 20 }), (vs) => {
        const out = new Uint8Array(vs.reduce((n, v) => n + varintSize(v), 0));
        let p = 0;
        for (const v of vs) {
          const q = putVarint(out, p, v);
          expect(q - p).toBe(varintSize(v));
          p = q;
        }
        expect(p).toBe(out.length);
        const r = new ProtoReader(out, 0, out.length, 'test', fail);
        for (const v of vs) expect(r.varint()).toBe(v);
        expect(r.more).toBe(false);
      }),
      { numRuns: 300, seed: 7 },
    );
  });

  it('skips fields of every taken wire type and refuses groups, cut varints and lengths past the end', () => {
    // field 1 varint 300, field 2 i64, field 3 LEN "hi", field 4 i32
    const msg = Uint8Array.of(0x08, 0xac, 0x02, 0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1a, 2, 0x68, 0x69, 0x25, 1, 2, 3, 4);
    const r = new ProtoReader(msg, 0, msg.length, 'msg', fail);
    const types: number[] = [];
    while (r.more) {
      const t = r.varint();
      types.push(t & 7);
      r.skip(t & 7);
    }
    expect(types).toEqual([WT_VARINT, WT_I64, WT_LEN, WT_I32]);
    for (let cut = 1; cut < msg.length; cut++) {
      if ([3, 12, 16].includes(cut)) continue; // field boundaries
      const c = new ProtoReader(msg, 0, cut, 'msg', fail);
      expect(() => {
        while (c.more) c.skip(c.varint() & 7);
      }, `cut at ${cut}`).toThrow(Refused);
    }
    expect(() => new ProtoReader(Uint8Array.of(0x0b), 0, 1, 'msg', fail).skip(3)).toThrow(/wire type 3/);
    expect(() => new ProtoReader(new Uint8Array(11).fill(0x80), 0, 11, 'msg', fail).varint()).toThrow(
      /longer than 10 bytes/,
    );
    const text = new ProtoReader(Uint8Array.of(0xff, 0xfe), 0, 2, 'msg', fail);
    expect(() => text.text(2, 'the name')).toThrow(/msg: the name is not UTF-8/);
    expect(new ProtoReader(Buffer.from('héllo'), 0, 6, 'm', fail).text(6, 'x')).toBe('héllo');
  });
});
