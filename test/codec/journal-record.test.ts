/**
 * The journal record codec (ts/codec/journal-record.ts, docs/runtime.md "The journal
 * record"): the byte layout, round trips, and refusals of malformed input on both header
 * kernels (WebAssembly and its TypeScript twin). Properties run with a fixed seed;
 * PLEXUS_FUZZ_SEED=random or =<integer> changes it.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  decodeJournalRecord,
  encodeJournalRecord,
  JOURNAL_HEADER_SIZE,
  type JournalRecord,
  type JsonValue,
  MAX_JOURNAL_BODY,
  type MacrostepRecord,
  peekJournalRecord,
  type SnapshotRecord,
} from '../../ts/codec/journal-record.js';
import { backend, isPlexusError, kernels, useBackend } from '../../ts/core/index.js';
import { thrownRefusal } from '../helpers/refusal.js';

const FUZZ_SEED = process.env.PLEXUS_FUZZ_SEED;
function seedOption(): { seed?: number } {
  if (FUZZ_SEED === 'random') return {};
  if (FUZZ_SEED === undefined) return { seed: 0x6a6f75 };
  return { seed: Number(FUZZ_SEED) };
}

const MACRO: MacrostepRecord = {
  kind: 'macrostep',
  iri: 'vt:orders/1234',
  seq: 7,
  time: 1_700_000_000_123,
  dispatchedThrough: 5,
  messageId: 'm-1',
  event: { name: 'order.placed', data: { qty: 2 } },
  state: { status: 'placed', qty: 2 },
  sends: [{ id: 's1', target: 'vt:billing/1', event: 'charge', data: 10 }],
};

const SNAP: SnapshotRecord = {
  kind: 'snapshot',
  iri: 'vt:orders/1234',
  seq: 9,
  time: 3,
  dispatchedThrough: 8,
  state: { status: 'paid' },
  dedup: ['m-1', 'm-2'],
  pending: [{ seq: 9, index: 0, send: { target: 'vt:ship/1', event: 'ship' } }],
};

const json: fc.Arbitrary<JsonValue> = fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.parse(JSON.stringify(v)));
const text = (max: number) => fc.string({ minLength: 1, maxLength: max, unit: 'grapheme' });

const macroArb: fc.Arbitrary<JournalRecord> = fc
  .record({
    iri: text(40),
    seq: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
    time: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
    d: fc.integer({ min: 0, max: 1000 }),
    messageId: fc.string({ maxLength: 30 }),
    event: json,
    state: fc.option(json, { nil: undefined }),
    sends: fc.array(json, { maxLength: 4 }),
  })
  .map(({ d, state, ...r }) => {
    const rec: MacrostepRecord = { kind: 'macrostep', ...r, dispatchedThrough: Math.min(d, r.seq) };
    return state === undefined ? rec : { ...rec, state };
  });

const snapArb: fc.Arbitrary<JournalRecord> = fc
  .record({
    iri: text(40),
    seq: fc.integer({ min: 1, max: 1_000_000 }),
    time: fc.nat(),
    state: json,
    dedup: fc.array(fc.string({ maxLength: 20 }), { maxLength: 5 }),
    pending: fc.array(fc.record({ seq: fc.integer({ min: 1, max: 1000 }), index: fc.nat({ max: 100 }), send: json }), {
      maxLength: 3,
    }),
  })
  .map((r) => ({ kind: 'snapshot', ...r, dispatchedThrough: r.seq }));

const recordArb = fc.oneof(macroArb, snapArb);

const original = backend().name;

describe.each(kernels().map((k) => k.name))('journal record (%s)', (name) => {
  beforeAll(() => useBackend(name));
  afterAll(() => useBackend(original));

  it('writes the 32-byte header at its documented offsets, little endian, then the body', () => {
    const b = encodeJournalRecord(MACRO);
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    expect(dv.getUint32(0, true)).toBe(b.length - JOURNAL_HEADER_SIZE);
    expect(b[4]).toBe(1); // kind: macrostep
    expect(b[5]).toBe(1); // version
    expect(dv.getUint16(6, true)).toBe(1); // flags: state present
    expect(dv.getBigUint64(8, true)).toBe(7n);
    expect(dv.getBigUint64(16, true)).toBe(1_700_000_000_123n);
    expect(dv.getBigUint64(24, true)).toBe(5n);
    expect(dv.getUint16(32, true)).toBe(14); // IRI length
    expect(Buffer.from(b.subarray(34, 48)).toString()).toBe('vt:orders/1234');
    expect(dv.getUint16(48, true)).toBe(3); // message id length
    expect(Buffer.from(b.subarray(50, 53)).toString()).toBe('m-1');
    const evLen = dv.getUint32(53, true);
    expect(JSON.parse(Buffer.from(b.subarray(57, 57 + evLen)).toString())).toEqual(MACRO.event);
    const s = encodeJournalRecord(SNAP);
    expect(s[4]).toBe(2);
    expect(new DataView(s.buffer).getUint16(6, true)).toBe(0);
  });

  it('decodes the two fixed records and a macrostep without state', () => {
    expect(decodeJournalRecord(encodeJournalRecord(MACRO))).toEqual(MACRO);
    expect(decodeJournalRecord(encodeJournalRecord(SNAP))).toEqual(SNAP);
    const { state: _s, ...noState } = MACRO;
    const d = decodeJournalRecord(encodeJournalRecord(noState));
    expect(d).toEqual(noState);
    expect('state' in d).toBe(false);
    expect(peekJournalRecord(encodeJournalRecord(SNAP))).toEqual({ kind: 'snapshot', iri: SNAP.iri, seq: 9 });
  });

  it('decodes every encoded record to itself, and peek agrees (property)', () => {
    fc.assert(
      fc.property(recordArb, (rec) => {
        const b = encodeJournalRecord(rec);
        expect(decodeJournalRecord(b)).toEqual(rec);
        expect(peekJournalRecord(b)).toEqual({ kind: rec.kind, iri: rec.iri, seq: rec.seq });
      }),
      { ...seedOption(), numRuns: 300 },
    );
  });

  it('refuses every cut of a record and every record with bytes appended', () => {
    for (const rec of [MACRO, SNAP]) {
      const b = encodeJournalRecord(rec);
      for (let n = 0; n < b.length; n++) {
        const e = thrownRefusal(() => decodeJournalRecord(b.subarray(0, n)));
        expect(e.code).toBe('PLX_JOURNAL_BAD_RECORD');
        expect(['cut', 'length']).toContain(e.details.reason);
      }
      const longer = new Uint8Array(b.length + 1);
      longer.set(b);
      expect(thrownRefusal(() => decodeJournalRecord(longer)).details.reason).toBe('length');
    }
  });

  it('refuses a length above the maximum before reading anything else', () => {
    const b = encodeJournalRecord(MACRO);
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    dv.setUint32(0, MAX_JOURNAL_BODY + 1, true);
    b[4] = 9; // a bad kind too: the length is judged first
    const e = thrownRefusal(() => decodeJournalRecord(b));
    expect(e.code).toBe('PLX_JOURNAL_BAD_RECORD');
    expect(e.details.reason).toBe('length');
  });

  it('refuses each bad header field with its reason', () => {
    const cases: [string, (dv: DataView) => void][] = [
      ['kind', (dv) => dv.setUint8(4, 3)],
      ['version', (dv) => dv.setUint8(5, 2)],
      ['flags', (dv) => dv.setUint16(6, 3, true)],
      ['seq', (dv) => dv.setBigUint64(8, 0n, true)],
      ['seq', (dv) => dv.setBigUint64(8, 1n << 53n, true)],
      ['time', (dv) => dv.setBigUint64(16, 1n << 60n, true)],
      ['dispatched-through', (dv) => dv.setBigUint64(24, 1n << 60n, true)],
      ['dispatched-through', (dv) => dv.setBigUint64(24, 8n, true)],
    ];
    for (const [reason, change] of cases) {
      const b = encodeJournalRecord(MACRO);
      change(new DataView(b.buffer, b.byteOffset, b.byteLength));
      expect(thrownRefusal(() => decodeJournalRecord(b)).details.reason, reason).toBe(reason);
    }
    const s = encodeJournalRecord(SNAP);
    new DataView(s.buffer).setUint16(6, 1, true); // the state flag on a snapshot
    expect(thrownRefusal(() => decodeJournalRecord(s)).details.reason).toBe('flags');
  });

  it('refuses counts that cannot fit in the bytes that remain, without allocating by them', () => {
    const rec: MacrostepRecord = { ...MACRO, sends: [] };
    const b = encodeJournalRecord(rec);
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    dv.setUint32(b.length - 4, 4000, true); // send count 4000 in 0 remaining bytes
    expect(thrownRefusal(() => decodeJournalRecord(b)).details.reason).toBe('cut');
    dv.setUint32(b.length - 4, 0xffff_ffff, true);
    expect(thrownRefusal(() => decodeJournalRecord(b)).details.reason).toBe('count');
    const s = encodeJournalRecord({ ...SNAP, pending: [] });
    new DataView(s.buffer).setUint32(s.length - 4, 0x7fff_ffff, true);
    expect(thrownRefusal(() => decodeJournalRecord(s)).details.reason).toBe('cut');
  });

  it('refuses bad UTF-8, bad JSON, an empty IRI and trailing bytes inside the body', () => {
    const b = encodeJournalRecord(MACRO);
    const bad = b.slice();
    bad[34] = 0xff; // inside the IRI
    expect(thrownRefusal(() => decodeJournalRecord(bad)).details.reason).toBe('utf8');
    const j = b.slice();
    j[57] = 0x7d; // '}' where the event JSON begins
    expect(thrownRefusal(() => decodeJournalRecord(j)).details.reason).toBe('json');
    const empty = encodeJournalRecord({ ...MACRO, iri: 'x' });
    const e = new Uint8Array(empty.length - 1);
    e.set(empty.subarray(0, 32));
    e.set(empty.subarray(35), 34);
    new DataView(e.buffer).setUint16(32, 0, true);
    new DataView(e.buffer).setUint32(0, e.length - 32, true);
    expect(thrownRefusal(() => decodeJournalRecord(e)).details.reason).toBe('iri');
    const trailing = new Uint8Array(b.length + 3);
    trailing.set(b);
    new DataView(trailing.buffer).setUint32(0, trailing.length - 32, true);
    expect(thrownRefusal(() => decodeJournalRecord(trailing)).details.reason).toBe('trailing');
  });

  it('answers arbitrary bytes and mutated records with a record or PLX_JOURNAL_BAD_RECORD only (fuzz)', () => {
    const check = (b: Uint8Array) => {
      try {
        const r = decodeJournalRecord(b);
        expect(['macrostep', 'snapshot']).toContain(r.kind);
      } catch (e) {
        expect(isPlexusError(e, 'PLX_JOURNAL_BAD_RECORD')).toBe(true);
      }
    };
    fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), check), { ...seedOption(), numRuns: 500 });
    fc.assert(
      fc.property(
        recordArb,
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }),
        (rec, flips) => {
          const b = encodeJournalRecord(rec).slice();
          for (const [at, v] of flips) b[at % b.length] = v;
          check(b);
        },
      ),
      { ...seedOption(), numRuns: 500 },
    );
  });

  it('refuses to encode what it could not decode', () => {
    const bad = (r: unknown) => thrownRefusal(() => encodeJournalRecord(r as JournalRecord)).code;
    expect(bad({ ...MACRO, seq: 0 })).toBe('PLX_JOURNAL_BAD_INPUT');
    expect(bad({ ...MACRO, dispatchedThrough: 8 })).toBe('PLX_JOURNAL_BAD_INPUT');
    expect(bad({ ...MACRO, iri: '' })).toBe('PLX_JOURNAL_BAD_INPUT');
    expect(bad({ ...MACRO, event: 1n })).toBe('PLX_JOURNAL_BAD_INPUT');
    expect(bad({ ...MACRO, state: () => 1 })).toBe('PLX_JOURNAL_BAD_INPUT');
    expect(bad({ ...MACRO, kind: 'other' })).toBe('PLX_JOURNAL_BAD_INPUT');
    expect(bad({ ...MACRO, messageId: 'm'.repeat(70_000) })).toBe('PLX_JOURNAL_BAD_INPUT');
    // A refusal in the middle of a record leaves nothing behind for the next one.
    expect(decodeJournalRecord(encodeJournalRecord(MACRO))).toEqual(MACRO);
  });

  it('returns records that own their bytes, encodes a record nested in a toJSON, and leaves out undefined members', () => {
    const first = encodeJournalRecord(MACRO);
    const copy = first.slice();
    const big = { ...MACRO, seq: 12, dispatchedThrough: 11, state: { s: 'é'.repeat(5000) } };
    const second = encodeJournalRecord(big);
    expect(first).toEqual(copy);
    expect(decodeJournalRecord(second)).toEqual(big);
    expect(first.buffer).not.toBe(second.buffer);
    let inner: Uint8Array | undefined;
    const nesting = {
      ...MACRO,
      state: {
        toJSON() {
          inner = encodeJournalRecord(SNAP);
          return { n: 1 };
        },
      },
    } as unknown as MacrostepRecord;
    const outer = decodeJournalRecord(encodeJournalRecord(nesting));
    expect(outer).toEqual({ ...MACRO, state: { n: 1 } });
    expect(decodeJournalRecord(inner as Uint8Array)).toEqual(SNAP);
    const withUndefined = {
      ...MACRO,
      event: { name: 'e', sendid: undefined, data: { a: 1, b: undefined } },
    } as unknown as MacrostepRecord;
    const d = decodeJournalRecord(encodeJournalRecord(withUndefined)) as MacrostepRecord;
    expect(d.event).toEqual({ name: 'e', data: { a: 1 } });
    expect('sendid' in (d.event as object)).toBe(false);
  });
});
