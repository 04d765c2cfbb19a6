import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import {
  decodeEvfr,
  EVFR_HEADER_BYTES,
  EVFR_MAX_BODY,
  EVFR_MAX_RECORDS,
  type EvfrDecoded,
  encodeEvfr,
  evfrSize,
} from '../../ts/codec/evfr.js';
import { backend, crc32c, isPlexusError, useBackend } from '../../ts/core/index.js';
import { randomBytes, rng } from '../helpers/rng.js';

const BATCH = Uint8Array.from({ length: 16 }, (_, i) => 0x10 + i);
const initial = backend().name;
afterAll(() => useBackend(initial));

/**
 * Writes a frame field by field with a DataView, independently of the codec, from the
 * layout in docs/evfr.md. `fix` recomputes both checksums after `edit`.
 */
function raw(
  o: { first?: bigint; epoch?: bigint; count?: number; length?: number; version?: number; flags?: number } = {},
  records: Uint8Array[] = [Uint8Array.of(1, 2, 3), new Uint8Array(0), Uint8Array.of(9)],
  edit?: (b: Uint8Array, dv: DataView) => void,
  fix = true,
): Uint8Array {
  const body = records.reduce((n, r) => n + 4 + r.length, 0);
  const b = new Uint8Array(EVFR_HEADER_BYTES + body);
  const dv = new DataView(b.buffer);
  b.set([0x45, 0x56, 0x46, 0x52], 0);
  dv.setUint8(4, o.version ?? 1);
  dv.setUint8(5, o.flags ?? 0);
  dv.setUint32(8, o.length ?? body, true);
  dv.setUint32(12, o.count ?? records.length, true);
  dv.setBigUint64(16, o.first ?? 100n, true);
  dv.setBigUint64(24, o.epoch ?? 7n, true);
  b.set(BATCH, 32);
  let at = EVFR_HEADER_BYTES;
  for (const r of records) {
    dv.setUint32(at, r.length, true);
    b.set(r, at + 4);
    at += 4 + r.length;
  }
  edit?.(b, dv);
  if (fix) {
    dv.setUint32(48, crc32c(b.subarray(EVFR_HEADER_BYTES)), true);
    dv.setUint32(52, crc32c(b.subarray(0, 52)), true);
  }
  return b;
}

function reasonOf(bytes: Uint8Array): string {
  try {
    const out = decodeEvfr(bytes);
    return out.kind;
  } catch (err) {
    if (!isPlexusError(err, 'PLX_EVFR_BAD_FRAME')) throw err;
    return String((err.details as { reason: string }).reason);
  }
}

function frameOf(d: EvfrDecoded) {
  if (d.kind !== 'frame') throw new Error(`expected a frame, got ${d.kind}`);
  return d.frame;
}

describe.each(['wasm', 'js'] as const)('EVFR on the %s backend', (name) => {
  it('round-trips records, positions, epoch and batch id', () => {
    useBackend(name);
    const records = [Uint8Array.of(1, 2, 3), new Uint8Array(0), randomBytes(rng(1), 1000)];
    const bytes = encodeEvfr({ batchId: BATCH, first: 42, epoch: 9n, records });
    expect(bytes.length).toBe(evfrSize(records));
    const d = decodeEvfr(bytes);
    const f = frameOf(d);
    expect(d.kind === 'frame' && d.consumed).toBe(bytes.length);
    expect(f.first).toBe(42);
    expect(f.last).toBe(44);
    expect(f.epoch).toBe(9n);
    expect([...f.batchId]).toEqual([...BATCH]);
    expect(f.records.map((r) => [...r])).toEqual(records.map((r) => [...r]));
    // Records are views into the frame, not copies.
    expect(f.records[2]?.buffer).toBe(bytes.buffer);
  });

  it('writes exactly the documented layout', () => {
    useBackend(name);
    const records = [Uint8Array.of(1, 2, 3), new Uint8Array(0), Uint8Array.of(9)];
    const ours = encodeEvfr({ batchId: BATCH, first: 100, epoch: 7n, records });
    expect([...ours]).toEqual([...raw({}, records)]);
  });

  it('refuses each bad header field with its reason, in the documented order', () => {
    useBackend(name);
    expect(reasonOf(raw())).toBe('frame');
    expect(reasonOf(raw({ length: EVFR_MAX_BODY + 1 }))).toBe('length');
    expect(reasonOf(raw({}, undefined, (b) => b.set([0x45, 0x56, 0x46, 0x53], 0)))).toBe('magic');
    expect(reasonOf(raw({ version: 2 }))).toBe('version');
    expect(reasonOf(raw({ flags: 0x80 }))).toBe('flags');
    expect(reasonOf(raw({}, undefined, (_b, dv) => dv.setUint16(6, 1, true)))).toBe('reserved');
    expect(reasonOf(raw({ count: 0 }))).toBe('count');
    expect(reasonOf(raw({ count: EVFR_MAX_RECORDS + 1 }))).toBe('count');
    expect(reasonOf(raw({ first: 0n }))).toBe('first');
    expect(reasonOf(raw({ first: 1n << 53n }))).toBe('first');
    // Length is judged before everything else.
    expect(reasonOf(raw({ length: EVFR_MAX_BODY + 1, version: 2, count: 0 }))).toBe('length');
    expect(reasonOf(raw({ version: 3, flags: 1 }))).toBe('version');
  });

  it('refuses damaged checksums, position overflow and lying record lengths', () => {
    useBackend(name);
    expect(reasonOf(raw({}, undefined, (b) => (b[24] = 99), false))).toBe('header-crc');
    const damaged = raw();
    damaged[EVFR_HEADER_BYTES + 5] = (damaged[EVFR_HEADER_BYTES + 5] as number) ^ 1;
    expect(reasonOf(damaged)).toBe('body-crc');
    expect(reasonOf(raw({ first: (1n << 53n) - 2n }))).toBe('range');
    expect(reasonOf(raw({ first: (1n << 53n) - 3n }))).toBe('frame');
    // A record length that runs past the body, checksums made to match.
    expect(reasonOf(raw({}, undefined, (_b, dv) => dv.setUint32(EVFR_HEADER_BYTES, 1000, true)))).toBe('record-length');
    // Bytes after the last record.
    expect(reasonOf(raw({ count: 2 }))).toBe('body-size');
    // A body too small for the declared count's length fields.
    expect(reasonOf(raw({ count: 1000 }))).toBe('body-size');
  });

  it('asks for more bytes at every split point and never allocates by the declared size', () => {
    useBackend(name);
    const bytes = encodeEvfr({ batchId: BATCH, first: 5, epoch: 1n, records: [randomBytes(rng(2), 300)] });
    for (let cut = 0; cut < bytes.length; cut++) {
      const d = decodeEvfr(bytes.subarray(0, cut));
      expect(d.kind).toBe('incomplete');
      if (d.kind === 'incomplete') expect(d.need).toBe(cut < EVFR_HEADER_BYTES ? EVFR_HEADER_BYTES : bytes.length);
    }
    const huge = raw({ length: EVFR_MAX_BODY, count: 1 }).subarray(0, EVFR_HEADER_BYTES + 10);
    expect(decodeEvfr(huge)).toEqual({ kind: 'incomplete', need: EVFR_HEADER_BYTES + EVFR_MAX_BODY });
  });

  it('answers random and mutated input only with a frame, a request for more, or PLX_EVFR_BAD_FRAME', () => {
    useBackend(name);
    const valid = encodeEvfr({ batchId: BATCH, first: 9, epoch: 2n, records: [Uint8Array.of(1), Uint8Array.of(2, 3)] });
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 200 }),
          fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 1, max: 255 })).map(([i, x]) => {
            const m = valid.slice();
            m[i] = (m[i] as number) ^ x;
            return m;
          }),
        ),
        (input) => {
          const r = reasonOf(input);
          expect(typeof r).toBe('string');
          // A single changed byte anywhere is always caught.
          if (input.length === valid.length && !input.every((v, i) => v === valid[i])) expect(r).not.toBe('frame');
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('EVFR encoder', () => {
  it('refuses bad arguments with PLX_EVFR_BAD_INPUT', () => {
    const bad = (f: () => unknown) => {
      try {
        f();
      } catch (err) {
        return isPlexusError(err, 'PLX_EVFR_BAD_INPUT');
      }
      return false;
    };
    const ok = { batchId: BATCH, first: 1, epoch: 0n, records: [Uint8Array.of(1)] };
    expect(bad(() => encodeEvfr({ ...ok, batchId: new Uint8Array(15) }))).toBe(true);
    expect(bad(() => encodeEvfr({ ...ok, records: [] }))).toBe(true);
    expect(bad(() => encodeEvfr({ ...ok, first: 0 }))).toBe(true);
    expect(
      bad(() => encodeEvfr({ ...ok, first: Number.MAX_SAFE_INTEGER, records: [ok.records[0]!, ok.records[0]!] })),
    ).toBe(true);
    expect(bad(() => encodeEvfr({ ...ok, epoch: -1n }))).toBe(true);
    expect(bad(() => encodeEvfr(ok, new Uint8Array(10)))).toBe(true);
    expect(bad(() => decodeEvfr('x' as unknown as Uint8Array))).toBe(true);
  });

  it('encodes into a caller buffer', () => {
    const records = [Uint8Array.of(4, 5)];
    const out = new Uint8Array(evfrSize(records) + 8);
    const view = encodeEvfr({ batchId: BATCH, first: 3, epoch: 4, records }, out);
    expect(view.buffer).toBe(out.buffer);
    expect(frameOf(decodeEvfr(out)).records.map((r) => [...r])).toEqual([[4, 5]]);
  });
});
