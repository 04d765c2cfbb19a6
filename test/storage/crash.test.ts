/**
 * Crash safety with real processes: a child appends concurrently with fsync 'batch' and
 * prints every acknowledged batch; it is killed with SIGKILL at a seeded random moment.
 * After each kill the log must open, hold every acknowledged batch intact at the
 * positions it was given, in order, and hold every other batch whole or not at all.
 * Each seed runs two rounds on the same directory, so recovery is also followed by more
 * appends and another crash.
 *
 * The child runs the storage module of the build in dist/ (`npm run build` first).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLog } from '../../ts/storage/file-log.js';
import { verifyLog } from '../../ts/storage/verify.js';
import { ROOT } from '../helpers/paths.js';
import { distFile, startNode, stopStarted } from '../helpers/processes.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';

const SEEDS = 20;
const WRITER = join(ROOT, 'test/fixtures/storage/crash-writer.mjs');

let moduleUrl = '';
let work = '';

beforeAll(async () => {
  moduleUrl = pathToFileURL(distFile('storage/index.js')).href;
  work = await mkdtemp(join(tmpdir(), 'plexus-crash-'));
});

afterAll(async () => {
  await stopStarted();
  if (work) await rm(work, { recursive: true, force: true });
});

interface Ack {
  readonly writer: number;
  readonly seq: number;
  readonly first: number;
  readonly last: number;
}

/** The kill comes at a seeded random moment of the appends: this wait is the crash point, the fault itself. */
const crashPoint = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Runs the writer until `killAfterMs` past its start, kills it with SIGKILL, returns what it acknowledged. */
async function crashRun(
  dir: string,
  seed: number,
  killAfterMs: number,
  segmentBytes: number,
): Promise<{ acks: Ack[]; readyLast: number }> {
  const child = startNode(WRITER, [moduleUrl, dir, String(seed), '8', String(segmentBytes)]);
  // Start the clock once the log is open, so every run appends for a while.
  await until(() => child.stdout().includes('\n') || !child.running(), {
    timeoutMs: 10_000,
    what: 'the writer to open the log',
  });
  await crashPoint(killAfterMs);
  await child.stop('SIGKILL');
  const { signal } = await child.ended;
  const out = child.stdout();
  const err = child.stderr();
  expect(signal, `writer failed before the kill: ${err}`).toBe('SIGKILL');
  const lines = out.split('\n');
  const ready = /^ready (\d+)$/.exec(lines[0] ?? '');
  expect(ready, `writer output: ${out.slice(0, 200)} ${err}`).not.toBeNull();
  const acks: Ack[] = [];
  for (const line of lines.slice(1)) {
    const m = /^ack (\d+) (\d+) (\d+) (\d+)$/.exec(line);
    if (m) acks.push({ writer: Number(m[1]), seq: Number(m[2]), first: Number(m[3]), last: Number(m[4]) });
  }
  return { acks, readyLast: Number(ready![1]) };
}

/** The payload the writer makes for record `index` of batch `seq` of `writer` (crash-writer.mjs). */
function expectedPayload(writer: number, seq: number, index: number, count: number): Buffer {
  const x = (writer * 7919 + seq * 104_729 + index * 1_299_709) >>> 0;
  const len = 16 + (x % 8 === 0 ? x % 40_000 : x % 3000);
  const b = Buffer.alloc(len);
  b.writeUInt32LE(writer, 0);
  b.writeUInt32LE(seq, 4);
  b.writeUInt32LE(index, 8);
  b.writeUInt32LE(count, 12);
  let y = x;
  for (let i = 16; i < len; i++) {
    y = (Math.imul(y, 1_103_515_245) + 12_345) >>> 0;
    b[i] = y >>> 24;
  }
  return b;
}

/** Opens the log after a crash and checks it against every acknowledgement so far. */
async function check(
  dir: string,
  acked: Map<number, Ack>,
  segmentBytes: number,
): Promise<{ last: number; repairs: number }> {
  const report = await verifyLog(dir);
  expect(report.problems.filter((p) => p.severity === 'fatal')).toEqual([]);
  const warnings: string[] = [];
  const log = await openLog(dir, { segmentBytes, logger: { warn: (m) => warnings.push(m) } });
  try {
    for (const w of warnings) expect(w).toMatch(/torn-tail|incomplete-batch|torn-segment-header/);
    const records = await log.read(1n, { maxBytes: Number.POSITIVE_INFINITY });
    expect(records.length).toBe(Number(log.last));
    // Plain checks collected into one list: tens of thousands of records per run.
    const wrong: string[] = [];
    const batchAt = new Map<number, Ack>();
    const lastSeqOf = new Map<number, number>();
    for (let i = 0; i < records.length && wrong.length < 10; ) {
      const r = records[i]!;
      const p = Buffer.from(r.payload);
      const writer = p.readUInt32LE(0);
      const seq = p.readUInt32LE(4);
      const count = p.readUInt32LE(12);
      // A batch present is whole: `count` records, indexes in order, one batch id, intact bytes.
      if (i + count > records.length)
        wrong.push(`batch ${seq} at ${i + 1} has ${records.length - i} of ${count} records`);
      for (let k = 0; k < count && i + k < records.length; k++) {
        const rec = records[i + k]!;
        if (rec.position !== BigInt(i + k + 1)) wrong.push(`record ${i + k + 1} has position ${rec.position}`);
        if (!Buffer.from(rec.batchId).equals(Buffer.from(r.batchId))) wrong.push(`record ${i + k + 1}: batch id`);
        if (!Buffer.from(rec.payload).equals(expectedPayload(writer, seq, k, count))) {
          wrong.push(`record ${i + k + 1}: payload is not record ${k} of batch ${seq}`);
        }
      }
      // Each writer's batches appear in the order it appended them.
      if (seq <= (lastSeqOf.get(writer) ?? 0)) wrong.push(`batch ${seq} of writer ${writer} out of order`);
      lastSeqOf.set(writer, seq);
      batchAt.set(seq, { writer, seq, first: i + 1, last: i + count });
      i += count;
    }
    for (const a of acked.values()) {
      const b = batchAt.get(a.seq);
      if (!b || b.writer !== a.writer || b.first !== a.first || b.last !== a.last) {
        wrong.push(
          `acknowledged batch ${a.seq} (${a.first}..${a.last}) is ${b ? `at ${b.first}..${b.last}` : 'missing'}`,
        );
      }
    }
    expect(wrong).toEqual([]);
    return { last: Number(log.last), repairs: warnings.length };
  } finally {
    await log.close();
  }
}

describe('crash safety with SIGKILL', () => {
  it(`keeps every acknowledged batch and no partial batch (${SEEDS} seeds, two crashes each)`, async () => {
    let totalAcks = 0;
    let repairs = 0;
    let unrepaired = 0;
    const runSeed = async (seed: number) => {
      const next = rng(seed * 7_777);
      const dir = join(work, `seed-${seed}`);
      // Small segments for some seeds, so kills also land around rollovers.
      const segmentBytes = seed % 2 === 0 ? 64 * 1024 : 1024 * 1024;
      const acked = new Map<number, Ack>();
      for (let round = 0; round < 2; round++) {
        const { acks, readyLast } = await crashRun(dir, seed * 10 + round, 30 + (next() % 200), segmentBytes);
        for (const a of acks) acked.set(a.seq, a);
        totalAcks += acks.length;
        const after = await check(dir, acked, segmentBytes);
        expect(after.last).toBeGreaterThanOrEqual(readyLast);
        repairs += after.repairs;
        if (!(await verifyLog(dir)).ok) unrepaired++;
      }
    };
    // Two seeds at a time: one child appends while the other seed's log is checked.
    for (let seed = 1; seed <= SEEDS; seed += 2) await Promise.all([runSeed(seed), runSeed(seed + 1)]);
    // The runs did real work: many acknowledged batches across all seeds.
    expect(totalAcks).toBeGreaterThan(SEEDS * 20);
    expect(unrepaired).toBe(0);
    console.info(`crash runs: ${SEEDS * 2} kills, ${totalAcks} acknowledged batches, ${repairs} tails repaired`);
  }, 60_000);
});
