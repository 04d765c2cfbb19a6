/**
 * Property test: random sequences of appends (with and without compare-and-set and epochs),
 * truncations, compactions, reads and reopens, run against FileLog (tiny segments, so
 * rollovers and compaction happen all the time) and MemoryLog, each checked after every
 * step against a deliberately simple model: an array of records and a highest epoch.
 *
 * Each property runs with a fixed seed, so every run checks the same cases. Locally,
 * PLEXUS_FUZZ_SEED=random runs them with fresh random seeds (a failure reports its seed
 * and path), and PLEXUS_FUZZ_SEED=<integer> with that seed.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { openLog } from '../../ts/storage/file-log.js';
import { MemoryLog, MemoryLogState } from '../../ts/storage/memory-log.js';
import type { TruncatableLog as LogStorage } from '../../ts/storage/types.js';

const FUZZ_SEED = process.env.PLEXUS_FUZZ_SEED;

/** The seed option of fc.assert: `fixed`, unless PLEXUS_FUZZ_SEED says otherwise. */
function seedOption(fixed: number): { seed?: number } {
  if (FUZZ_SEED === undefined || FUZZ_SEED === '') return { seed: fixed };
  if (FUZZ_SEED === 'random') return {};
  const n = Number(FUZZ_SEED);
  if (!Number.isSafeInteger(n)) throw new Error(`PLEXUS_FUZZ_SEED must be 'random' or an integer, got '${FUZZ_SEED}'`);
  return { seed: n | 0 };
}

type Command =
  | {
      readonly t: 'append';
      readonly payloads: Uint8Array[];
      /** The epoch relative to the highest so far (`down` is fenced once that is above 0). */
      readonly epoch: 'none' | 'same' | 'up' | 'down';
      readonly cas: 'none' | 'right' | 'wrong';
    }
  | { readonly t: 'truncate'; readonly back: number }
  | { readonly t: 'compact'; readonly at: number }
  | { readonly t: 'read'; readonly at: number; readonly maxCount: number; readonly backward: boolean }
  | { readonly t: 'reopen' };

/** A number from 0 to `max`, spread evenly (fc.double leans to the ends of its range). */
const fraction = (max: number) => fc.integer({ min: 0, max: 1000 }).map((n) => (n / 1000) * max);

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      t: fc.constant('append' as const),
      payloads: fc.array(fc.uint8Array({ maxLength: 70 }), { minLength: 1, maxLength: 4 }),
      epoch: fc.constantFrom('none' as const, 'none' as const, 'same' as const, 'up' as const, 'down' as const),
      cas: fc.constantFrom('none' as const, 'none' as const, 'right' as const, 'wrong' as const),
    }),
  },
  {
    // Remove the last `back` records (-1: a position past the end; 1000: everything).
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('truncate' as const),
      back: fc.oneof({ weight: 8, arbitrary: fc.integer({ min: -1, max: 8 }) }, fc.constant(1000)),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('compact' as const), at: fraction(1.2) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('read' as const),
      at: fraction(1.1),
      maxCount: fc.integer({ min: 1, max: 8 }),
      backward: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ t: 'reopen' as const }) },
);

interface Model {
  /** Position of records[0]; last + 1 when there are none. */
  start: number;
  records: { payload: Uint8Array; epoch: bigint }[];
  highestEpoch: bigint;
}

const lastOf = (m: Model) => m.start + m.records.length - 1;

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    if (isPlexusError(e)) return e.code;
    throw e;
  }
}

async function agree(log: LogStorage, m: Model): Promise<void> {
  expect(log.last).toBe(BigInt(lastOf(m)));
  expect(log.first).toBe(m.records.length > 0 ? BigInt(m.start) : 0n);
  expect(log.highestEpoch).toBe(m.highestEpoch);
  if (m.records.length > 0) {
    const all = await log.read(BigInt(m.start), { maxBytes: Number.POSITIVE_INFINITY });
    expect(all.map((r) => [Number(r.position), Buffer.from(r.payload).toString('hex'), r.epoch])).toEqual(
      m.records.map((r, i) => [m.start + i, Buffer.from(r.payload).toString('hex'), r.epoch]),
    );
  }
}

/** What the runs exercised, so a generator that stops producing a case is noticed. */
const seen = { compacted: 0, rolledBack: 0, reopened: 0 };

async function run(commands: Command[], open: () => Promise<LogStorage>): Promise<void> {
  const m: Model = { start: 1, records: [], highestEpoch: 0n };
  let log = await open();
  try {
    for (const c of commands) {
      const last = lastOf(m);
      switch (c.t) {
        case 'append': {
          const expectedLast = c.cas === 'none' ? undefined : BigInt(c.cas === 'right' ? last : last + 7);
          const h = m.highestEpoch;
          const epoch =
            c.epoch === 'none' ? undefined : c.epoch === 'same' ? h : c.epoch === 'up' ? h + 1n : h > 0n ? h - 1n : 0n;
          const p = log.append(c.payloads, {
            ...(epoch === undefined ? {} : { epoch }),
            ...(expectedLast === undefined ? {} : { expectedLast }),
          });
          if (epoch !== undefined && epoch < h) {
            expect(await codeOf(p)).toBe('PLX_STORAGE_FENCED');
          } else if (c.cas === 'wrong') {
            expect(await codeOf(p)).toBe('PLX_STORAGE_CONFLICT');
          } else {
            const r = await p;
            expect([r.first, r.last]).toEqual([BigInt(last + 1), BigInt(last + c.payloads.length)]);
            for (const payload of c.payloads) m.records.push({ payload, epoch: epoch ?? 0n });
            if (epoch !== undefined && epoch > h) m.highestEpoch = epoch;
          }
          break;
        }
        case 'truncate': {
          const p = Math.max(m.start - 1, last - c.back);
          await log.truncateAfter(BigInt(p));
          if (p < last) {
            m.records.length = p - m.start + 1;
            seen.rolledBack++;
          }
          break;
        }
        case 'compact': {
          const p = m.start + Math.floor(c.at * (last - m.start + 2));
          await log.compactBefore(BigInt(p));
          // The implementation may keep records below p (FileLog drops whole segments only).
          const start = log.first === 0n ? Number(log.last) + 1 : Number(log.first);
          expect(start).toBeGreaterThanOrEqual(m.start);
          expect(start).toBeLessThanOrEqual(Math.max(p, m.start));
          if (start > m.start) seen.compacted++;
          m.records.splice(0, start - m.start);
          m.start = start;
          break;
        }
        case 'read': {
          if (m.records.length === 0) break;
          const from = m.start + Math.floor(c.at * m.records.length);
          const got = c.backward
            ? await log.readBackward(BigInt(from), { maxCount: c.maxCount })
            : await log.read(BigInt(from), { maxCount: c.maxCount });
          const want: number[] = [];
          if (c.backward) {
            for (let q = Math.min(from, last); q >= m.start && want.length < c.maxCount; q--) want.push(q);
          } else {
            for (let q = from; q <= last && want.length < c.maxCount; q++) want.push(q);
          }
          expect(got.map((r) => Number(r.position))).toEqual(want);
          for (const r of got) {
            expect(Buffer.from(r.payload).equals(Buffer.from(m.records[Number(r.position) - m.start]!.payload))).toBe(
              true,
            );
          }
          break;
        }
        case 'reopen':
          await log.close();
          log = await open();
          seen.reopened++;
          break;
      }
      await agree(log, m);
    }
  } finally {
    await log.close();
  }
}

/** Command builders for the regressions below (empty payloads, no epoch). */
const empties = (n: number): Uint8Array[] => Array.from({ length: n }, () => new Uint8Array(0));
const append = (n: number, cas: 'none' | 'wrong' = 'none'): Command => ({
  t: 'append',
  payloads: empties(n),
  epoch: 'none',
  cas,
});
const truncate = (back: number): Command => ({ t: 'truncate', back });
const readFirst: Command = { t: 'read', at: 0, maxCount: 1, backward: false };
const reopen: Command = { t: 'reopen' };

/** FileLog as the property below opens it, in a fresh directory. */
async function runFileLog(cmds: Command[], indexEvery: number): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-model-'));
  try {
    await run(cmds, () => openLog(dir, { segmentBytes: 300, indexEvery, logger: { warn: () => {} } }));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('regressions found by the model (FileLog, tiny segments)', () => {
  it('a closed segment ends inside a batch: a batch cut by truncateAfter stays sealed after later truncations', async () => {
    // Found with seed -346346904. The first truncation cuts the batch 1..4 at 3; the appends
    // after it close the segment holding 3; the second truncation returns to 3, at the start
    // of the next segment, so 3 ends a closed segment beside an empty one.
    await runFileLog(
      [
        append(4),
        append(3),
        append(2),
        append(2),
        append(1, 'wrong'),
        truncate(8),
        readFirst,
        readFirst,
        reopen,
        append(1, 'wrong'),
        append(3),
        append(4),
        truncate(7),
        reopen,
      ],
      1,
    );
  });
});

const SEED_FILE_LOG = 0x5eed_f11e;
const SEED_MEMORY_LOG = 0x5eed_3e30;

describe('the log against an array model', () => {
  it('FileLog, tiny segments, fsync batch', async () => {
    const before = { ...seen };
    await fc.assert(
      fc.asyncProperty(
        fc.array(command, { minLength: 10, maxLength: 50, size: 'max' }),
        fc.integer({ min: 1, max: 4 }),
        runFileLog,
      ),
      { numRuns: 60, ...seedOption(SEED_FILE_LOG) },
    );
    expect(seen.compacted - before.compacted).toBeGreaterThan(20);
    expect(seen.rolledBack - before.rolledBack).toBeGreaterThan(20);
    expect(seen.reopened - before.reopened).toBeGreaterThan(20);
  });

  it('MemoryLog', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 10, maxLength: 80, size: 'max' }), async (cmds) => {
        const state = new MemoryLogState();
        await run(cmds, async () => new MemoryLog(state));
      }),
      { numRuns: 200, ...seedOption(SEED_MEMORY_LOG) },
    );
  });
});
