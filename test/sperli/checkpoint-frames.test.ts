/**
 * The checkpoint frames as a peer may get them wrong: refused CKPT_BEGIN (version, size,
 * epoch), chunks out of order, frames a step does not take, a COMMIT that does not list
 * a rank's file. Frames are rewritten in flight by the test transport of
 * test/helpers/comm-memory.ts, which records every ABORT.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FrameType } from '../../ts/codec/sperli-frame.js';
import {
  CkptDataKind,
  decodeCkptData,
  encodeCkptBegin,
  encodeCkptData,
  encodeResume,
  ResumeStatus,
} from '../../ts/codec/sperli-payloads.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { CompositeSig } from '../../ts/crypto/index.js';
import type { Checkpointable } from '../../ts/sperli/checkpoint.js';
import { Comm } from '../../ts/sperli/comm.js';
import { signCommit } from '../../ts/sperli/tokens.js';
import type { TransportFrame } from '../../ts/sperli/transport.js';
import { MemoryJob, type Tap } from '../helpers/comm-memory.js';

const root = mkdtempSync(join(tmpdir(), 'plexus-ckpt-frames-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const keys = CompositeSig.keygen();
const jobId = Uint8Array.from({ length: 16 }, (_, i) => 200 - i);
let n = 0;

const bytes: Checkpointable<Uint8Array> = { encode: (b) => b, decode: (b) => b.slice() };

/** A job of `size` on the test transport with `tap`; every rank checkpoints `state(rank)`. */
async function checkpointWith(size: number, tap: Tap, state = (r: number) => new Uint8Array([r, 1, 2, 3])) {
  const job = new MemoryJob(size);
  const dir = join(root, `job-${++n}`);
  const comms = job.transports.map(
    (t, r) =>
      new Comm(t, {
        checkpoint: { dir, jobId, publicKey: keys.publicKey, secretKey: r === 0 ? keys.secretKey : null },
      }),
  );
  job.tap = tap;
  const settled = await Promise.allSettled(comms.map((c) => c.checkpoint(state(c.rank), bytes)));
  const out = settled.map((s) => {
    if (s.status === 'fulfilled') return 'ok';
    const e = s.reason;
    return isPlexusError(e) ? `${e.code}:${String(e.details.rule ?? e.details.reason)}` : String(e);
  });
  return { job, out };
}

/** Rewrites the frames of `type` from `from` to `to`. */
function rewrite(
  type: number,
  from: number,
  to: number,
  f: (frame: TransportFrame) => TransportFrame | TransportFrame[],
) {
  const tap: Tap = (a, b, frame) => (frame.type === type && a === from && b === to ? f(frame) : frame);
  return tap;
}

describe('CKPT_BEGIN is refused (H1610 ckpt-begin, ABORT reason 2)', () => {
  it.each([
    ['version', (f: TransportFrame) => ({ ...f, payload: Uint8Array.of(2, 0, 0, 0, 3, 0, 0, 0) })],
    ['size', (f: TransportFrame) => ({ ...f, payload: encodeCkptBegin(4) })],
    ['epoch', (f: TransportFrame) => ({ ...f, epoch: 7n })],
  ])('with another %s', async (rule, change) => {
    const { job, out } = await checkpointWith(3, rewrite(FrameType.CKPT_BEGIN, 0, 1, change));
    expect(out[1]).toBe(`H1610:${rule}`);
    expect(out[0]).toBe('H1612:aborted');
    expect(job.aborts[0]).toEqual({ rank: 1, reason: 2, code: 'H1610' });
  });
});

describe('CKPT_DATA and the order of frames', () => {
  it('a chunk out of order is refused (H1610 ckpt-data order)', async () => {
    const big = (r: number) => new Uint8Array(1_500_000).fill(r + 1);
    let dropped = false;
    const tap = rewrite(FrameType.CKPT_DATA, 0, 1, (f) => {
      if (dropped) return f;
      dropped = true;
      return [];
    });
    const { job, out } = await checkpointWith(2, tap, big);
    expect(out[1]).toBe('H1610:order');
    expect(job.aborts[0]).toMatchObject({ rank: 1, reason: 2 });
  });

  it('a chunk about another rank is refused (H1610 ckpt-data rank)', async () => {
    const tap = rewrite(FrameType.CKPT_DATA, 1, 2, (f) => {
      const d = decodeCkptData(f.payload);
      return { ...f, payload: encodeCkptData({ ...d, rank: 0 }) };
    });
    const { out } = await checkpointWith(3, tap);
    expect(out[2]).toBe('H1610:rank');
  });

  it('a frame the step does not take is refused (H1610 ckpt-order)', async () => {
    const tap = rewrite(FrameType.CKPT_BEGIN, 0, 2, (f) => [
      f,
      { ...f, type: FrameType.RESUME, payload: encodeResume(ResumeStatus.offer) },
    ]);
    const { job, out } = await checkpointWith(3, tap);
    expect(out[2]).toBe('H1610:ckpt-order');
    expect(job.aborts[0]).toMatchObject({ rank: 2, reason: 2 });
  });

  it('a CKPT_DATA kind that a checkpoint never sends is refused', async () => {
    const tap = rewrite(FrameType.CKPT_DATA, 0, 1, (f) => ({
      ...f,
      payload: encodeCkptData({ kind: CkptDataKind.noCopy, rank: 0, offset: 0n, total: 0n, chunk: new Uint8Array(0) }),
    }));
    const { out } = await checkpointWith(2, tap);
    expect(out[1]).toBe('H1610:ckpt-order');
  });
});

describe('the COMMIT as each rank checks it (ABORT reason 5)', () => {
  it('a COMMIT that does not list a rank file as written fails that rank with H1620', async () => {
    const tap = rewrite(FrameType.CKPT_ACK, 2, 0, (f) => ({ ...f, payload: new Uint8Array(32).fill(9) }));
    const { job, out } = await checkpointWith(3, tap);
    expect(out[2]).toBe('H1620:commit-entry');
    expect(job.aborts).toContainEqual({ rank: 2, reason: 5, code: 'H1620' });
  });

  it('a buddy copy that does not match the COMMIT fails its keeper with H1620', async () => {
    const tap = rewrite(FrameType.CKPT_DATA, 0, 1, (f) => {
      const d = decodeCkptData(f.payload);
      const chunk = Uint8Array.from(d.chunk);
      chunk[chunk.length - 1] = (chunk[chunk.length - 1] as number) ^ 1;
      return { ...f, payload: encodeCkptData({ ...d, chunk }) };
    });
    const { out } = await checkpointWith(2, tap);
    expect(out[1]).toBe('H1620:buddy-copy');
  });

  it('a COMMIT signed by another key is refused with H1621 by the rank that gets it', async () => {
    const forger = CompositeSig.keygen();
    const tap = rewrite(FrameType.CKPT_COMMIT, 0, 1, (f) => ({
      ...f,
      payload: signCommit(forger.secretKey, {
        jobId,
        epoch: f.epoch,
        hashes: [new Uint8Array(32), new Uint8Array(32)],
      }),
    }));
    const { job, out } = await checkpointWith(2, tap);
    expect(out[1]).toBe('H1621:signature');
    expect(job.aborts).toContainEqual({ rank: 1, reason: 5, code: 'H1621' });
  });
});
