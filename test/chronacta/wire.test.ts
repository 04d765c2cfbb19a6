/**
 * The hand-written codec of the hot messages (wire.ts) and the one-pass record encoder
 * (batch.ts), each held to its twin: the protobufjs encoding of the same messages
 * (proto-loader, as grpc-js clients send them), and the entry-by-entry encoder and
 * fingerprint of record.ts / validate.ts. fast-check runs with fixed seeds.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkTable, fingerprintTable, tableOf } from '../../ts/chronacta/batch.js';
import { methodDefinition } from '../../ts/chronacta/proto.js';
import { decodeEntry, uuidToBytes } from '../../ts/chronacta/record.js';
import { checkEvents, fingerprint } from '../../ts/chronacta/validate.js';
import { decodeAppendRequest, encodeAppendResponseFrame } from '../../ts/chronacta/wire.js';
import { EV_DATA, EV_ID, EV_META, EV_SLOTS, EV_TYPE, encodeTable } from '../../ts/codec/chronacta-batch.js';
import { encodeEntry, RecordKind } from '../../ts/codec/chronacta-record.js';
import { isPlexusError } from '../../ts/core/errors.js';

const SEED = 20261130;
const append = methodDefinition('EventStore', 'Append');
const utf8 = new TextEncoder();

const uuid = fc.uuid();
const text = (max: number) => fc.string({ unit: 'grapheme', maxLength: max });
const bytes = fc.uint8Array({ maxLength: 64 });
const eventArb = fc.record({ id: fc.oneof(fc.constant(''), uuid), type: text(12), data: bytes, metadata: bytes });
const expectedArb = fc.oneof(
  fc.constant(undefined),
  fc.constant({ any: {} }),
  fc.constant({ noStream: {} }),
  fc.constant({ exists: {} }),
  fc.maxSafeNat().map((n) => ({ exact: String(n) })),
);
const requestArb = fc.record({
  stream: text(20),
  events: fc.array(eventArb, { maxLength: 8 }),
  expectedVersion: expectedArb,
  idempotencyKey: text(10),
});

function slice(buf: Uint8Array, ev: Uint32Array, i: number, slot: number): Uint8Array {
  const off = ev[i * EV_SLOTS + slot] as number;
  return buf.subarray(off, off + (ev[i * EV_SLOTS + slot + 1] as number));
}

function expectRefusal(f: () => unknown): void {
  try {
    f();
  } catch (e) {
    expect(isPlexusError(e), String(e)).toBe(true);
    expect(['PLX_CHRONACTA_BAD_INPUT', 'PLX_CHRONACTA_TOO_LARGE']).toContain((e as { code: string }).code);
  }
}

describe('AppendRequest: the hand-written decoder against protobufjs', () => {
  it('reads every field of what protobufjs encodes', () => {
    fc.assert(
      fc.property(requestArb, (req) => {
        const wire = append.requestSerialize(req as object);
        const w = decodeAppendRequest(wire);
        expect(w.stream).toBe(req.stream);
        expect(w.key).toBe(req.idempotencyKey === '' ? undefined : req.idempotencyKey);
        const ex = req.expectedVersion;
        const want =
          ex === undefined || 'any' in ex
            ? 'any'
            : 'noStream' in ex
              ? 'no_stream'
              : 'exists' in ex
                ? 'exists'
                : BigInt(ex.exact);
        expect(w.expected).toBe(want);
        expect(w.count).toBe(req.events.length);
        req.events.forEach((e, i) => {
          expect(Buffer.from(slice(w.buf, w.ev, i, EV_ID)).toString()).toBe(e.id);
          expect(Buffer.from(slice(w.buf, w.ev, i, EV_TYPE)).toString()).toBe(e.type);
          expect([...slice(w.buf, w.ev, i, EV_DATA)]).toEqual([...e.data]);
          expect([...slice(w.buf, w.ev, i, EV_META)]).toEqual([...e.metadata]);
        });
      }),
      { seed: SEED, numRuns: 300 },
    );
  });

  it('skips unknown fields and takes the last of a repeated field, as protobufjs does', () => {
    const base = Buffer.from(append.requestSerialize({ stream: 'a', events: [{ type: 't' }] }));
    // field 9 varint, field 10 fixed64, field 11 LEN, field 12 fixed32, then stream again
    const extra = Buffer.from([0x48, 0x96, 0x01, 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 0x5a, 2, 0xff, 0xff, 0x65, 1, 2, 3, 4]);
    const again = Buffer.from([0x0a, 1, 0x62]);
    const msg = Buffer.concat([base, extra, again]);
    const ours = decodeAppendRequest(msg);
    const theirs = append.requestDeserialize(msg) as { stream: string };
    expect(ours.stream).toBe('b');
    expect(theirs.stream).toBe('b');
    expect(ours.count).toBe(1);
  });

  it('refuses cut and malformed input with a PlexusError, never a crash', () => {
    fc.assert(
      fc.property(requestArb, fc.nat(), fc.nat(255), (req, at, byte) => {
        const wire = Buffer.from(append.requestSerialize(req as object));
        // every prefix, and one byte changed
        expectRefusal(() => decodeAppendRequest(wire.subarray(0, at % (wire.length + 1))));
        if (wire.length > 0) {
          const m = Buffer.from(wire);
          m[at % m.length] = byte;
          expectRefusal(() => decodeAppendRequest(m));
        }
      }),
      { seed: SEED, numRuns: 500 },
    );
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (b) => expectRefusal(() => decodeAppendRequest(b))),
      { seed: SEED, numRuns: 1000 },
    );
  });

  it('names what is wrong', () => {
    const refused = (b: number[], re: RegExp) => {
      let err: unknown;
      try {
        decodeAppendRequest(Uint8Array.from(b));
      } catch (e) {
        err = e;
      }
      expect(isPlexusError(err, 'PLX_CHRONACTA_BAD_INPUT')).toBe(true);
      expect((err as Error).message).toMatch(re);
    };
    refused([0x0a], /varint runs past the end/);
    refused([0x0a, 5, 0x61], /runs past the end/);
    refused([0x0b], /wire type 3/);
    refused([0x08, 1], /field 1 has wire type 0/);
    refused([0x0a, 2, 0xc3, 0x28], /stream name is not UTF-8/);
    refused([0x1a, 2, 0x20, 0x80], /varint runs past the end/);
    refused([0x1a, 11, 0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], /2\^53|a bigint/);
    refused([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], /longer than 10 bytes/);
  });

  it('refuses more than 10000 events before it makes their table, and names above their limits', () => {
    const many = Buffer.alloc(2 * 10_001, 0);
    for (let i = 0; i < many.length; i += 2) many[i] = 0x12; // field 2, empty EventData
    let err: unknown;
    try {
      decodeAppendRequest(many);
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_CHRONACTA_TOO_LARGE')).toBe(true);
    const long = append.requestSerialize({ stream: 'x'.repeat(513), events: [{ type: 't' }] });
    expect(() => decodeAppendRequest(long)).toThrow(/longer than 512 bytes/);
    const key = append.requestSerialize({ stream: 's', events: [{ type: 't' }], idempotencyKey: 'k'.repeat(257) });
    expect(() => decodeAppendRequest(key)).toThrow(/at most 256 bytes/);
  });
});

describe('AppendResponse: the hand-written encoder against protobufjs', () => {
  it('writes what protobufjs reads, zeros left out', () => {
    fc.assert(
      fc.property(
        fc.maxSafeNat(),
        fc.maxSafeNat(),
        fc.maxSafeNat(),
        fc.maxSafeNat(),
        fc.uint8Array({ minLength: 16, maxLength: 16 }),
        fc.boolean(),
        (fv, lv, fp, lp, batchId, duplicate) => {
          const f = encodeAppendResponseFrame({
            firstVersion: fv,
            lastVersion: lv,
            firstPosition: fp,
            lastPosition: lp,
            batchId,
            duplicate,
          });
          expect(f[0]).toBe(0);
          expect(Buffer.from(f).readUInt32BE(1)).toBe(f.length - 5);
          const r = append.responseDeserialize(Buffer.from(f.subarray(5))) as Record<string, unknown>;
          const h = Buffer.from(batchId).toString('hex');
          expect(r).toEqual({
            firstVersion: String(fv),
            lastVersion: String(lv),
            firstPosition: String(fp),
            lastPosition: String(lp),
            batchId: `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`,
            duplicate,
          });
        },
      ),
      { seed: SEED, numRuns: 300 },
    );
  });
});

describe('the records of an append, encoded in one pass', () => {
  const events = fc.array(
    fc.record({
      id: fc.oneof(fc.constant(undefined), uuid),
      type: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }),
      data: fc.oneof(bytes, fc.string({ maxLength: 40 })),
      metadata: fc.oneof(fc.constant(undefined), bytes),
    }),
    { minLength: 1, maxLength: 12 },
  );

  it('writes the same records as encodeEntry, one entry at a time', () => {
    fc.assert(
      fc.property(
        events,
        fc.string({ minLength: 1, maxLength: 20 }),
        fc.nat(1e9),
        fc.nat(1e9),
        fc.option(fc.string({ minLength: 1, maxLength: 10 }), { nil: undefined }),
        (evs, stream, firstPosition, firstVersion, key) => {
          const table = tableOf(evs);
          const body = checkTable(table);
          const fp = key === undefined ? undefined : fingerprintTable(utf8.encode(stream), table);
          const recordedMs = 1_764_000_000_000;
          const enc = encodeTable(
            table,
            {
              stream: utf8.encode(stream),
              firstPosition,
              firstVersion,
              recordedMs,
              ...(key !== undefined && fp ? { key: utf8.encode(key), fingerprint: fp } : {}),
            },
            body,
          );
          expect(enc.payloads).toHaveLength(evs.length);
          let total = 0;
          enc.payloads.forEach((p, i) => {
            total += p.length;
            const d = decodeEntry(p);
            const e = evs[i] as (typeof evs)[number];
            const want = encodeEntry({
              kind: RecordKind.EVENT,
              batchSize: evs.length,
              indexInBatch: i,
              position: firstPosition + i,
              version: firstVersion + i,
              recordedMs,
              id: e.id ? uuidToBytes(e.id) : d.id,
              stream,
              type: e.type,
              metadata: e.metadata ?? new Uint8Array(0),
              data: typeof e.data === 'string' ? utf8.encode(e.data) : e.data,
              ...(i === 0 && key !== undefined && fp ? { idempotency: { key, fingerprint: fp } } : {}),
            });
            expect([...p]).toEqual([...want]);
            if (!e.id) {
              expect((d.id[6] as number) >> 4).toBe(4); // a version 4 UUID
              expect((d.id[8] as number) >> 6).toBe(2);
            }
          });
          expect(total).toBe(enc.bytes.length);
        },
      ),
      { seed: SEED, numRuns: 200 },
    );
  });

  it('fingerprints an append as validate.ts does', () => {
    fc.assert(
      fc.property(events, fc.string({ minLength: 1, maxLength: 20 }), (evs, stream) => {
        const want = fingerprint(stream, checkEvents(evs));
        expect([...fingerprintTable(utf8.encode(stream), tableOf(evs))]).toEqual([...want]);
      }),
      { seed: SEED, numRuns: 200 },
    );
  });

  it('refuses what checkEvents refuses', () => {
    const cases: unknown[] = [
      [],
      [{ type: '' }],
      [{ type: 't'.repeat(257) }],
      [{ type: 't', id: 'not-a-uuid' }],
      [{ type: 't', id: '00112233-4455-6677-8899-aabbccddeefg' }],
      [{ type: 't', data: 5 }],
      [{ type: '\ud800' }],
      [7],
    ];
    for (const c of cases) {
      let ours: unknown;
      let theirs: unknown;
      try {
        checkTable(tableOf(c));
      } catch (e) {
        ours = e;
      }
      try {
        checkEvents(c);
      } catch (e) {
        theirs = e;
      }
      expect(isPlexusError(ours), JSON.stringify(c)).toBe(true);
      expect((ours as { code: string }).code).toBe((theirs as { code: string }).code);
      expect((ours as Error).message).toBe((theirs as Error).message);
    }
  });
});
