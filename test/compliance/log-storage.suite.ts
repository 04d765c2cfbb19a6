/**
 * The compliance suites of the LogStorage seam (ts/storage/log-storage.ts). Every
 * implementation runs `logStorageSuite`; one that has the truncation capability
 * (`TruncatableLog`) runs `truncatableLogSuite` as well, and the types let no other run it.
 * A suite takes a `SuiteFactory` (test/compliance/_kit.ts): `setup` makes a fresh, empty
 * storage and returns a harness whose `open` opens the log on it (again after a `close`, as a
 * restarted process would); `teardown` removes the storage once the suite has closed every
 * log it opened.
 */
import { describe, expect, it } from 'vitest';
import { isConflict, isFenced } from '../../ts/storage/errors.js';
import type { LogRecord, LogStorage, TruncatableLog } from '../../ts/storage/types.js';
import { refusal } from '../helpers/refusal.js';
import { eachTest, type SuiteFactory } from './_kit.js';

export interface LogStorageHarness<L extends LogStorage = LogStorage> {
  /** Opens the log of this storage; `segmentBytes` asks for small segments where the implementation has them. */
  open(opts?: { segmentBytes?: number }): Promise<L>;
}

export type LogStorageFactory<L extends LogStorage = LogStorage> = SuiteFactory<LogStorageHarness<L>>;

const enc = new TextEncoder();
const dec = new TextDecoder();
const b = (s: string) => enc.encode(s);
const text = (r: LogRecord) => dec.decode(r.payload);

function id(n: number): Uint8Array {
  const out = new Uint8Array(16);
  out[0] = n;
  out[15] = 0xa5;
  return out;
}

/** The open log of the current test, its `open` and `reopen` (close, then open on the same storage). */
function logs<L extends LogStorage>(factory: LogStorageFactory<L>) {
  let log: L | undefined;
  const harness = eachTest(factory, async () => {
    await log?.close();
    log = undefined;
  });
  const open = async (opts?: { segmentBytes?: number }) => {
    log = await harness().open(opts);
    return log;
  };
  const reopen = async (opts?: { segmentBytes?: number }) => {
    await log?.close();
    return open(opts);
  };
  return { open, reopen };
}

/** The contract every LogStorage keeps: append, read both ways, compare-and-set, fencing, compaction, close. */
export function logStorageSuite(name: string, factory: LogStorageFactory): void {
  describe(`LogStorage compliance: ${name}`, () => {
    const { open, reopen } = logs(factory);

    it('starts empty', async () => {
      const l = await open();
      expect(l.first).toBe(0n);
      expect(l.last).toBe(0n);
      expect(l.highestEpoch).toBe(0n);
      expect(await l.read(1n)).toEqual([]);
      expect(await l.readBackward(10n)).toEqual([]);
    });

    it('appends batches at consecutive positions from 1 and reads them back', async () => {
      const l = await open();
      const a = await l.append([b('a')]);
      expect([a.first, a.last]).toEqual([1n, 1n]);
      expect(a.batchId.length).toBe(16);
      const c = await l.append([b('b'), b('c'), new Uint8Array(0)], { batchId: id(7) });
      expect([c.first, c.last]).toEqual([2n, 4n]);
      expect(c.batchId).toEqual(id(7));
      expect(l.first).toBe(1n);
      expect(l.last).toBe(4n);
      const all = await l.read(1n);
      expect(all.map((r) => r.position)).toEqual([1n, 2n, 3n, 4n]);
      expect(all.map(text)).toEqual(['a', 'b', 'c', '']);
      expect(all[0]?.batchId).toEqual(a.batchId);
      for (const r of all.slice(1)) expect(r.batchId).toEqual(id(7));
      expect(all.every((r) => r.epoch === 0n)).toBe(true);
      expect((await l.read(3n)).map(text)).toEqual(['c', '']);
      expect(await l.read(5n)).toEqual([]);
    });

    it('gives different random batch ids to batches without one', async () => {
      const l = await open();
      const x = await l.append([b('x')]);
      const y = await l.append([b('y')]);
      expect(x.batchId).not.toEqual(y.batchId);
    });

    it('reads backwards, and bounds reads by count and bytes (always at least one record)', async () => {
      const l = await open();
      for (let i = 1; i <= 40; i++) await l.append([b(`r${i}`.padEnd(10, '.'))]);
      const back = await l.readBackward(40n, { maxCount: 5 });
      expect(back.map((r) => r.position)).toEqual([40n, 39n, 38n, 37n, 36n]);
      expect((await l.readBackward(1000n, { maxCount: 2 })).map((r) => r.position)).toEqual([40n, 39n]);
      expect((await l.readBackward(3n)).map((r) => r.position)).toEqual([3n, 2n, 1n]);
      expect((await l.read(10n, { maxCount: 3 })).map((r) => r.position)).toEqual([10n, 11n, 12n]);
      expect((await l.read(10n, { maxBytes: 25 })).map((r) => r.position)).toEqual([10n, 11n]);
      expect((await l.read(10n, { maxBytes: 0 })).map((r) => r.position)).toEqual([10n]);
      expect((await l.readBackward(10n, { maxBytes: 5 })).map((r) => r.position)).toEqual([10n]);
      expect((await l.read(1n)).map((r) => r.position)).toHaveLength(40);
      expect((await l.readBackward(40n)).map((r) => r.position)).toEqual(
        Array.from({ length: 40 }, (_, i) => BigInt(40 - i)),
      );
    });

    it('refuses bad input with stable codes', async () => {
      const l = await open();
      const code = async (p: Promise<unknown>) => (await refusal(p)).code;
      expect(await code(l.append([]))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append('x' as unknown as Uint8Array[]))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append(['x'] as unknown as Uint8Array[]))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append([b('x')], { batchId: new Uint8Array(15) }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append([b('x')], { epoch: -1n }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append([b('x')], { epoch: 1 as unknown as bigint }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append([b('x')], { epoch: 1n << 64n }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.read(0n))).toBe('PLX_STORAGE_BAD_POSITION');
      expect(await code(l.read(-1n))).toBe('PLX_STORAGE_BAD_POSITION');
      expect(await code(l.read(1 as unknown as bigint))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.read(1n, { maxCount: 0 }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.read(1n, { maxBytes: -1 }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.readBackward(0n))).toBe('PLX_STORAGE_BAD_POSITION');
      expect(l.last).toBe(0n);
    });

    it('keeps its own copy of payloads and batch ids', async () => {
      const l = await open();
      const p = b('abc');
      const bid = id(1);
      await l.append([p], { batchId: bid });
      p[0] = 0x7a;
      bid[0] = 99;
      const [r] = await l.read(1n);
      expect(text(r!)).toBe('abc');
      expect(r!.batchId).toEqual(id(1));
      r!.payload[0] = 0x7a;
      expect(text((await l.read(1n))[0]!)).toBe('abc');
    });

    it('gives concurrent appends distinct consecutive positions in call order', async () => {
      const l = await open();
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => l.append(i % 3 === 0 ? [b(`${i}a`), b(`${i}b`)] : [b(`${i}`)])),
      );
      let next = 1n;
      for (const r of results) {
        expect(r.first).toBe(next);
        next = r.last + 1n;
      }
      expect(l.last).toBe(next - 1n);
      const all = await l.read(1n);
      expect(all.map((r) => r.position)).toEqual(Array.from({ length: Number(l.last) }, (_, i) => BigInt(i + 1)));
      expect(all.map(text).slice(0, 4)).toEqual(['0a', '0b', '1', '2']);
    });

    it('compare-and-set on the expected last position', async () => {
      const l = await open();
      await l.append([b('a')], { expectedLast: 0n });
      const e = await refusal(l.append([b('b')], { expectedLast: 0n }));
      expect(e.code).toBe('PLX_STORAGE_CONFLICT');
      expect(isConflict(e)).toBe(true);
      expect(e.details.actual).toBe(1n);
      expect(e.details.expected).toBe(0n);
      // Pipelined: each append's expectation counts the appends called before it.
      const [x, y] = await Promise.all([
        l.append([b('b'), b('c')], { expectedLast: 1n }),
        l.append([b('d')], { expectedLast: 3n }),
      ]);
      expect([x.first, y.first]).toEqual([2n, 4n]);
      expect(l.last).toBe(4n);
      expect((await l.read(1n)).map(text)).toEqual(['a', 'b', 'c', 'd']);
    });

    it('fences appends with a lower epoch, and remembers the highest epoch across reopen', async () => {
      let l = await open();
      await l.append([b('a')], { epoch: 3n });
      await l.append([b('b')], { epoch: 5n });
      expect(l.highestEpoch).toBe(5n);
      const e = await refusal(l.append([b('c')], { epoch: 4n }));
      expect(e.code).toBe('PLX_STORAGE_FENCED');
      expect(isFenced(e)).toBe(true);
      expect(e.details.highestEpoch).toBe(5n);
      await l.append([b('c')], { epoch: 5n });
      await l.append([b('d')]);
      const recs = await l.read(1n);
      expect(recs.map((r) => r.epoch)).toEqual([3n, 5n, 5n, 0n]);
      l = await reopen();
      expect(l.highestEpoch).toBe(5n);
      expect(isFenced(await refusal(l.append([b('x')], { epoch: 4n })))).toBe(true);
      await l.append([b('y')], { epoch: 6n });
      expect(l.highestEpoch).toBe(6n);
      l = await reopen();
      expect(l.highestEpoch).toBe(6n);
      expect((await l.read(1n)).map((r) => r.epoch)).toEqual([3n, 5n, 5n, 0n, 6n]);
    });

    it('rolls over small segments and reads across them, after reopen too', async () => {
      let l = await open({ segmentBytes: 256 });
      const payloads: string[] = [];
      for (let i = 0; i < 120; i++) {
        const batch = Array.from({ length: (i % 4) + 1 }, (_, k) => `p${i}.${k}-${'x'.repeat((i * 7) % 90)}`);
        payloads.push(...batch);
        await l.append(batch.map(b));
      }
      const check = async () => {
        expect(l.last).toBe(BigInt(payloads.length));
        const all = await l.read(1n, { maxBytes: Number.POSITIVE_INFINITY });
        expect(all.map(text)).toEqual(payloads);
        const back = await l.readBackward(l.last, { maxBytes: Number.POSITIVE_INFINITY });
        expect(back.map(text)).toEqual([...payloads].reverse());
        for (const p of [1, 2, 17, 100, payloads.length]) {
          expect(text((await l.read(BigInt(p), { maxCount: 1 }))[0]!)).toBe(payloads[p - 1]);
        }
      };
      await check();
      l = await reopen({ segmentBytes: 256 });
      await check();
      await l.append([b('tail')]);
      payloads.push('tail');
      await check();
    });

    it('compacts records below a position and keeps the rest', async () => {
      let l = await open({ segmentBytes: 256 });
      for (let i = 1; i <= 100; i++) await l.append([b(`${i}`.padEnd(40, '-'))]);
      await l.compactBefore(60n);
      const first = l.first;
      expect(first).toBeGreaterThanOrEqual(1n);
      expect(first).toBeLessThanOrEqual(60n);
      const kept = await l.read(first);
      expect(kept.map((r) => r.position)).toEqual(
        Array.from({ length: Number(100n - first + 1n) }, (_, i) => first + BigInt(i)),
      );
      expect(kept.map((r) => text(r).replace(/-+$/, ''))).toEqual(kept.map((r) => String(r.position)));
      if (first > 1n) {
        expect((await refusal(l.read(first - 1n))).code).toBe('PLX_STORAGE_COMPACTED');
        expect((await refusal(l.readBackward(first - 1n))).code).toBe('PLX_STORAGE_COMPACTED');
      }
      l = await reopen({ segmentBytes: 256 });
      expect(l.first).toBe(first);
      expect(l.last).toBe(100n);
      expect((await l.read(60n, { maxCount: 1 }))[0]?.position).toBe(60n);
      expect((await l.append([b('101')])).first).toBe(101n);
      // Compacting past the end keeps `last`, and appends go on from it.
      await l.compactBefore(1000n);
      expect(l.last).toBe(101n);
      expect((await l.append([b('102')])).first).toBe(102n);
    });

    it('refuses use after close', async () => {
      const l = await open();
      await l.append([b('a')]);
      await l.close();
      expect((await refusal(l.append([b('b')]))).code).toBe('PLX_STORAGE_CLOSED');
      expect((await refusal(l.read(1n))).code).toBe('PLX_STORAGE_CLOSED');
      await l.close();
      const again = await open();
      expect(again.last).toBe(1n);
    });

    it('keeps large records and empty ones', async () => {
      let l = await open({ segmentBytes: 1024 });
      const big = new Uint8Array(100_000).map((_, i) => (i * 31) & 0xff);
      await l.append([new Uint8Array(0), big, b('after')]);
      l = await reopen({ segmentBytes: 1024 });
      const recs = await l.read(1n);
      expect(recs.map((r) => r.payload.length)).toEqual([0, 100_000, 5]);
      expect(Buffer.from(recs[1]!.payload).equals(Buffer.from(big))).toBe(true);
    });
  });
}

/** The truncation capability (`TruncatableLog.truncateAfter`), with everything it touches. */
export function truncatableLogSuite(name: string, factory: LogStorageFactory<TruncatableLog>): void {
  describe(`TruncatableLog compliance: ${name}`, () => {
    const { open, reopen } = logs(factory);

    it('refuses bad input, bad truncation positions included, with stable codes', async () => {
      const l = await open();
      const code = async (p: Promise<unknown>) => (await refusal(p)).code;
      expect(await code(l.append([]))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append('x' as unknown as Uint8Array[]))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append(['x'] as unknown as Uint8Array[]))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append([b('x')], { batchId: new Uint8Array(15) }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append([b('x')], { epoch: -1n }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append([b('x')], { epoch: 1 as unknown as bigint }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.append([b('x')], { epoch: 1n << 64n }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.read(0n))).toBe('PLX_STORAGE_BAD_POSITION');
      expect(await code(l.read(-1n))).toBe('PLX_STORAGE_BAD_POSITION');
      expect(await code(l.read(1 as unknown as bigint))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.read(1n, { maxCount: 0 }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.read(1n, { maxBytes: -1 }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await code(l.readBackward(0n))).toBe('PLX_STORAGE_BAD_POSITION');
      expect(await code(l.truncateAfter(-1n))).toBe('PLX_STORAGE_BAD_POSITION');
      expect(await code(l.truncateAfter(1n << 60n))).toBe('PLX_STORAGE_BAD_POSITION');
      expect(l.last).toBe(0n);
    });

    it('remembers the highest epoch across reopen and across truncation of the records that carried it', async () => {
      let l = await open();
      await l.append([b('a')], { epoch: 3n });
      await l.append([b('b')], { epoch: 5n });
      expect(l.highestEpoch).toBe(5n);
      const e = await refusal(l.append([b('c')], { epoch: 4n }));
      expect(e.code).toBe('PLX_STORAGE_FENCED');
      expect(isFenced(e)).toBe(true);
      expect(e.details.highestEpoch).toBe(5n);
      await l.append([b('c')], { epoch: 5n });
      await l.append([b('d')]);
      const recs = await l.read(1n);
      expect(recs.map((r) => r.epoch)).toEqual([3n, 5n, 5n, 0n]);
      l = await reopen();
      expect(l.highestEpoch).toBe(5n);
      expect(isFenced(await refusal(l.append([b('x')], { epoch: 4n })))).toBe(true);
      // Removing every record of epoch 5 does not lower the highest epoch.
      await l.truncateAfter(1n);
      expect(l.highestEpoch).toBe(5n);
      l = await reopen();
      expect(l.highestEpoch).toBe(5n);
      expect(isFenced(await refusal(l.append([b('x')], { epoch: 4n })))).toBe(true);
      await l.append([b('y')], { epoch: 6n });
      expect(l.highestEpoch).toBe(6n);
      l = await reopen();
      expect(l.highestEpoch).toBe(6n);
      expect((await l.read(1n)).map(text)).toEqual(['a', 'y']);
    });

    it('truncates after a position, durably, also inside a batch', async () => {
      let l = await open();
      await l.append([b('1'), b('2'), b('3')], { batchId: id(1) });
      await l.append([b('4'), b('5')], { batchId: id(2) });
      await l.truncateAfter(10n); // past the end: nothing changes
      expect(l.last).toBe(5n);
      await l.truncateAfter(2n); // inside the first batch
      expect(l.last).toBe(2n);
      expect((await l.read(1n)).map(text)).toEqual(['1', '2']);
      expect(await l.read(3n)).toEqual([]);
      l = await reopen();
      expect(l.last).toBe(2n);
      expect((await l.read(1n)).map(text)).toEqual(['1', '2']);
      const r = await l.append([b('x')], { expectedLast: 2n });
      expect(r.first).toBe(3n);
      l = await reopen();
      expect((await l.read(1n)).map(text)).toEqual(['1', '2', 'x']);
      await l.truncateAfter(0n);
      expect([l.first, l.last]).toEqual([0n, 0n]);
      l = await reopen();
      expect([l.first, l.last]).toEqual([0n, 0n]);
      expect((await l.append([b('again')])).first).toBe(1n);
    });

    it('orders truncation with appends called around it', async () => {
      const l = await open();
      await l.append([b('a'), b('b'), b('c')]);
      const before = l.append([b('d')]);
      const cut = l.truncateAfter(2n);
      const after = l.append([b('e')], { expectedLast: 2n });
      await Promise.all([before, cut]);
      expect((await after).first).toBe(3n);
      expect((await l.read(1n)).map(text)).toEqual(['a', 'b', 'e']);
    });

    it('truncates across small segments, after reopen too', async () => {
      let l = await open({ segmentBytes: 256 });
      const payloads: string[] = [];
      for (let i = 0; i < 120; i++) {
        const batch = Array.from({ length: (i % 4) + 1 }, (_, k) => `p${i}.${k}-${'x'.repeat((i * 7) % 90)}`);
        payloads.push(...batch);
        await l.append(batch.map(b));
      }
      const check = async () => {
        expect(l.last).toBe(BigInt(payloads.length));
        const all = await l.read(1n, { maxBytes: Number.POSITIVE_INFINITY });
        expect(all.map(text)).toEqual(payloads);
        const back = await l.readBackward(l.last, { maxBytes: Number.POSITIVE_INFINITY });
        expect(back.map(text)).toEqual([...payloads].reverse());
        for (const p of [1, 2, 17, 100, payloads.length]) {
          expect(text((await l.read(BigInt(p), { maxCount: 1 }))[0]!)).toBe(payloads[p - 1]);
        }
      };
      await check();
      l = await reopen({ segmentBytes: 256 });
      await check();
      await l.truncateAfter(123n);
      payloads.length = 123;
      await check();
      l = await reopen({ segmentBytes: 256 });
      await check();
      await l.append([b('tail')]);
      payloads.push('tail');
      await check();
    });

    it('compacts records below a position, and refuses truncation below it', async () => {
      let l = await open({ segmentBytes: 256 });
      for (let i = 1; i <= 100; i++) await l.append([b(`${i}`.padEnd(40, '-'))]);
      await l.compactBefore(60n);
      const first = l.first;
      expect(first).toBeGreaterThanOrEqual(1n);
      expect(first).toBeLessThanOrEqual(60n);
      const kept = await l.read(first);
      expect(kept.map((r) => r.position)).toEqual(
        Array.from({ length: Number(100n - first + 1n) }, (_, i) => first + BigInt(i)),
      );
      expect(kept.map((r) => text(r).replace(/-+$/, ''))).toEqual(kept.map((r) => String(r.position)));
      if (first > 1n) {
        expect((await refusal(l.read(first - 1n))).code).toBe('PLX_STORAGE_COMPACTED');
        expect((await refusal(l.readBackward(first - 1n))).code).toBe('PLX_STORAGE_COMPACTED');
        expect((await refusal(l.truncateAfter(first - 2n))).code).toBe('PLX_STORAGE_COMPACTED');
      }
      l = await reopen({ segmentBytes: 256 });
      expect(l.first).toBe(first);
      expect(l.last).toBe(100n);
      expect((await l.read(60n, { maxCount: 1 }))[0]?.position).toBe(60n);
      expect((await l.append([b('101')])).first).toBe(101n);
      // Compacting past the end keeps `last`, and appends go on from it.
      await l.compactBefore(1000n);
      expect(l.last).toBe(101n);
      expect((await l.append([b('102')])).first).toBe(102n);
    });

    it('truncates down to the compaction point, leaving no record but keeping the next position', async () => {
      let l = await open({ segmentBytes: 256 });
      for (let i = 1; i <= 60; i++) await l.append([b(`${i}`.padEnd(40, '-'))]);
      await l.compactBefore(40n);
      const first = l.first;
      expect(first).toBeGreaterThan(0n);
      await l.truncateAfter(first - 1n);
      expect(l.first).toBe(0n);
      expect(l.last).toBe(first - 1n);
      expect(await l.read(first)).toEqual([]);
      l = await reopen({ segmentBytes: 256 });
      expect(l.last).toBe(first - 1n);
      expect((await l.append([b('next')])).first).toBe(first);
    });

    it('refuses use after close, truncation included', async () => {
      const l = await open();
      await l.append([b('a')]);
      await l.close();
      expect((await refusal(l.append([b('b')]))).code).toBe('PLX_STORAGE_CLOSED');
      expect((await refusal(l.read(1n))).code).toBe('PLX_STORAGE_CLOSED');
      expect((await refusal(l.truncateAfter(0n))).code).toBe('PLX_STORAGE_CLOSED');
      await l.close();
      const again = await open();
      expect(again.last).toBe(1n);
    });
  });
}
