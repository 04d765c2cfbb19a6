import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FrameAssembler } from '../../ts/codec/frames.js';
import {
  decodeGossip,
  encodeGossip,
  GOSSIP_FRAME,
  GOSSIP_HEADER_SIZE,
  type GossipMessage,
  type GossipState,
  gossipBodyLength,
  MAX_GOSSIP_BODY,
  MAX_GOSSIP_UPDATES,
} from '../../ts/codec/gossip.js';
import { isPlexusError } from '../../ts/core/index.js';

function refusal(fn: () => unknown): { code: string; reason: unknown } {
  try {
    fn();
  } catch (e) {
    if (isPlexusError(e)) return { code: e.code, reason: e.details.reason };
    throw e;
  }
  throw new Error('expected a refusal');
}

const name = fc.string({ minLength: 1, maxLength: 40, unit: 'grapheme' }).filter((s) => {
  const n = new TextEncoder().encode(s).length;
  return n >= 1 && n <= 255;
});
const u32 = fc.integer({ min: 0, max: 0xffff_ffff });
const state = fc.constantFrom<GossipState>('alive', 'suspect', 'dead', 'left');
const update = fc.record({ state, member: name, incarnation: u32, from: name });
const updates = fc.array(update, { maxLength: 8 });
const message: fc.Arbitrary<GossipMessage> = fc.oneof(
  fc.record({ kind: fc.constant('ping' as const), from: name, seq: u32, target: name, updates }),
  fc.record({ kind: fc.constant('ping-req' as const), from: name, seq: u32, target: name, updates }),
  fc.record({ kind: fc.constant('ack' as const), from: name, seq: u32, updates }),
  fc.record({ kind: fc.constant('nack' as const), from: name, seq: u32, updates }),
  fc.record({ kind: fc.constant('gossip' as const), from: name, updates }),
  fc.record({
    kind: fc.constant('push-pull' as const),
    from: name,
    join: fc.boolean(),
    reply: fc.boolean(),
    states: fc.array(fc.record({ name, incarnation: u32, state }), { maxLength: 8 }),
    updates,
  }),
);

describe('gossip messages (ts/codec/gossip.ts)', () => {
  it('pins the byte layout of a ping with one update', () => {
    const b = encodeGossip({
      kind: 'ping',
      from: 'a',
      seq: 0x01020304,
      target: 'bc',
      updates: [{ state: 'suspect', member: 'bc', incarnation: 7, from: 'a' }],
    });
    expect([...b]).toEqual([
      1,
      1,
      21,
      0,
      0,
      0, // version, kind ping, body length 21
      1,
      0x61, // from "a"
      4,
      3,
      2,
      1, // seq
      2,
      0x62,
      0x63, // target "bc"
      1,
      0, // one update
      2,
      7,
      0,
      0,
      0,
      2,
      0x62,
      0x63,
      1,
      0x61, // suspect, incarnation 7, "bc", from "a"
    ]);
    expect(gossipBodyLength(b.subarray(0, GOSSIP_HEADER_SIZE))).toBe(b.length - GOSSIP_HEADER_SIZE);
  });

  it('decodes what it encodes', () => {
    fc.assert(
      fc.property(message, (m) => {
        expect(decodeGossip(encodeGossip(m))).toEqual(m);
      }),
      { numRuns: 300 },
    );
  });

  it('refuses every cut-short or extended message with a coded refusal', () => {
    fc.assert(
      fc.property(message, fc.nat(), (m, cutAt) => {
        const b = encodeGossip(m);
        const cut = cutAt % b.length;
        expect(refusal(() => decodeGossip(b.subarray(0, cut))).code).toBe('PLX_GOSSIP_BAD_MESSAGE');
        const longer = new Uint8Array(b.length + 1);
        longer.set(b);
        expect(refusal(() => decodeGossip(longer))).toEqual({ code: 'PLX_GOSSIP_BAD_MESSAGE', reason: 'length' });
      }),
      { numRuns: 200 },
    );
  });

  it('refuses random bytes and flipped bytes with PLX_GOSSIP_BAD_MESSAGE, never anything else', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (b) => {
        try {
          decodeGossip(b);
        } catch (e) {
          expect(isPlexusError(e, 'PLX_GOSSIP_BAD_MESSAGE')).toBe(true);
        }
      }),
      { numRuns: 500 },
    );
    fc.assert(
      fc.property(message, fc.nat(), fc.integer({ min: 1, max: 255 }), (m, at, x) => {
        const b = encodeGossip(m).slice();
        const i = at % b.length;
        b[i] = (b[i] as number) ^ x;
        try {
          decodeGossip(b);
        } catch (e) {
          expect(isPlexusError(e, 'PLX_GOSSIP_BAD_MESSAGE'), String(e)).toBe(true);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('comes out of a stream whole, however the bytes are split', () => {
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 5 }), (ms) => {
        const parts = ms.map(encodeGossip);
        const stream = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
        let at = 0;
        for (const p of parts) {
          stream.set(p, at);
          at += p.length;
        }
        for (let cut = 0; cut <= stream.length; cut += Math.max(1, stream.length >> 4)) {
          const a = new FrameAssembler(GOSSIP_FRAME);
          const out = [...a.push(stream.subarray(0, cut)), ...a.push(stream.subarray(cut))];
          expect(out.map(decodeGossip)).toEqual(ms);
        }
        const one = new FrameAssembler(GOSSIP_FRAME);
        const bytewise: Uint8Array[] = [];
        for (let i = 0; i < stream.length; i++) bytewise.push(...one.push(stream.subarray(i, i + 1)));
        expect(bytewise.map(decodeGossip)).toEqual(ms);
      }),
      { numRuns: 60 },
    );
    // A header announcing a body above the maximum is refused before any body byte arrives.
    const huge = Uint8Array.of(1, 5, 0, 0, 0, 0);
    new DataView(huge.buffer).setUint32(2, MAX_GOSSIP_BODY + 1, true);
    expect(refusal(() => new FrameAssembler(GOSSIP_FRAME).push(huge))).toEqual({
      code: 'PLX_GOSSIP_BAD_MESSAGE',
      reason: 'length',
    });
  });

  it('names what is wrong', () => {
    const ok = encodeGossip({ kind: 'ack', from: 'a', seq: 1, updates: [] });
    const with_ = (i: number, v: number) => {
      const b = ok.slice();
      b[i] = v;
      return b;
    };
    expect(refusal(() => decodeGossip(with_(0, 2))).reason).toBe('version');
    expect(refusal(() => decodeGossip(with_(1, 0))).reason).toBe('kind');
    expect(refusal(() => decodeGossip(with_(1, 7))).reason).toBe('kind');
    expect(refusal(() => decodeGossip(with_(6, 0))).reason).toBe('name');
    expect(refusal(() => decodeGossip(with_(7, 0xff))).reason).toBe('name');
    expect(refusal(() => decodeGossip(ok.subarray(0, 3))).reason).toBe('short');
    // A body length above the maximum is refused from the header alone.
    const huge = Uint8Array.of(1, 3, 0, 0, 0, 0);
    new DataView(huge.buffer).setUint32(2, MAX_GOSSIP_BODY + 1, true);
    expect(refusal(() => gossipBodyLength(huge)).reason).toBe('length');
    // An update count above the maximum, and a bad state byte.
    const many = ok.slice();
    new DataView(many.buffer).setUint16(12, MAX_GOSSIP_UPDATES + 1, true);
    expect(refusal(() => decodeGossip(many)).reason).toBe('count');
    const oneUpdate = encodeGossip({
      kind: 'gossip',
      from: 'a',
      updates: [{ state: 'dead', member: 'b', incarnation: 1, from: 'a' }],
    }).slice();
    oneUpdate[10] = 9;
    expect(refusal(() => decodeGossip(oneUpdate)).reason).toBe('state');
    // A push-pull whose count the body cannot hold is refused before anything is allocated.
    const pp = encodeGossip({
      kind: 'push-pull',
      from: 'a',
      join: true,
      reply: false,
      states: [],
      updates: [],
    }).slice();
    new DataView(pp.buffer).setUint32(9, 1_000_000, true);
    expect(refusal(() => decodeGossip(pp)).reason).toBe('count');
  });

  it('refuses to encode names the decoder would refuse', () => {
    expect(refusal(() => encodeGossip({ kind: 'gossip', from: '', updates: [] })).code).toBe('PLX_GOSSIP_BAD_CONFIG');
    expect(refusal(() => encodeGossip({ kind: 'gossip', from: 'x'.repeat(256), updates: [] })).code).toBe(
      'PLX_GOSSIP_BAD_CONFIG',
    );
  });
});
