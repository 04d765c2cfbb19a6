import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import {
  _kernelHeader,
  AckStatus,
  CLUSTER_HEADER_SIZE,
  type ClusterFrame,
  ClusterFrameKind,
  ClusterFrameReader,
  checkClusterHeader,
  decodeClusterFrame,
  encodeAck,
  encodeClusterFrame,
  MAX_CLUSTER_FRAME,
} from '../../ts/codec/cluster-frame.js';
import { backend, isPlexusError, useBackend } from '../../ts/core/index.js';

const ID = Uint8Array.from({ length: 16 }, (_, i) => i + 1);
const base = {
  shard: 513,
  epoch: 0x0102_0304_0506_0708n,
  hops: 2,
  messageId: ID,
  sender: 'vt:actor/a',
  target: 'vt:actor/ü',
  payload: Uint8Array.of(9, 8, 7),
};

function refusal(fn: () => unknown): { code: string; reason: unknown } {
  try {
    fn();
  } catch (e) {
    if (isPlexusError(e)) return { code: e.code, reason: e.details.reason };
    throw e;
  }
  throw new Error('expected a refusal');
}

const initial = backend().name;
afterAll(() => useBackend(initial));

for (const name of ['wasm', 'js'] as const) {
  describe(`cluster frame (${name} header kernel)`, () => {
    it('pins the byte layout of a DATA frame', () => {
      useBackend(name);
      const b = encodeClusterFrame(base);
      const dv = new DataView(b.buffer, b.byteOffset, b.length);
      expect(b.length).toBe(CLUSTER_HEADER_SIZE + 10 + 11 + 3);
      expect(dv.getUint32(0, true)).toBe(b.length);
      expect([b[4], b[5], b[6], b[7]]).toEqual([1, 1, 2, 0]);
      expect(dv.getUint32(8, true)).toBe(513);
      expect([dv.getUint16(12, true), dv.getUint16(14, true)]).toEqual([10, 11]);
      expect(dv.getBigUint64(16, true)).toBe(base.epoch);
      expect([...b.subarray(24, 40)]).toEqual([...ID]);
      expect(Buffer.from(b.subarray(40, 50)).toString()).toBe('vt:actor/a');
      expect(decodeClusterFrame(b)).toEqual({ ...base, kind: 1, status: 0, payload: Uint8Array.of(9, 8, 7) });
    });

    it('the sender’s DataView header writer gives the bytes of the plexus/core header kernel', () => {
      useBackend(name);
      fc.assert(
        fc.property(
          fc.record({
            length: fc.integer({ min: 40, max: MAX_CLUSTER_FRAME }),
            kind: fc.integer({ min: 1, max: 2 }),
            hops: fc.integer({ min: 0, max: 255 }),
            status: fc.integer({ min: 0, max: 3 }),
            shard: fc.nat({ max: 0xffff_ffff }),
            senderLength: fc.nat({ max: 4096 }),
            targetLength: fc.nat({ max: 4096 }),
            epoch: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
            messageId: fc.uint8Array({ minLength: 16, maxLength: 16 }),
          }),
          (h) => {
            const mine = encodeAck({ shard: h.shard, epoch: h.epoch, messageId: h.messageId }, 1);
            const ref = _kernelHeader({
              ...h,
              length: 40,
              kind: 2,
              hops: 0,
              status: 1,
              senderLength: 0,
              targetLength: 0,
            });
            expect([...mine]).toEqual([...ref]);
            const full = encodeClusterFrame({ ...h, kind: 1, status: 0, hops: h.hops, sender: 'vt:a', target: 'vt:b' });
            const ref2 = _kernelHeader({
              ...h,
              length: full.length,
              kind: 1,
              status: 0,
              senderLength: 4,
              targetLength: 4,
            });
            expect([...full.subarray(0, 40)]).toEqual([...ref2]);
          },
        ),
        { numRuns: 200 },
      );
    });

    it('encodes an ACK as a bare header carrying the status', () => {
      useBackend(name);
      const a = decodeClusterFrame(encodeAck({ shard: 5, epoch: 9n, messageId: ID }, AckStatus.stale));
      expect(a).toMatchObject({ kind: ClusterFrameKind.ACK, status: 2, shard: 5, epoch: 9n, sender: '', target: '' });
    });

    it('refuses each bad header field with its reason, the length first', () => {
      useBackend(name);
      const good = encodeClusterFrame(base);
      const bad = (edit: (b: Uint8Array, dv: DataView) => void) => {
        const b = new Uint8Array(good);
        edit(b, new DataView(b.buffer));
        return refusal(() => checkClusterHeader(b));
      };
      expect(
        bad((b, dv) => {
          dv.setUint32(0, MAX_CLUSTER_FRAME + 1, true);
          b[4] = 9; // a bad version too: the length is judged first
        }),
      ).toEqual({ code: 'PLX_WIRE_FRAME_TOO_LARGE', reason: 'length' });
      expect(bad((_b, dv) => dv.setUint32(0, 39, true))).toEqual({
        code: 'PLX_WIRE_FRAME_TOO_LARGE',
        reason: 'length',
      });
      expect(bad((b) => (b[4] = 2))).toEqual({ code: 'PLX_WIRE_BAD_FRAME', reason: 'version' });
      expect(bad((b) => (b[5] = 3))).toEqual({ code: 'PLX_WIRE_BAD_FRAME', reason: 'kind' });
      expect(bad((b) => (b[6] = 5))).toEqual({ code: 'PLX_WIRE_BAD_FRAME', reason: 'hops' });
      expect(bad((b) => (b[7] = 1))).toEqual({ code: 'PLX_WIRE_BAD_FRAME', reason: 'status' });
      expect(bad((_b, dv) => dv.setUint16(12, 0, true))).toEqual({ code: 'PLX_WIRE_BAD_FRAME', reason: 'sender' });
      expect(bad((_b, dv) => dv.setUint16(14, 4097, true))).toEqual({ code: 'PLX_WIRE_BAD_FRAME', reason: 'target' });
      expect(bad((_b, dv) => dv.setUint16(14, 200, true))).toEqual({ code: 'PLX_WIRE_BAD_FRAME', reason: 'iris' });
      expect(bad((b) => (b[5] = 2))).toEqual({ code: 'PLX_WIRE_BAD_FRAME', reason: 'ack' });
      expect(refusal(() => checkClusterHeader(good.subarray(0, 39)))).toEqual({
        code: 'PLX_WIRE_BAD_FRAME',
        reason: 'short',
      });
      expect(checkClusterHeader(good, 2)).toBe(good.length);
      expect(refusal(() => checkClusterHeader(good, 1)).reason).toBe('hops');
    });

    it('refuses to encode a frame above 1 MiB and accepts one of exactly 1 MiB', () => {
      useBackend(name);
      const over = { ...base, payload: new Uint8Array(MAX_CLUSTER_FRAME - CLUSTER_HEADER_SIZE - 21 + 1) };
      expect(refusal(() => encodeClusterFrame(over))).toEqual({ code: 'PLX_WIRE_FRAME_TOO_LARGE', reason: 'length' });
      const exact = encodeClusterFrame({
        ...base,
        payload: new Uint8Array(MAX_CLUSTER_FRAME - CLUSTER_HEADER_SIZE - 21),
      });
      expect(exact.length).toBe(MAX_CLUSTER_FRAME);
      expect(refusal(() => encodeClusterFrame({ ...base, sender: '' })).reason).toBe('sender');
      expect(refusal(() => encodeClusterFrame({ ...base, messageId: new Uint8Array(3) })).reason).toBe('message-id');
    });

    it('reads frames split at every offset, and refuses an oversized one at its header', () => {
      useBackend(name);
      const frames = [
        encodeClusterFrame(base),
        encodeAck(base, 1),
        encodeClusterFrame({ ...base, payload: new Uint8Array(0) }),
      ];
      const all = Buffer.concat(frames);
      for (let cut = 0; cut <= all.length; cut++) {
        const r = new ClusterFrameReader();
        const out: ClusterFrame[] = [];
        for (const part of [all.subarray(0, cut), all.subarray(cut)]) {
          r.push(part);
          for (let f = r.next(); f; f = r.next()) out.push(f);
        }
        expect(out.map((f) => f.kind)).toEqual([1, 2, 1]);
        expect(r.bufferedBytes).toBe(0);
      }
      const oneByOne = new ClusterFrameReader();
      let n = 0;
      for (const byte of all) {
        oneByOne.push(Uint8Array.of(byte));
        for (let f = oneByOne.next(); f; f = oneByOne.next()) n++;
      }
      expect(n).toBe(3);
      const r = new ClusterFrameReader();
      const h = new Uint8Array(encodeClusterFrame(base).subarray(0, CLUSTER_HEADER_SIZE));
      new DataView(h.buffer).setUint32(0, 0xffff_ffff, true);
      r.push(h);
      expect(refusal(() => r.next()).code).toBe('PLX_WIRE_FRAME_TOO_LARGE');
    });

    it('fuzz: any bytes give frames or a PlexusError, never a crash; encode/decode round-trips', () => {
      useBackend(name);
      fc.assert(
        fc.property(fc.uint8Array({ maxLength: 400 }), fc.integer({ min: 1, max: 64 }), (bytes, step) => {
          const r = new ClusterFrameReader();
          try {
            for (let i = 0; i < bytes.length; i += step) {
              r.push(bytes.subarray(i, i + step));
              for (let f = r.next(); f; f = r.next());
            }
          } catch (e) {
            expect(isPlexusError(e)).toBe(true);
          }
        }),
        { numRuns: 300 },
      );
      // Mutations of a valid frame: refused or decoded, never thrown otherwise.
      const good = encodeClusterFrame(base);
      fc.assert(
        fc.property(fc.integer({ min: 0, max: good.length - 1 }), fc.integer({ min: 0, max: 255 }), (at, v) => {
          const b = new Uint8Array(good);
          b[at] = v;
          try {
            decodeClusterFrame(b);
          } catch (e) {
            expect(isPlexusError(e)).toBe(true);
          }
        }),
        { numRuns: 300 },
      );
      fc.assert(
        fc.property(
          fc.record({
            shard: fc.nat({ max: 0xffff_ffff }),
            epoch: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
            hops: fc.integer({ min: 0, max: 4 }),
            messageId: fc.uint8Array({ minLength: 16, maxLength: 16 }),
            sender: fc.string({ minLength: 1, maxLength: 50 }),
            target: fc.string({ minLength: 1, maxLength: 50 }),
            payload: fc.uint8Array({ maxLength: 300 }),
          }),
          (init) => {
            const d = decodeClusterFrame(encodeClusterFrame(init));
            expect(d).toEqual({ ...init, kind: 1, status: 0 });
          },
        ),
        { numRuns: 200 },
      );
    });
  });
}
