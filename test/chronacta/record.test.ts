/**
 * The entry in a log record (docs/chronacta.md#the-record-in-the-log): the byte layout,
 * round trips, and the decoder's refusals (lengths checked against the payload first).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bytesToUuid, decodeEntry, uuidToBytes } from '../../ts/chronacta/record.js';
import { type Entry, encodeEntry, RECORD_HEADER_BYTES, RecordKind } from '../../ts/codec/chronacta-record.js';

const base: Entry = {
  kind: RecordKind.EVENT,
  batchSize: 2,
  indexInBatch: 0,
  position: 7,
  version: 3,
  recordedMs: 1_700_000_000_123,
  id: uuidToBytes('00112233-4455-6677-8899-aabbccddeeff'),
  stream: 'orders-1',
  type: 'placed',
  metadata: new Uint8Array([9]),
  data: new TextEncoder().encode('{"n":1}'),
};

describe('the record', () => {
  it('has the documented layout', () => {
    const b = encodeEntry({ ...base, idempotency: { key: 'k1', fingerprint: new Uint8Array(32).fill(0xab) } });
    const v = new DataView(b.buffer);
    expect(b[0]).toBe(1);
    expect(b[1]).toBe(RecordKind.EVENT);
    expect(v.getUint16(2, true)).toBe(1);
    expect(v.getUint32(4, true)).toBe(2);
    expect(v.getUint32(8, true)).toBe(0);
    expect(v.getBigUint64(12, true)).toBe(7n);
    expect(v.getBigUint64(20, true)).toBe(3n);
    expect(v.getBigUint64(28, true)).toBe(1_700_000_000_123n);
    expect(Buffer.from(b.subarray(36, 52)).toString('hex')).toBe('00112233445566778899aabbccddeeff');
    expect([v.getUint16(52, true), v.getUint16(54, true), v.getUint32(56, true), v.getUint32(60, true)]).toEqual([
      8, 6, 1, 7,
    ]);
    expect(Buffer.from(b.subarray(64, 64 + 8 + 6)).toString()).toBe('orders-1placed');
    const tail = RECORD_HEADER_BYTES + 8 + 6 + 1 + 7;
    expect(v.getUint16(tail, true)).toBe(2);
    expect(Buffer.from(b.subarray(tail + 2, tail + 4)).toString()).toBe('k1');
    expect(b.length).toBe(tail + 2 + 2 + 32);
  });

  it('round-trips any entry', () => {
    fc.assert(
      fc.property(
        fc.record({
          kind: fc.constantFrom(RecordKind.EVENT, RecordKind.METADATA, RecordKind.REDACTED),
          batchSize: fc.integer({ min: 1, max: 10_000 }),
          indexInBatch: fc.integer({ min: 0, max: 9999 }),
          position: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
          version: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
          recordedMs: fc.integer({ min: 0, max: 2 ** 50 }),
          id: fc.uint8Array({ minLength: 16, maxLength: 16 }),
          stream: fc.string({ minLength: 1, maxLength: 40, unit: 'grapheme' }),
          type: fc.string({ maxLength: 20, unit: 'grapheme' }),
          metadata: fc.uint8Array({ maxLength: 50 }),
          data: fc.uint8Array({ maxLength: 200 }),
          key: fc.option(fc.string({ minLength: 1, maxLength: 30, unit: 'grapheme' }), { nil: undefined }),
        }),
        (r) => {
          const { key, ...rest } = r;
          const e: Entry =
            key === undefined ? rest : { ...rest, idempotency: { key, fingerprint: new Uint8Array(32).fill(7) } };
          const d = decodeEntry(encodeEntry(e));
          expect({ ...d, id: [...d.id], metadata: [...d.metadata], data: [...d.data] }).toEqual({
            ...e,
            id: [...e.id],
            metadata: [...e.metadata],
            data: [...e.data],
            ...(e.idempotency
              ? { idempotency: { key: e.idempotency.key, fingerprint: d.idempotency?.fingerprint } }
              : {}),
          });
          if (e.idempotency) expect([...d.idempotency!.fingerprint]).toEqual([...e.idempotency.fingerprint]);
        },
      ),
      { seed: 77, numRuns: 300 },
    );
  });

  it('refuses what is not an entry, reading no length past the payload', () => {
    const good = encodeEntry(base);
    const refuse = (b: Uint8Array, why: RegExp) => {
      expect(() => decodeEntry(b)).toThrow(why);
      try {
        decodeEntry(b);
      } catch (e) {
        expect((e as { code: string }).code).toBe('PLX_CHRONACTA_BAD_INPUT');
      }
    };
    refuse(good.subarray(0, 63), /shorter than the header/);
    const wrongFormat = good.slice();
    wrongFormat[0] = 2;
    refuse(wrongFormat, /format 2/);
    const wrongKind = good.slice();
    wrongKind[1] = 9;
    refuse(wrongKind, /unknown kind/);
    const longData = good.slice();
    new DataView(longData.buffer).setUint32(60, 0xffffffff, true);
    refuse(longData, /past the end/);
    refuse(good.subarray(0, good.length - 1), /past the end/);
    refuse(Uint8Array.from([...good, 0]), /after the data/);
    const badFlags = good.slice();
    badFlags[2] = 4;
    refuse(badFlags, /unknown flags/);
    const noKey = good.slice();
    noKey[2] = 1;
    refuse(noKey, /idempotency key cut/);
    const badUtf8 = good.slice();
    badUtf8[64] = 0xff;
    refuse(badUtf8, /not UTF-8/);
  });

  it('writes UUIDs as their 16 bytes', () => {
    const s = 'f81d4fae-7dec-11d0-a765-00a0c91e6bf6';
    expect(bytesToUuid(uuidToBytes(s))).toBe(s);
    expect(bytesToUuid(uuidToBytes(s.toUpperCase()))).toBe(s);
  });
});
