/**
 * Crash safety of truncateAfter and compactBefore, step by step: the change is stopped
 * before each of its file-system steps in turn (the meta file replaced, a segment or index
 * file removed, the kept segment cut), leaving the files as a crash there would, and the
 * log must then open holding a prefix of what it held, intact, with every record up to the
 * truncation point (no acknowledged record lost) and nothing that was not there before.
 * After that it must take appends and open again.
 *
 * The steps are counted through `replaceFile` and `unlinkIfExists` of ts/storage/files.ts
 * (mocked) and FileHandle.truncate (spied on); a stopped step throws EIO. A stopped process
 * leaves the same files whatever the fsync mode (fsyncs matter only for a power loss), so
 * the logs here run with `fsync: 'never'`, which takes the same steps, only faster.
 */
import { mkdtemp, open as openFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type FileLog, openLog } from '../../ts/storage/file-log.js';
import { rng } from '../helpers/rng.js';

const stops = vi.hoisted(() => ({
  /** Steps allowed before the stop; Infinity when disarmed. */
  allowed: Number.POSITIVE_INFINITY,
  taken: 0,
  stopped: false,
  step(what: string): void {
    if (this.taken++ >= this.allowed) {
      this.stopped = true;
      throw Object.assign(new Error(`stopped before ${what}`), { code: 'EIO' });
    }
  },
}));

vi.mock('../../ts/storage/files.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../ts/storage/files.js')>();
  return {
    ...real,
    replaceFile: async (dir: string, name: string, bytes: Uint8Array, sync: boolean) => {
      stops.step(`replacing ${name}`);
      return real.replaceFile(dir, name, bytes, sync);
    },
    unlinkIfExists: async (path: string) => {
      stops.step(`removing ${path}`);
      return real.unlinkIfExists(path);
    },
  };
});

let work = '';
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'plexus-change-crash-'));
  const fh = await openFile(join(work, 'probe'), 'w');
  const proto = Object.getPrototypeOf(fh) as { truncate(len?: number): Promise<void> };
  await fh.close();
  const truncate = proto.truncate;
  vi.spyOn(proto, 'truncate').mockImplementation(async function (this: unknown, len?: number) {
    stops.step('cutting a segment file');
    return truncate.call(this, len);
  });
});
afterAll(async () => {
  vi.restoreAllMocks();
  await rm(work, { recursive: true, force: true });
});

const SEGMENT_BYTES = 300;
const options = (indexEvery: number) =>
  ({ segmentBytes: SEGMENT_BYTES, indexEvery, fsync: 'never', logger: { warn: () => {} } }) as const;

type Step = { readonly append: number } | { readonly truncateBack: number } | { readonly compactAt: number };

/** A log shape: tiny segments, batches cut by earlier truncations, some compacted away. */
function shape(seed: number): Step[] {
  const next = rng(seed);
  const steps: Step[] = [];
  for (let i = 0; i < 14; i++) {
    const r = next() % 10;
    if (r < 6) steps.push({ append: 1 + (next() % 4) });
    else if (r < 9) steps.push({ truncateBack: 1 + (next() % 3) });
    else steps.push({ compactAt: (next() % 100) / 100 });
  }
  return steps;
}

interface Held {
  readonly position: number;
  readonly payload: string;
}

async function contents(log: FileLog): Promise<Held[]> {
  if (log.first === 0n) return [];
  const records = await log.read(log.first, { maxBytes: Number.POSITIVE_INFINITY });
  return records.map((r) => ({ position: Number(r.position), payload: Buffer.from(r.payload).toString('hex') }));
}

let fill = 0;
const batch = (n: number) => Array.from({ length: n }, (_, i) => new Uint8Array((fill + i) % 23).fill(fill++ & 0xff));

async function build(dir: string, steps: readonly Step[], indexEvery: number): Promise<FileLog> {
  fill = 0;
  const log = await openLog(dir, options(indexEvery));
  for (const s of steps) {
    if ('append' in s) await log.append(batch(s.append));
    else if ('truncateBack' in s) {
      const p = Number(log.last) - s.truncateBack;
      if (p >= Number(log.first) - 1 && log.first > 0n) await log.truncateAfter(BigInt(p));
    } else {
      const first = Number(log.first);
      if (first > 0) await log.compactBefore(BigInt(first + Math.floor(s.compactAt * Number(log.last - log.first))));
    }
  }
  return log;
}

type Change = { readonly truncateAfter: number } | { readonly compactBefore: number };

/**
 * Builds the shape, runs `change` stopped after `allowed` steps, opens the log again and
 * checks it; true when the change ran to its end without being stopped.
 */
async function crashAt(steps: readonly Step[], indexEvery: number, change: Change, allowed: number): Promise<boolean> {
  const dir = await mkdtemp(join(work, 'log-'));
  try {
    const before = await (async () => {
      const log = await build(dir, steps, indexEvery);
      const held = await contents(log);
      const last = Number(log.last);
      stops.allowed = allowed;
      stops.taken = 0;
      stops.stopped = false;
      try {
        if ('truncateAfter' in change) await log.truncateAfter(BigInt(change.truncateAfter));
        else await log.compactBefore(BigInt(change.compactBefore));
      } catch (e) {
        if (!stops.stopped) throw e;
      } finally {
        stops.allowed = Number.POSITIVE_INFINITY;
      }
      await log.close();
      return { held, last };
    })();
    const what = `${JSON.stringify(change)} stopped after ${allowed} steps`;
    const log = await openLog(dir, options(indexEvery));
    try {
      const held = await contents(log);
      const last = Number(log.last);
      // A prefix of what was there, down to the truncation point at most.
      const low = 'truncateAfter' in change ? change.truncateAfter : before.last;
      expect(last, what).toBeGreaterThanOrEqual(low);
      expect(last, what).toBeLessThanOrEqual(before.last);
      const firstHeld = held[0]?.position ?? last + 1;
      expect(held, what).toEqual(before.held.filter((r) => r.position >= firstHeld && r.position <= last));
      if (!stops.stopped && 'truncateAfter' in change) expect(last, what).toBe(change.truncateAfter);
      await log.append(batch(2));
      await log.append(batch(1));
    } finally {
      await log.close();
    }
    const again = await openLog(dir, options(indexEvery));
    await again.close();
    return !stops.stopped;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function everyStop(steps: readonly Step[], indexEvery: number, change: Change): Promise<number> {
  for (let allowed = 0; allowed < 100; allowed++) {
    if (await crashAt(steps, indexEvery, change, allowed)) return allowed;
  }
  throw new Error(`${JSON.stringify(change)} did not finish in 100 steps`);
}

describe('a change stopped before each of its file-system steps', () => {
  it('truncateAfter over segments that end in batches cut by earlier truncations', async () => {
    // Segments [1..3 (3 sealed)] [4..6] [7..10]: a stop after the later segments are removed
    // leaves 3, sealed by an earlier truncation, as the last record.
    const steps: Step[] = [
      { append: 4 },
      { append: 3 },
      { append: 2 },
      { append: 2 },
      { truncateBack: 8 },
      { append: 3 },
      { append: 4 },
    ];
    let stopsSeen = 0;
    for (let p = 0; p < 10; p++) stopsSeen += await everyStop(steps, 1, { truncateAfter: p });
    expect(stopsSeen).toBeGreaterThan(20);
  });

  it('truncateAfter and compactBefore on seeded log shapes', async () => {
    let changes = 0;
    for (let seed = 1; seed <= 8; seed++) {
      const steps = shape(seed);
      const dir = await mkdtemp(join(work, 'shape-'));
      const log = await build(dir, steps, 1 + (seed % 3));
      const first = Number(log.first);
      const last = Number(log.last);
      await log.close();
      await rm(dir, { recursive: true, force: true });
      if (first === 0) continue;
      for (let p = Math.max(first - 1, last - 6); p < last; p++) {
        await everyStop(steps, 1 + (seed % 3), { truncateAfter: p });
        changes++;
      }
      await everyStop(steps, 1 + (seed % 3), { compactBefore: last });
      changes++;
    }
    expect(changes).toBeGreaterThan(30);
  });
});
