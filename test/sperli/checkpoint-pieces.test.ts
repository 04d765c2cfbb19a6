/**
 * CKPT_DATA frames whose payload arrives piece by piece (ts/codec/sperli-mesh-stream.ts) at the
 * checkpoint frame router (ts/sperli/checkpoint-frames.ts): a frame of a key taken in
 * pieces is handed on at its 24-byte header, decoded and checked as a whole payload would
 * be; any other frame is gathered whole first, byte for byte.
 */
import { describe, expect, it } from 'vitest';
import { FrameType } from '../../ts/codec/sperli-frame.js';
import {
  ChunkReceiver,
  CKPT_DATA_HEADER_SIZE,
  CkptDataKind,
  encodeCkptData,
  MAX_CHUNK,
} from '../../ts/codec/sperli-payloads.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { type CheckpointLink, FrameRouter, frameKey } from '../../ts/sperli/checkpoint-frames.js';
import { IncomingFrame } from '../../ts/sperli/comm-stream.js';
import type { TransportFrame } from '../../ts/sperli/transport.js';

const OWN = frameKey(FrameType.CKPT_DATA, CkptDataKind.ownChunk);
const ANSWER = frameKey(FrameType.CKPT_DATA, CkptDataKind.answerChunk);

/** The frames of rank 1, handed out in order by `next` (the rest of CheckpointLink is not used). */
function linkOf(frames: TransportFrame[]): CheckpointLink {
  const unused = () => {
    throw new Error('not used by the router');
  };
  return {
    rank: 0,
    size: 2,
    openRequests: () => 0,
    stopped: () => undefined,
    allreduceSum: unused,
    barrier: unused,
    send: unused,
    next: async () => frames.shift() as TransportFrame,
    abort: unused,
  };
}

/** A streamed CKPT_DATA frame of `payload`: its bytes pushed in pieces of `step` once `feed` runs. */
function streamed(payload: Uint8Array, step: number): { frame: TransportFrame; feed: () => void } {
  const incoming = new IncomingFrame(payload.length, CKPT_DATA_HEADER_SIZE);
  const frame: TransportFrame = { type: FrameType.CKPT_DATA, tag: 0, epoch: 1n, payload: new Uint8Array(0), incoming };
  const feed = () => {
    const piece = new Uint8Array(step);
    for (let at = 0; at < payload.length; at += step) {
      const n = Math.min(step, payload.length - at);
      // One buffer used again for every piece, as a connection's read buffer is.
      piece.set(payload.subarray(at, at + n));
      incoming.push(piece.subarray(0, n), true);
      piece.fill(0xcc);
    }
    incoming.end();
  };
  return { frame, feed };
}

const chunkOf = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + seed) & 255);

describe('streamed CKPT_DATA at the checkpoint frame router', () => {
  it('a chunk of a key taken in pieces comes at its header; its pieces drain byte for byte with offsets', async () => {
    const chunk = chunkOf(300_000, 1);
    const payload = encodeCkptData({ kind: 0, rank: 1, offset: 0n, total: 500_000n, chunk });
    const { frame, feed } = streamed(payload, 16_384);
    const router = new FrameRouter(linkOf([frame]), () => new Set([OWN]), new Set([OWN]));
    const taking = router.take(1, OWN);
    feed();
    const f = await taking;
    expect(f.incoming).toBe(frame.incoming);
    expect(f.data).toMatchObject({ kind: 0, rank: 1, offset: 0n, total: 500_000n });
    expect(f.data?.chunk.length).toBe(chunk.length);
    const rx = new ChunkReceiver();
    expect(rx.accept(f.data as NonNullable<typeof f.data>)).toBe(false);
    expect(rx.received).toBe(300_000n);
    const got = new Uint8Array(chunk.length);
    const offsets: number[] = [];
    await f.incoming?.drain((at, bytes) => {
      offsets.push(at);
      got.set(bytes, at);
    });
    expect(Buffer.from(got).equals(Buffer.from(chunk))).toBe(true);
    expect(offsets[0]).toBe(0);
    // The next chunk at a wrong offset is refused as a whole one would be.
    const wrong = { kind: 0, rank: 1, offset: 1n, total: 500_000n, chunk: new Uint8Array(200_000) };
    expect(() => rx.accept(wrong)).toThrow(/order|offset/);
  });

  it('a chunk of another key is gathered whole, byte for byte, and its frame has no pieces left', async () => {
    const chunk = chunkOf(MAX_CHUNK, 2);
    const payload = encodeCkptData({ kind: 2, rank: 0, offset: 0n, total: BigInt(MAX_CHUNK), chunk });
    const { frame, feed } = streamed(payload, 16_384);
    const router = new FrameRouter(linkOf([frame]), () => new Set([ANSWER]), new Set([OWN]));
    const taking = router.take(1, ANSWER);
    feed();
    const f = await taking;
    expect(f.incoming).toBeUndefined();
    expect(f.data?.kind).toBe(2);
    expect(Buffer.from(f.data?.chunk as Uint8Array).equals(Buffer.from(chunk))).toBe(true);
  });

  it.each([
    ['chunk-size', { offset: 0n, total: BigInt(2 * MAX_CHUNK) }, MAX_CHUNK + 1],
    ['past-total', { offset: 100n, total: 70_000n }, 70_000],
  ])('a streamed chunk whose header breaks a rule is refused (H1610 ckpt-data %s)', async (rule, fields, n) => {
    const head = encodeCkptData({ kind: 0, rank: 1, ...fields, chunk: new Uint8Array(0) });
    const payload = new Uint8Array(head.length + n);
    payload.set(head);
    const { frame, feed } = streamed(payload, 16_384);
    const router = new FrameRouter(linkOf([frame]), () => new Set([OWN]), new Set([OWN]));
    const taking = router.take(1, OWN);
    feed();
    const e = await taking.catch((x: unknown) => x);
    expect(isPlexusError(e) && e.code).toBe('H1610');
    expect(isPlexusError(e) && e.details).toMatchObject({ rule });
  });
});
