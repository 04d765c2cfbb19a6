/**
 * A resume that fetches a rank file from the buddy (docs/sperli-checkpoints.md, "Resume",
 * step 3): the file goes to the disk piece by piece as it arrives, through a piece writer
 * for the rank file's path, and takes its name only once it has passed every check; a
 * file changed on its way never takes its place, and a chunk out of order is refused.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FrameType } from '../../ts/codec/sperli-frame.js';
import { CkptDataKind, decodeCkptData, encodeCkptData } from '../../ts/codec/sperli-payloads.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { CompositeSig } from '../../ts/crypto/index.js';
import { type Checkpointable, type CheckpointStore, fileStore } from '../../ts/sperli/checkpoint.js';
import { Comm } from '../../ts/sperli/comm.js';
import { createMemoryTransports } from '../../ts/sperli/memory-transport.js';
import type { RankTransport } from '../../ts/sperli/transport.js';
import { MemoryJob, type Tap } from '../helpers/comm-memory.js';

const root = mkdtempSync(join(tmpdir(), 'plexus-ckpt-fetch-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const keys = CompositeSig.keygen();
let n = 0;

const bytes: Checkpointable<Uint8Array> = { encode: (b) => b, decode: (b) => b.slice() };

/** A state of `length` bytes that differs by rank and step. */
function stateOf(rank: number, step: number, length = 3 * 1048576 + 5): Uint8Array {
  const b = new Uint8Array(length);
  for (let i = 0; i < b.length; i += 101) b[i] = (i + rank * 13 + step * 7) & 255;
  return b;
}

/** One job: a directory per rank and its id; `comms` gives the communicators of an incarnation. */
class Job {
  readonly jobId = Uint8Array.from({ length: 16 }, (_, i) => (i * 17 + ++n) & 255);
  readonly hex = Buffer.from(this.jobId).toString('hex');
  readonly base = join(root, `job-${n}`);

  comms(transports: readonly RankTransport[], store?: (rank: number) => CheckpointStore | undefined): Comm[] {
    return transports.map((t, r) => {
      const s = store?.(r);
      return new Comm(t, {
        checkpoint: {
          dir: join(this.base, `host-${r}`),
          jobId: this.jobId,
          publicKey: keys.publicKey,
          secretKey: r === 0 ? keys.secretKey : null,
          ...(s ? { store: s } : {}),
        },
      });
    });
  }

  epochDir(rank: number, epoch: number): string {
    return join(this.base, `host-${rank}`, this.hex, String(epoch));
  }

  rankFile(rank: number, epoch: number): string {
    return join(this.epochDir(rank, epoch), `rank-${rank}.ckpt`);
  }

  temporaries(rank: number, epoch: number): string[] {
    return readdirSync(this.epochDir(rank, epoch)).filter((f) => f.endsWith('.tmp'));
  }
}

const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.length).equals(b);

describe('a rank file fetched from the buddy', () => {
  it('goes to the disk piece by piece as it comes off the connection, and back in place once whole', async () => {
    const job = new Job();
    // Reads of at most 16 KiB into one buffer per rank, overwritten after each read, as the mesh reads.
    const first = job.comms(createMemoryTransports(2, { jobId: job.jobId, incarnation: 1, readBuffer: 16384 }));
    await Promise.all(first.map(async (c) => c.checkpoint(stateOf(c.rank, 1), bytes)));
    await Promise.all(first.map((c) => c.finalize()));
    const good = readFileSync(job.rankFile(1, 1));
    unlinkSync(job.rankFile(1, 1));

    const pieces: number[] = [];
    const begun: string[] = [];
    // Each piece is overwritten as soon as the writer's copy returns, as the next read would.
    const scribbling: CheckpointStore = {
      ...fileStore,
      begin: async (path) => {
        begun.push(path);
        const w = await fileStore.begin(path);
        return {
          write: (b) => w.write(b),
          copy: (b) => {
            (w.copy as NonNullable<typeof w.copy>)(b);
            pieces.push(b.length);
            b.fill(0x5a);
          },
          commit: () => w.commit(),
          discard: () => w.discard(),
        };
      },
    };
    const second = job.comms(createMemoryTransports(2, { jobId: job.jobId, incarnation: 2, readBuffer: 16384 }), (r) =>
      r === 1 ? scribbling : undefined,
    );
    const back = await Promise.all(second.map((c) => c.resume(bytes)));
    await Promise.all(second.map((c) => c.finalize()));
    expect(back.map((b, r) => same(b as Uint8Array, stateOf(r, 1)))).toEqual([true, true]);
    expect(begun).toEqual([job.rankFile(1, 1)]);
    // The whole file (80-byte header and state), in pieces no larger than one read.
    expect(pieces.reduce((a, b) => a + b, 0)).toBe(good.length);
    expect(Math.max(...pieces)).toBeLessThanOrEqual(16384);
    expect(pieces.length).toBeGreaterThan(3 * 64);
    expect(readFileSync(job.rankFile(1, 1)).equals(good)).toBe(true);
    expect(job.temporaries(1, 1)).toEqual([]);
  });

  /** Checkpoints epochs 1 and 2 on the test transport, removes rank 1's file of epoch 2, resumes with `tap`. */
  async function resumeWith(tap: Tap) {
    const job = new Job();
    const one = new MemoryJob(2);
    const first = job.comms(one.transports);
    await Promise.all(
      first.map(async (c) => {
        await c.checkpoint(stateOf(c.rank, 1), bytes);
        await c.checkpoint(stateOf(c.rank, 2), bytes);
      }),
    );
    await Promise.all(first.map((c) => c.finalize()));
    unlinkSync(job.rankFile(1, 2));
    const two = new MemoryJob(2);
    two.tap = tap;
    const second = job.comms(two.transports);
    const settled = await Promise.allSettled(second.map((c) => c.resume(bytes)));
    await Promise.allSettled(second.map((c) => c.finalize()));
    return { job, jobOf: two, settled };
  }

  /** Rewrites the kind 2 chunks (answers to a fetch) from rank 0 to rank 1. */
  const answers =
    (f: (payload: Uint8Array, index: number) => Uint8Array | null): Tap =>
    (from, to, frame) => {
      if (frame.type !== FrameType.CKPT_DATA || from !== 0 || to !== 1) return frame;
      if (decodeCkptData(frame.payload).kind !== CkptDataKind.answerChunk) return frame;
      const out = f(frame.payload, seen++);
      return out === null ? [] : { ...frame, payload: out };
    };
  let seen = 0;

  it('changed on its way does not take its place; the resume falls back to the previous epoch', async () => {
    seen = 0;
    const { job, settled } = await resumeWith(
      answers((payload, i) => {
        if (i !== 1) return payload;
        const d = decodeCkptData(payload);
        const chunk = Uint8Array.from(d.chunk);
        chunk[1000] = (chunk[1000] as number) ^ 0xff;
        return encodeCkptData({ ...d, chunk });
      }),
    );
    expect(seen).toBeGreaterThanOrEqual(4);
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled']);
    const states = settled.map((s) => (s as PromiseFulfilledResult<unknown>).value as Uint8Array);
    expect(states.map((b, r) => same(b, stateOf(r, 1)))).toEqual([true, true]);
    expect(existsSync(job.rankFile(1, 2))).toBe(false);
    expect(job.temporaries(1, 2)).toEqual([]);
  });

  it('with a chunk out of order is refused (H1610 ckpt-data order, ABORT reason 2), leaving no temporary file', async () => {
    seen = 0;
    const { job, jobOf, settled } = await resumeWith(answers((payload, i) => (i === 1 ? null : payload)));
    const codes = settled.map((s) =>
      s.status === 'fulfilled' ? 'ok' : isPlexusError(s.reason) ? `${s.reason.code}:${s.reason.details.rule}` : 'other',
    );
    expect(codes[1]).toBe('H1610:order');
    expect(jobOf.aborts[0]).toMatchObject({ rank: 1, reason: 2, code: 'H1610' });
    expect(existsSync(job.rankFile(1, 2))).toBe(false);
    expect(job.temporaries(1, 2)).toEqual([]);
  });
});
