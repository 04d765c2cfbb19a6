import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  checkHeader,
  decodeHeaders,
  defineHeader,
  encodeHeader,
  type HeaderSchema,
  isPlexusError,
  kernels,
  VERDICT_INCOMPLETE,
} from '../../ts/core/index.js';

// Verdicts of the test schema, in the order their checks run.
const V = { tooLong: 1, type: 2, flags: 3, job: 4, src: 5, dst: 6, newer: 7, older: 8, tag: 9 } as const;
const MAX = 16 * 1024 * 1024;

/** A 40-byte header shaped like a transport frame header. */
function schema(): HeaderSchema {
  return defineHeader({
    size: 40,
    fields: [
      { name: 'length', offset: 0, width: 4 },
      { name: 'type', offset: 4, width: 1 },
      { name: 'flags', offset: 5, width: 1 },
      { name: 'service', offset: 6, width: 2 },
      { name: 'job', offset: 8, width: 16, kind: 'bytes' },
      { name: 'src', offset: 24, width: 4 },
      { name: 'dst', offset: 28, width: 4 },
      { name: 'incarnation', offset: 32, width: 4 },
      { name: 'tag', offset: 36, width: 4 },
    ],
    length: { field: 'length', max: MAX, verdictTooLong: V.tooLong },
    checks: [
      { field: 'type', op: 'range', min: 1, max: 11, verdict: V.type },
      { field: 'flags', op: 'mask-zero', mask: 0xff, verdict: V.flags },
      { field: 'job', op: 'bytes-eq', value: new Uint8Array(16).fill(7), verdict: V.job },
      { field: 'src', op: 'range', min: 0, max: 3, verdict: V.src },
      { field: 'dst', op: 'eq', value: 1, verdict: V.dst },
      { field: 'incarnation', op: 'order', value: 5, verdict: V.newer, below: V.older },
      { field: 'tag', op: 'eq', value: 0, verdict: V.tag, when: { field: 'type', notEquals: 1 } },
    ],
  });
}

const good = { length: 3, type: 1, job: new Uint8Array(16).fill(7), src: 2, dst: 1, incarnation: 5, tag: 99 };

function frame(s: HeaderSchema, values: Record<string, number | Uint8Array>, payload = 0): Uint8Array {
  const out = new Uint8Array(s.size + payload);
  encodeHeader(s, { ...values, length: payload }, out);
  return out;
}

describe.each(kernels())('frame header codec ($name)', (k) => {
  it('encodes little endian and checks in the declared order, length first', () => {
    const s = schema();
    const h = new Uint8Array(40);
    k.headerEncode(s, s.normalize(good), h);
    expect(Array.from(h.subarray(0, 8))).toEqual([3, 0, 0, 0, 1, 0, 0, 0]);
    expect(s.read(h)).toMatchObject({ length: 3, type: 1, src: 2, dst: 1, incarnation: 5, tag: 99 });
    expect(k.headerCheck(s, h)).toBe(0);
    const at = (patch: Record<string, number | bigint | Uint8Array>) => {
      const b = new Uint8Array(40);
      const { length, ...rest } = patch;
      k.headerEncode(s, s.normalize({ ...good, ...rest }), b);
      // the encoder refuses an over-long length, so write it by hand
      if (length !== undefined) new DataView(b.buffer).setUint32(0, Number(length), true);
      return k.headerCheck(s, b);
    };
    expect(at({ type: 0 })).toBe(V.type);
    expect(at({ type: 12 })).toBe(V.type);
    expect(at({ flags: 1 })).toBe(V.flags);
    expect(at({ job: new Uint8Array(16) })).toBe(V.job);
    expect(at({ src: 4 })).toBe(V.src);
    expect(at({ dst: 0 })).toBe(V.dst);
    expect(at({ incarnation: 6 })).toBe(V.newer);
    expect(at({ incarnation: 4 })).toBe(V.older);
    expect(at({ type: 2, tag: 1 })).toBe(V.tag);
    expect(at({ type: 2, tag: 0 })).toBe(0);
    // several faults: the first check in order wins, and the length beats them all
    expect(at({ type: 0, src: 9, dst: 9 })).toBe(V.type);
    expect(at({ src: 9, dst: 9 })).toBe(V.src);
    expect(at({ length: MAX + 1, type: 0 })).toBe(V.tooLong);
    expect(at({ length: MAX })).toBe(0);
    expect(k.headerCheck(s, h.subarray(0, 39))).toBe(VERDICT_INCOMPLETE);
  });

  it('takes new check arguments through set()', () => {
    const s = schema();
    const h = new Uint8Array(40);
    k.headerEncode(s, s.normalize(good), h);
    expect(k.headerCheck(s, h)).toBe(0);
    s.set('incarnation', 6);
    expect(k.headerCheck(s, h)).toBe(V.older);
    s.set('src', [0, 1]);
    expect(k.headerCheck(s, h)).toBe(V.src);
    s.set('job', new Uint8Array(16));
    expect(k.headerCheck(s, h)).toBe(V.job);
  });

  it('applies checks under equals, notEquals, inside and outside conditions', () => {
    const s = defineHeader({
      size: 8,
      fields: [
        { name: 'length', offset: 0, width: 2 },
        { name: 'type', offset: 2, width: 1 },
        { name: 'epoch', offset: 4, width: 4 },
      ],
      length: { field: 'length', max: 100, verdictTooLong: 1 },
      checks: [
        { name: 'eq', field: 'epoch', op: 'range', min: 0, max: 100, verdict: 2, when: { field: 'type', equals: 1 } },
        {
          name: 'ne',
          field: 'epoch',
          op: 'range',
          min: 0,
          max: 200,
          verdict: 3,
          when: { field: 'type', notEquals: 1 },
        },
        {
          name: 'in',
          field: 'epoch',
          op: 'range',
          min: 1,
          max: 150,
          verdict: 4,
          when: { field: 'type', inside: [6, 10] },
        },
        { name: 'out', field: 'epoch', op: 'eq', value: 0, verdict: 5, when: { field: 'type', outside: [6, 10] } },
      ],
    });
    const v = (type: number, epoch: number) => {
      const b = new Uint8Array(8);
      k.headerEncode(s, s.normalize({ type, epoch }), b);
      return k.headerCheck(s, b);
    };
    expect(v(1, 0)).toBe(0);
    expect(v(1, 101)).toBe(2);
    expect(v(2, 150)).toBe(5);
    expect(v(2, 201)).toBe(3);
    expect(v(6, 0)).toBe(4);
    expect(v(10, 150)).toBe(0);
    expect(v(10, 151)).toBe(4);
    expect(v(5, 0)).toBe(0);
    expect(v(11, 1)).toBe(5);
    expect(() =>
      defineHeader({
        size: 8,
        fields: [
          { name: 'length', offset: 0, width: 2 },
          { name: 'type', offset: 2, width: 1 },
        ],
        length: { field: 'length', max: 1, verdictTooLong: 1 },
        checks: [
          { field: 'type', op: 'eq', value: 1, verdict: 2, when: { field: 'type', equals: 1, outside: [1, 2] } },
        ],
      }),
    ).toThrow(/exactly one of/);
  });

  it('walks many frames and stops at an incomplete one or a refused length', () => {
    const s = schema();
    const parts = [frame(s, good, 5), frame(s, { ...good, type: 0 }, 0), frame(s, good, 100)];
    const all = Buffer.concat([...parts, frame(s, good, 10).subarray(0, 45)]);
    const r = k.headerDecodeBatch(s, all, 1000);
    expect(r.count).toBe(3);
    expect(Array.from(r.offsets)).toEqual([0, 45, 85]);
    expect(Array.from(r.lengths)).toEqual([5, 0, 100]);
    expect(Array.from(r.verdicts)).toEqual([0, V.type, 0]);
    expect(r.consumed).toBe(225);
    expect(k.headerDecodeBatch(s, all, 2).count).toBe(2);
    const tooLong = new Uint8Array(40);
    k.headerEncode(s, s.normalize({ ...good, length: 0 }), tooLong);
    new DataView(tooLong.buffer).setUint32(0, 0xffffffff, true);
    const r2 = k.headerDecodeBatch(s, Buffer.concat([parts[0] as Uint8Array, tooLong, parts[0] as Uint8Array]), 10);
    expect(Array.from(r2.verdicts)).toEqual([0, V.tooLong]);
    expect(r2.consumed).toBe(45);
  });
});

describe('frame header codec, both backends together', () => {
  const [wasm, js] = kernels() as [ReturnType<typeof kernels>[0], ReturnType<typeof kernels>[0]];

  it('agree on random bytes, never throw, and never size output by a declared length (fuzz)', () => {
    const s = schema();
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 600 }), fc.integer({ min: 0, max: 50 }), (data, max) => {
        const a = wasm.headerDecodeBatch(s, data, max);
        const b = js.headerDecodeBatch(s, data, max);
        expect(a).toEqual(b);
        expect(a.count).toBeLessThanOrEqual(Math.floor(data.length / 40));
        expect(a.consumed).toBeLessThanOrEqual(data.length);
        expect(wasm.headerCheck(s, data)).toBe(js.headerCheck(s, data));
      }),
      { numRuns: 2000, seed: 42 },
    );
  });

  it('agree on mutated valid frames (fuzz)', () => {
    const s = schema();
    const base = Buffer.concat([frame(s, good, 3), frame(s, { ...good, type: 2, tag: 0 }, 0), frame(s, good, 17)]);
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat(base.length - 1), fc.integer({ min: 0, max: 255 })), { maxLength: 6 }),
        (muts) => {
          const d = Uint8Array.from(base);
          for (const [i, v] of muts) d[i] = v;
          expect(wasm.headerDecodeBatch(s, d, 100)).toEqual(js.headerDecodeBatch(s, d, 100));
        },
      ),
      { numRuns: 3000, seed: 7 },
    );
  });

  it('give a prefix of the same answer when the input is cut at every offset', () => {
    const s = schema();
    const all = Buffer.concat([frame(s, good, 3), frame(s, good, 0), frame(s, good, 17), frame(s, good, 1)]);
    const full = wasm.headerDecodeBatch(s, all, 100);
    for (let cut = 0; cut <= all.length; cut++) {
      for (const k of [wasm, js]) {
        const r = k.headerDecodeBatch(s, all.subarray(0, cut), 100);
        expect(r.consumed).toBeLessThanOrEqual(cut);
        expect(Array.from(r.offsets)).toEqual(Array.from(full.offsets.subarray(0, r.count)));
        const ends = Array.from(full.offsets, (o, i) => o + 40 + (full.lengths[i] as number));
        expect(r.count).toBe(ends.filter((e) => e <= cut).length);
      }
    }
  });
});

describe('frame header public API', () => {
  it('refuses bad schemas and bad values with clear codes', () => {
    const bad = (f: () => unknown, code: string) => {
      let err: unknown;
      try {
        f();
      } catch (e) {
        err = e;
      }
      expect(isPlexusError(err, code), String(err)).toBe(true);
    };
    bad(
      () =>
        defineHeader({
          size: 4,
          fields: [{ name: 'l', offset: 2, width: 4 }],
          length: { field: 'l', max: 1, verdictTooLong: 1 },
          checks: [],
        }),
      'PLX_CORE_HEADER_SCHEMA',
    );
    bad(
      () =>
        defineHeader({
          size: 4,
          fields: [{ name: 'l', offset: 0, width: 3 }],
          length: { field: 'l', max: 1, verdictTooLong: 1 },
          checks: [],
        }),
      'PLX_CORE_HEADER_SCHEMA',
    );
    bad(
      () =>
        defineHeader({
          size: 4,
          fields: [{ name: 'l', offset: 0, width: 2 }],
          length: { field: 'l', max: 70000, verdictTooLong: 1 },
          checks: [],
        }),
      'PLX_CORE_HEADER_SCHEMA',
    );
    const s = schema();
    bad(() => s.set('nope', 1), 'PLX_CORE_HEADER_SCHEMA');
    bad(() => s.set('src', 1), 'PLX_CORE_HEADER_SCHEMA');
    bad(() => encodeHeader(s, { length: MAX + 1 }), 'PLX_CORE_HEADER_VALUE');
    bad(() => encodeHeader(s, { type: 256 }), 'PLX_CORE_HEADER_VALUE');
    bad(() => encodeHeader(s, { job: new Uint8Array(3) }), 'PLX_CORE_HEADER_VALUE');
    bad(() => encodeHeader(s, {}, new Uint8Array(10)), 'PLX_CORE_BAD_INPUT');
    bad(() => decodeHeaders(s, new Uint8Array(0), -1), 'PLX_CORE_BAD_INPUT');
    expect(checkHeader(s, frame(s, good, 0))).toBe(0);
  });
});
