/**
 * The store's append path lays each append's records out once, in the log's own layout
 * (a gap for the log's 48-byte record header before each payload), and hands that buffer
 * to `LogStorage#appendFramed` when the log has it; a log without it gets `append` with
 * the same payloads. Both paths must store the same records.
 */
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { checkTable, tableOf } from '../../ts/chronacta/batch.js';
import { decodeEntry } from '../../ts/chronacta/record.js';
import { EventStore } from '../../ts/chronacta/store.js';
import { EncodedBatch, encodeTable } from '../../ts/codec/chronacta-batch.js';
import { FileLog, openLog } from '../../ts/storage/file-log.js';
import { RECORD_HEADER_BYTES as LOG_GAP } from '../../ts/storage/format.js';
import type { LogRecord } from '../../ts/storage/types.js';
import { quiet, tempDir } from './helpers.js';

const seed = process.env.PLEXUS_FUZZ_SEED;
const fuzz = seed === 'random' ? {} : { seed: seed === undefined ? 20_261_130 : Number(seed) };
const utf8 = new TextEncoder();

describe('encodeTable with a gap before each record', () => {
  it('writes the same payloads as without a gap, and leaves the gaps zero', () => {
    const ids = fc.uuid().map((u) => u.toLowerCase());
    const events = fc.array(
      fc.record({
        id: ids,
        type: fc.string({ minLength: 1, maxLength: 12 }),
        data: fc.uint8Array({ maxLength: 300 }),
        metadata: fc.uint8Array({ maxLength: 40 }),
      }),
      { minLength: 1, maxLength: 20 },
    );
    fc.assert(
      fc.property(events, fc.integer({ min: 0, max: 128 }), fc.boolean(), (evs, gap, keyed) => {
        const table = tableOf(evs);
        const body = checkTable(table);
        const head = {
          stream: utf8.encode('orders-1'),
          firstPosition: 41,
          firstVersion: 7,
          recordedMs: 1_764_000_000_000,
          ...(keyed ? { key: utf8.encode('k-1'), fingerprint: new Uint8Array(32).fill(9) } : {}),
        };
        const plain = encodeTable(table, head, body);
        const gapped = encodeTable(table, head, body, gap);
        expect(gapped.count).toBe(evs.length);
        expect(gapped.gap).toBe(gap);
        expect([...gapped.lengths]).toEqual([...plain.lengths]);
        expect(gapped.bytes.length).toBe(plain.bytes.length + gap * evs.length);
        expect(gapped.payloadBytes).toBe(plain.bytes.length);
        let off = 0;
        for (let i = 0; i < evs.length; i++) {
          expect(gapped.bytes.subarray(off, off + gap).every((b) => b === 0)).toBe(true);
          off += gap;
          const len = gapped.lengths[i] as number;
          expect([...gapped.bytes.subarray(off, off + len)]).toEqual([...(plain.payloads[i] as Uint8Array)]);
          expect([...(gapped.payloads[i] as Uint8Array)]).toEqual([...(plain.payloads[i] as Uint8Array)]);
          expect(decodeEntry(gapped.payloads[i] as Uint8Array).position).toBe(41 + i);
          off += len;
        }
        expect(off).toBe(gapped.bytes.length);
      }),
      { ...fuzz, numRuns: 200 },
    );
  });

  it('refuses a gap that is not a small whole number', () => {
    const table = tableOf([{ type: 't', data: 'x' }]);
    const body = checkTable(table);
    const head = { stream: utf8.encode('s'), firstPosition: 1, firstVersion: 0, recordedMs: 0 };
    for (const gap of [-1, 1.5, 5000, Number.NaN])
      expect(() => encodeTable(table, head, body, gap)).toThrow(RangeError);
  });

  it('EncodedBatch.of wraps one payload without a gap', () => {
    const b = EncodedBatch.of(Uint8Array.of(1, 2, 3));
    expect(b.count).toBe(1);
    expect(b.gap).toBe(0);
    expect(b.payloadBytes).toBe(3);
    expect([...(b.payloads[0] as Uint8Array)]).toEqual([1, 2, 3]);
  });
});

describe('the store appends through appendFramed when the log has it', () => {
  let dirs: { dir: string; remove: () => Promise<void> }[] = [];
  beforeEach(() => {
    dirs = [];
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const d of dirs) await d.remove();
  });

  /** A fixed clock and ids: two stores given the same appends write the same records. */
  async function runAppends(
    framed: boolean,
  ): Promise<{ records: LogRecord[]; framedCalls: number; plainCalls: number }> {
    const d = await tempDir('framed');
    dirs.push(d);
    const framedSpy = vi.spyOn(FileLog.prototype, 'appendFramed');
    const plainSpy = vi.spyOn(FileLog.prototype, 'append');
    const saved = FileLog.prototype.appendFramed;
    if (!framed) {
      // A log without the optional member, as the seam allows.
      (FileLog.prototype as { appendFramed?: unknown }).appendFramed = undefined;
    }
    let ms = 1_764_000_000_000;
    const store = await EventStore.open({ dataDir: d.dir, logger: quiet, clock: () => ms++ });
    const logDir = store.prepared.paths.log;
    try {
      const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
      let n = 0;
      const batch = (size: number, type: string) =>
        Array.from({ length: size }, () => ({
          id: uuid(++n),
          type,
          data: utf8.encode(`{"n":${n}}`),
          metadata: n % 3 === 0 ? utf8.encode('m') : undefined,
        }));
      await store.append('orders-1', batch(1, 'created'));
      await store.append('orders-1', batch(100, 'line-added'), { expectedVersion: 0n });
      // Concurrent appends share a group: several framed batches in one write.
      await Promise.all([
        store.append('orders-2', batch(3, 'created'), { idempotencyKey: 'key-2' }),
        store.append('orders-3', batch(1, 'created')),
        store.append('orders-4', batch(250, 'bulk')),
      ]);
      await store.deleteStream('orders-3');
      const wrong = await store.append('orders-1', batch(1, 'late'), { expectedVersion: 5n }).catch((e) => e);
      expect(wrong.code).toBe('PLX_CHRONACTA_WRONG_EXPECTED_VERSION');
      const all = await store.readAll({ maxCount: 1000 });
      expect(all.events).toHaveLength(355);
      expect(all.events[1]?.stream).toBe('orders-1');
      expect(all.events[1]?.version).toBe(1n);
    } finally {
      await store.close();
      FileLog.prototype.appendFramed = saved;
    }
    // Each framed batch: the log's 48-byte gap before every payload, nothing else.
    for (const [b] of framedSpy.mock.calls) {
      const lengths = [...b.lengths];
      expect(b.bytes.length).toBe(lengths.reduce((n, l) => n + LOG_GAP + l, 0));
    }
    const framedCalls = framedSpy.mock.calls.length;
    const plainCalls = plainSpy.mock.calls.length;
    vi.restoreAllMocks();
    const log = await openLog(logDir, { logger: quiet });
    try {
      return { records: await log.read(1n), framedCalls, plainCalls };
    } finally {
      await log.close();
    }
  }

  it('stores the same records either way, every event append going through appendFramed', async () => {
    const framed = await runAppends(true);
    const plain = await runAppends(false);
    // 5 event appends framed; the stream deletion is one record through append.
    expect(framed.framedCalls).toBe(5);
    expect(framed.plainCalls).toBe(1);
    expect(plain.framedCalls).toBe(0);
    expect(plain.plainCalls).toBe(6);
    expect(framed.records).toHaveLength(356);
    expect(plain.records).toHaveLength(356);
    for (let i = 0; i < framed.records.length; i++) {
      const a = framed.records[i] as LogRecord;
      const b = plain.records[i] as LogRecord;
      expect(a.position).toBe(b.position);
      const ea = decodeEntry(a.payload);
      const eb = decodeEntry(b.payload);
      // Random: the deletion's event id. Everything else is fixed by the appends and the clock.
      if (ea.kind === 1) expect(Buffer.from(a.payload).equals(Buffer.from(b.payload))).toBe(true);
      else expect({ ...ea, id: undefined }).toEqual({ ...eb, id: undefined });
    }
    // One batch id per append, shared by its records.
    const batches = new Set(framed.records.map((r) => Buffer.from(r.batchId).toString('hex')));
    expect(batches.size).toBe(6);
  });
});
