/**
 * appendFramed: a batch laid out by its writer in one buffer (a 48-byte gap before each
 * payload) is stored as the very bytes `append` stores for the same payloads, on real files,
 * with the same positions, compare-and-set, fencing and refusals; MemoryLog agrees.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { openLog } from '../../ts/storage/file-log.js';
import { RECORD_HEADER_BYTES } from '../../ts/storage/format.js';
import { MemoryLog } from '../../ts/storage/memory-log.js';
import type { FramedBatch, LogStorage } from '../../ts/storage/types.js';

const quiet = { warn: () => {} };
const SEG = '00000000000000000001.seg';
const seed = process.env.PLEXUS_FUZZ_SEED;
const fuzz = seed === 'random' ? {} : { seed: seed === undefined ? 20_261_130 : Number(seed) };

/** The payloads laid out as appendFramed takes them, the gaps filled with garbage. */
function lay(payloads: readonly Uint8Array[]): FramedBatch {
  const total = payloads.reduce((n, p) => n + RECORD_HEADER_BYTES + p.length, 0);
  const bytes = new Uint8Array(total).fill(0x5a);
  let off = 0;
  for (const p of payloads) {
    bytes.set(p, off + RECORD_HEADER_BYTES);
    off += RECORD_HEADER_BYTES + p.length;
  }
  return { bytes, lengths: payloads.map((p) => p.length) };
}

const id = (n: number) => new Uint8Array(16).fill(n);

async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    return isPlexusError(e) ? e.code : `not a PlexusError: ${String(e)}`;
  }
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'plexus-framed-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('appendFramed', () => {
  it('stores the same bytes as append, for any batches (FileLog, real files)', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(fc.uint8Array({ maxLength: 200 }), { minLength: 1, maxLength: 8 }), {
          minLength: 1,
          maxLength: 5,
        }),
        fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
        async (batches, epoch) => {
          run++;
          const a = await openLog(join(dir, `a${run}`), { fsync: 'never', logger: quiet });
          const b = await openLog(join(dir, `b${run}`), { fsync: 'never', logger: quiet });
          for (const [i, ps] of batches.entries()) {
            const opts = { batchId: id(i), epoch };
            const ra = await a.append(ps, opts);
            const rb = await b.appendFramed(lay(ps), opts);
            expect(rb).toEqual(ra);
          }
          expect(b.last).toBe(a.last);
          expect(await b.read(1n)).toEqual(await a.read(1n));
          await a.close();
          await b.close();
          const fa = await readFile(join(dir, `a${run}`, SEG));
          const fb = await readFile(join(dir, `b${run}`, SEG));
          expect(fb.equals(fa)).toBe(true);
        },
      ),
      { ...fuzz, numRuns: 25 },
    );
  });

  it('survives reopen, mixes with append and runs in call order with group commit', async () => {
    const log = await openLog(dir, { logger: quiet });
    const p = (n: number) => new Uint8Array(10).fill(n);
    const results = await Promise.all([
      log.appendFramed(lay([p(1), p(2)])),
      log.append([p(3)]),
      log.appendFramed({ ...lay([p(4)]), lengths: Uint32Array.of(10) }, { expectedLast: 3n }),
    ]);
    expect(results.map((r) => [r.first, r.last])).toEqual([
      [1n, 2n],
      [3n, 3n],
      [4n, 4n],
    ]);
    await log.close();
    const again = await openLog(dir, { logger: quiet });
    expect((await again.read(1n)).map((r) => r.payload[0])).toEqual([1, 2, 3, 4]);
    await again.close();
  });

  for (const [name, make] of [
    ['FileLog', () => openLog(dir, { fsync: 'never', logger: quiet })],
    ['MemoryLog', async () => new MemoryLog()],
  ] as const) {
    it(`${name}: refuses what append refuses, and a layout that does not add up`, async () => {
      const log: LogStorage = await make();
      const ok = lay([new Uint8Array(3)]);
      expect(await codeOf(log.appendFramed!(ok, { expectedLast: 5n }))).toBe('PLX_STORAGE_CONFLICT');
      await log.appendFramed!(ok, { epoch: 7n });
      expect(await codeOf(log.appendFramed!(lay([new Uint8Array(1)]), { epoch: 6n }))).toBe('PLX_STORAGE_FENCED');
      const bad: unknown[] = [
        null,
        { bytes: 'x', lengths: [0] },
        { bytes: new Uint8Array(48), lengths: [] },
        { bytes: new Uint8Array(48), lengths: [1] },
        { bytes: new Uint8Array(49), lengths: [0] },
        { bytes: new Uint8Array(48), lengths: [-1] },
        { bytes: new Uint8Array(48), lengths: [0.5] },
        { bytes: new Uint8Array(48), lengths: '0' },
      ];
      for (const b of bad) {
        expect(await codeOf(log.appendFramed!(b as FramedBatch))).toBe('PLX_STORAGE_BAD_INPUT');
      }
      expect(await codeOf(log.appendFramed!(ok, { batchId: new Uint8Array(3) }))).toBe('PLX_STORAGE_BAD_INPUT');
      expect(await codeOf(log.appendFramed!({ bytes: new Uint8Array(48), lengths: [64 * 1024 * 1024 + 1] }))).toBe(
        'PLX_STORAGE_TOO_LARGE',
      );
      // Nothing refused took a position.
      expect(log.last).toBe(1n);
      const [r] = await log.read(1n);
      expect(r?.epoch).toBe(7n);
      expect(r?.payload).toEqual(new Uint8Array(3));
      await log.close();
    });
  }

  it('MemoryLog reads back what it was given', async () => {
    const log = new MemoryLog();
    const ps = [Uint8Array.of(1, 2), new Uint8Array(0), Uint8Array.of(9)];
    const r = await log.appendFramed(lay(ps), { batchId: id(3) });
    expect(r.first).toBe(1n);
    expect(r.last).toBe(3n);
    expect((await log.read(1n)).map((x) => Array.from(x.payload))).toEqual([[1, 2], [], [9]]);
  });
});
