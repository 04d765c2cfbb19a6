/**
 * Crash safety with a real server process: `plexus chronacta serve` runs in a child,
 * eight clients append concurrently through gRPC (exact expected versions, an idempotency
 * key per append), and the child is killed with SIGKILL at a seeded moment. After a
 * restart every acknowledged append must be there with the positions and versions it was
 * given, in order; every append present must be whole; positions and versions must have
 * no gap; and retrying the appends that were in flight at the kill with their keys must
 * either return their first result (they were written) or write them now (they were not).
 * Two kills per seed on the same directory; for some seeds the server compacts every few
 * milliseconds, so kills also land in the middle of compactions.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import type { AppendResult, RecordedEvent } from '../../ts/chronacta/types.js';
import { rng } from '../helpers/rng.js';
import { compileForChild, type ServingChild, serveChild, tempDir } from './helpers.js';

const SEEDS = [11, 22, 33, 44, 55];
const WRITERS = 8;

let compiled: { commandUrl: string; remove: () => Promise<void> };
let tmp: { dir: string; remove: () => Promise<void> };

beforeAll(async () => {
  compiled = await compileForChild();
  tmp = await tempDir('crash');
});
afterAll(async () => {
  await compiled?.remove();
  await tmp?.remove();
});

interface Batch {
  readonly key: string;
  readonly stream: string;
  readonly events: { type: string; data: string }[];
}

function batchOf(writer: number, seq: number, count: number): Batch {
  return {
    key: `w${writer}-s${seq}`,
    stream: `writer-${writer}`,
    events: Array.from({ length: count }, (_, i) => ({
      type: 'crash-test',
      data: JSON.stringify({ w: writer, seq, i, n: count, pad: 'p'.repeat((seq * 37 + i * 11) % 300) }),
    })),
  };
}

/** Small segments and frequent compactions for even seeds, so kills also land during compactions. */
async function start(dir: string, seed: number): Promise<ServingChild> {
  const small = seed % 2 === 0;
  return serveChild(compiled.commandUrl, [
    ...['--data', dir, '--port', '0', '--metrics-port', '0'],
    ...(small ? ['--segment-bytes', '32768', '--compact-every-ms', '25'] : ['--segment-bytes', '1048576']),
  ]);
}

/** Appends from WRITERS loops until the server dies; returns what was acknowledged and what was in flight. */
async function load(
  address: string,
  next: () => number,
  seqBase: number,
  versions: number[],
): Promise<{
  acked: Map<string, { batch: Batch; result: AppendResult }>;
  inFlight: Batch[];
  stop: () => void;
  done: Promise<void>;
}> {
  const client = new ChronactaClient(address, { deadlineMs: 5000 });
  const acked = new Map<string, { batch: Batch; result: AppendResult }>();
  const inFlight: Batch[] = [];
  let stopped = false;
  const loops = Array.from({ length: WRITERS }, async (_, w) => {
    for (let k = 0; !stopped; k++) {
      const batch = batchOf(w, seqBase + k, 1 + (next() % 4));
      inFlight[w] = batch;
      try {
        const result = await client.append(batch.stream, batch.events, {
          expectedVersion: versions[w]! < 0 ? 'no_stream' : BigInt(versions[w]!),
          idempotencyKey: batch.key,
        });
        acked.set(batch.key, { batch, result });
        versions[w] = Number(result.lastVersion);
        inFlight[w] = undefined as unknown as Batch;
      } catch (e) {
        // The server died under the append: it stays in flight (written or not).
        if ((e as { code?: string }).code === 'PLX_CHRONACTA_WRONG_EXPECTED_VERSION') throw e;
        return;
      }
    }
  });
  const done = Promise.all(loops).then(() => client.close());
  return {
    acked,
    inFlight,
    stop: () => {
      stopped = true;
    },
    done,
  };
}

async function readEverything(client: ChronactaClient): Promise<RecordedEvent[]> {
  const all: RecordedEvent[] = [];
  let from = 1n;
  for (;;) {
    const r = await client.readAll({ fromPosition: from, maxCount: 10_000 });
    all.push(...r.events);
    if (r.end) return all;
    from = r.nextPosition;
  }
}

/** Checks the restarted store against every acknowledgement; returns each stream's last version. */
async function check(
  client: ChronactaClient,
  acked: Map<string, { batch: Batch; result: AppendResult }>,
): Promise<number[]> {
  const all = await readEverything(client);
  const wrong: string[] = [];
  // Gap-free positions (nothing is deleted in this test).
  all.forEach((e, i) => {
    if (e.position !== BigInt(i + 1)) wrong.push(`event ${i} has position ${e.position}`);
  });
  // Every batch present is whole, and each stream's versions run 0, 1, 2, ...
  const lastVersion = new Array<number>(WRITERS).fill(-1);
  for (let i = 0; i < all.length && wrong.length < 10; ) {
    const head = JSON.parse(Buffer.from(all[i]!.data).toString()) as { w: number; seq: number; i: number; n: number };
    for (let k = 0; k < head.n; k++) {
      const e = all[i + k];
      const d = e ? (JSON.parse(Buffer.from(e.data).toString()) as typeof head) : undefined;
      if (!e || !d || d.seq !== head.seq || d.i !== k || e.batchId !== all[i]!.batchId) {
        wrong.push(`batch w${head.w}-s${head.seq} at ${all[i]!.position} is not whole`);
        break;
      }
      if (Number(e.version) !== lastVersion[head.w]! + 1)
        wrong.push(`writer ${head.w}: version ${e.version} out of order`);
      lastVersion[head.w] = Number(e.version);
    }
    i += head.n;
  }
  const byPosition = new Map(all.map((e) => [e.position, e]));
  for (const { batch, result } of acked.values()) {
    for (let k = 0; k < batch.events.length; k++) {
      const e = byPosition.get(result.firstPosition + BigInt(k));
      if (
        !e ||
        e.stream !== batch.stream ||
        e.version !== result.firstVersion + BigInt(k) ||
        Buffer.from(e.data).toString() !== batch.events[k]!.data ||
        e.batchId !== result.batchId
      ) {
        wrong.push(
          `acknowledged ${batch.key} event ${k} at ${result.firstPosition + BigInt(k)} is missing or different`,
        );
      }
    }
  }
  expect(wrong).toEqual([]);
  return lastVersion;
}

/**
 * How long the load runs before the SIGKILL: a seeded random moment of the load is the fault
 * itself (the kill lands mid-append), not a wait for something to happen.
 */
const killPoint = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('crash safety with SIGKILL through the server', () => {
  it(`keeps every acknowledged append, whole and in order (${SEEDS.length} seeds, two kills each)`, async () => {
    let totalAcked = 0;
    let retriedWritten = 0;
    let retriedNew = 0;
    for (const seed of SEEDS) {
      const next = rng(seed * 7919);
      const dir = join(tmp.dir, `seed-${seed}`);
      const acked = new Map<string, { batch: Batch; result: AppendResult }>();
      let versions = new Array<number>(WRITERS).fill(-1);
      for (let round = 0; round < 2; round++) {
        const server = await start(dir, seed);
        const run = await load(server.address, next, round * 1_000_000, versions);
        await killPoint(80 + (next() % 400));
        server.child.kill('SIGKILL');
        const { signal } = await server.exited;
        expect(signal, server.stderr()).toBe('SIGKILL');
        run.stop();
        await run.done;
        for (const [k, v] of run.acked) acked.set(k, v);
        totalAcked += run.acked.size;

        const again = await start(dir, seed);
        const client = new ChronactaClient(again.address);
        try {
          versions = await check(client, acked);
          // The appends in flight at the kill: a retry with the key settles each one.
          for (const b of run.inFlight.filter(Boolean)) {
            const r = await client.append(b.stream, b.events, { idempotencyKey: b.key });
            if (r.duplicate) retriedWritten++;
            else retriedNew++;
            acked.set(b.key, { batch: b, result: r });
          }
          versions = await check(client, acked);
        } finally {
          client.close();
          again.child.kill('SIGTERM');
          expect((await again.exited).code).toBe(0);
        }
      }
    }
    expect(totalAcked).toBeGreaterThan(SEEDS.length * 20);
    console.info(
      `chronacta crash runs: ${SEEDS.length * 2} kills, ${totalAcked} acknowledged appends, in flight at the kill: ${retriedWritten} had been written, ${retriedNew} had not`,
    );
  }, 60_000);
});
