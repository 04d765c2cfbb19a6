/**
 * Catch-up streams on the simulator (ts/sim/replication/streams.ts), one stream at a time: the
 * real catch-up source (`CatchUpServer`) and client (`fetchRecords`) over a simulated stream on
 * a ManualClock, with a cut halfway, a partition and a crashed source. The whole-cluster runs
 * (replicated-log-simulation.test.ts) put the same streams under every fault at once.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { CatchUpServer, type CatchUpSocket, fetchRecords } from '../../ts/replication/snapshot.js';
import { SimStreamNetwork } from '../../ts/sim/replication/streams.js';
import { SimRandom } from '../../ts/sim/rng.js';
import { MemoryLog } from '../../ts/storage/memory-log.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

interface Setup {
  clock: ManualClock;
  net: SimStreamNetwork;
  source: MemoryLog;
  dest: MemoryLog;
  reachable: { yes: boolean };
  client: ReturnType<SimStreamNetwork['join']>;
}

async function setup(records: number, cutRate = 0): Promise<Setup> {
  const clock = new ManualClock();
  const reachable = { yes: true };
  const net = new SimStreamNetwork(clock, new SimRandom(7), () => reachable.yes, { minDelay: 1, maxDelay: 8, cutRate });
  const source = new MemoryLog();
  // Batches of three records, each batch one id and epoch.
  for (let i = 0; i < records; i += 3) {
    const n = Math.min(3, records - i);
    const batchId = new Uint8Array(16).fill(i + 1);
    await source.append(
      Array.from({ length: n }, (_, k) => enc.encode(`record-${i + k + 1}`)),
      { batchId, epoch: 1n },
    );
  }
  const server = new CatchUpServer(source, 64, undefined, undefined, clock);
  net.join(2, (from, s) => server.serve(from, s));
  const client = net.join(1, undefined);
  return { clock, net, source, dest: new MemoryLog(), reachable, client };
}

/** Runs the clock, one event and one turn of promises at a time, until `p` settles. */
async function settle<T>(clock: ManualClock, p: Promise<T>, limitMs = 60_000): Promise<T> {
  let done = false;
  p.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  while (!done) {
    const next = clock.nextDue();
    if (next === undefined || next > limitMs) break;
    clock.advanceTo(Math.max(clock.now(), next));
    await new Promise<void>((r) => setImmediate(r));
  }
  await new Promise<void>((r) => setImmediate(r));
  expect(done, 'the catch-up settled on simulated time').toBe(true);
  return p;
}

async function values(log: MemoryLog): Promise<string[]> {
  if (log.last === 0n) return [];
  const recs = await log.read(log.first, { maxCount: Number(log.last), maxBytes: 1 << 30 });
  return recs.map((r) => `${r.position}:${dec.decode(r.payload)}:${r.batchId[0]}`);
}

function fetch(s: Setup, socket: CatchUpSocket, to: number, onChunk?: () => void) {
  return fetchRecords(socket, {
    local: s.dest,
    to,
    chunkBytes: 64,
    timeoutMs: 200,
    timers: s.clock,
    ...(onChunk ? { onChunk } : {}),
  });
}

describe('catch-up streams on the simulator', () => {
  it('carry every record, in chunks, with its position, batch id and epoch', async () => {
    const s = await setup(40);
    const socket = await settle(s.clock, s.net.open(s.client, 2, 200));
    let chunks = 0;
    const got = await settle(
      s.clock,
      fetch(s, socket, 40, () => chunks++),
    );
    expect(got).toBe(40);
    expect(chunks).toBeGreaterThan(3);
    expect(await values(s.dest)).toEqual(await values(s.source));
    expect(s.net.stats.opened).toBe(1);
  });

  it('cut halfway: the client fails, keeps what it appended and resumes on a new stream', async () => {
    const s = await setup(40);
    const first = await settle(s.clock, s.net.open(s.client, 2, 200));
    let chunks = 0;
    const cut = fetch(s, first, 40, () => {
      if (++chunks === 2) s.net.cutOf(1);
    });
    const err = await settle(s.clock, cut).catch((e: unknown) => e);
    // As a TCP reset does: an error on the socket, then its close.
    expect(err instanceof Error && err.message).toBe('the connection was reset');
    const kept = s.dest.last;
    expect(kept).toBeGreaterThan(0n);
    expect(kept).toBeLessThan(40n);
    expect(s.net.stats.cut).toBe(1);
    const second = await settle(s.clock, s.net.open(s.client, 2, 200));
    const rest = await settle(s.clock, fetch(s, second, 40));
    expect(rest).toBe(40 - Number(kept));
    expect(await values(s.dest)).toEqual(await values(s.source));
  });

  it('a partition stalls the stream until the reader gives up; after it heals a new one finishes', async () => {
    const s = await setup(30);
    const socket = await settle(s.clock, s.net.open(s.client, 2, 200));
    let chunks = 0;
    const stalled = fetch(s, socket, 30, () => {
      if (++chunks === 1) s.reachable.yes = false;
    });
    const started = s.clock.now();
    const err = await settle(s.clock, stalled).catch((e: unknown) => e);
    expect(isPlexusError(err) && err.details.reason).toBe('timeout');
    expect(s.clock.now() - started).toBeGreaterThanOrEqual(200);
    // Cut off, a stream cannot be opened either: the handshake times out.
    const refused = await settle(s.clock, s.net.open(s.client, 2, 150)).catch((e: unknown) => e);
    expect(isPlexusError(refused) && refused.details.reason).toBe('timeout');
    s.reachable.yes = true;
    const again = await settle(s.clock, s.net.open(s.client, 2, 200));
    await settle(s.clock, fetch(s, again, 30));
    expect(await values(s.dest)).toEqual(await values(s.source));
  });

  it('a crashed source falls silent: the client sees the stream close, and nobody answers a new one', async () => {
    const s = await setup(40);
    const socket = await settle(s.clock, s.net.open(s.client, 2, 200));
    let chunks = 0;
    const p = fetch(s, socket, 40, () => {
      if (++chunks === 1) s.net.crash(2);
    });
    const err = await settle(s.clock, p).catch((e: unknown) => e);
    expect(isPlexusError(err) && err.code).toBe('PLX_RAFT_TRANSPORT_UNREACHABLE');
    expect(s.dest.last).toBeLessThan(40n);
    const refused = await settle(s.clock, s.net.open(s.client, 2, 200)).catch((e: unknown) => e);
    expect(isPlexusError(refused) && refused.details.reason).toBe('refused');
    expect(s.net.stats.refused).toBe(1);
  });
});
