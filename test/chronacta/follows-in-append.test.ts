/**
 * `followsInAppend`: a member applying a replicated append indexes the events after its
 * first from their headers. It must accept exactly the records `decodeEntry` would decode
 * to the next event of the same append, and refuse any record that differs from that in a
 * field the index uses or whose lengths do not add up (the caller then decodes it in full).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkTable, tableOf } from '../../ts/chronacta/batch.js';
import { decodeEntry } from '../../ts/chronacta/record.js';
import { encodeTable } from '../../ts/codec/chronacta-batch.js';
import { followsInAppend, streamBytesOf } from '../../ts/codec/chronacta-record.js';

const seed = process.env.PLEXUS_FUZZ_SEED;
const fuzz = seed === 'random' ? {} : { seed: seed === undefined ? 20_261_201 : Number(seed) };
const utf8 = new TextEncoder();

const events = fc.array(
  fc.record({
    id: fc.uuid().map((u) => u.toLowerCase()),
    type: fc.string({ minLength: 1, maxLength: 12 }),
    data: fc.uint8Array({ maxLength: 200 }),
    metadata: fc.uint8Array({ maxLength: 40 }),
  }),
  { minLength: 2, maxLength: 12 },
);

/** Positions and versions below and above 2^32, up to the largest the log stores. */
const place = fc.oneof(
  fc.constant({ firstPosition: 1001, firstVersion: 17 }),
  fc.record({
    firstPosition: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER - 100 }),
    firstVersion: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER - 100 }),
  }),
);

function batch(
  evs: Parameters<typeof tableOf>[0],
  stream: string,
  keyed: boolean,
  at = { firstPosition: 1001, firstVersion: 17 },
): Uint8Array[] {
  const table = tableOf(evs);
  const body = checkTable(table);
  const head = {
    stream: utf8.encode(stream),
    ...at,
    recordedMs: 1_764_000_000_000,
    ...(keyed ? { key: utf8.encode('key-1'), fingerprint: new Uint8Array(32).fill(3) } : {}),
  };
  return encodeTable(table, head, body).payloads.map((p) => p.slice());
}

describe('followsInAppend', () => {
  it('accepts every later event of an append, with the fields decodeEntry reads', () => {
    fc.assert(
      fc.property(events, fc.string({ minLength: 1, maxLength: 30 }), fc.boolean(), place, (evs, stream, keyed, at) => {
        const ps = batch(evs, stream, keyed, at);
        const first = decodeEntry(ps[0] as Uint8Array);
        const name = streamBytesOf(ps[0] as Uint8Array);
        expect(new TextDecoder().decode(name)).toBe(first.stream);
        for (let i = 1; i < ps.length; i++) {
          expect(followsInAppend(ps[i] as Uint8Array, first, name, i)).toBe(true);
          const e = decodeEntry(ps[i] as Uint8Array);
          expect([e.position, e.version, e.indexInBatch, e.stream]).toEqual([
            first.position + i,
            first.version + i,
            i,
            first.stream,
          ]);
        }
        // A record out of place never follows; the first entry matches itself only without a key.
        if (ps.length > 2) expect(followsInAppend(ps[2] as Uint8Array, first, name, 1)).toBe(false);
        expect(followsInAppend(ps[0] as Uint8Array, first, name, 0)).toBe(!keyed);
      }),
      { ...fuzz, numRuns: 200 },
    );
  });

  it('refuses a record changed in any header or stream byte, or cut, or lengthened', () => {
    fc.assert(
      fc.property(events, fc.nat(), fc.integer({ min: 1, max: 255 }), place, (evs, at, flip, where) => {
        const ps = batch(evs, 'orders-7', false, where);
        const first = decodeEntry(ps[0] as Uint8Array);
        const name = streamBytesOf(ps[0] as Uint8Array);
        const rec = ps[1] as Uint8Array;
        // Bytes 0..63 are the header (36..51 the event id, which the index does not use), then the stream.
        const checked = [...Array(36).keys(), ...Array.from({ length: 12 + name.length }, (_, k) => 52 + k)];
        const i = checked[at % checked.length] as number;
        const bad = rec.slice();
        bad[i] = (bad[i] as number) ^ flip;
        expect(followsInAppend(bad, first, name, 1)).toBe(false);
        expect(followsInAppend(rec.subarray(0, rec.length - 1), first, name, 1)).toBe(false);
        const longer = new Uint8Array(rec.length + 1);
        longer.set(rec);
        expect(followsInAppend(longer, first, name, 1)).toBe(false);
        expect(followsInAppend(rec.subarray(0, 10), first, name, 1)).toBe(false);
      }),
      { ...fuzz, numRuns: 300 },
    );
  });
});
