/**
 * The large-message path of the communicator: frames written piece by piece behind the
 * link's backpressure (with other frames kept out of them), COLLECTIVE payloads handed on
 * piece by piece as they arrive (codec/sperli-mesh-stream.ts, comm-stream.ts) and reduced in runs at
 * the root, rank files sent and written from their header and state without a copy.
 * Results are compared bit for bit with a reference fold in ascending rank order.
 */
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { encodeRankFile } from '../../ts/codec/sperli-files.js';
import {
  encodeFrame,
  FRAME_HEADER_SIZE,
  FrameContext,
  type FrameInit,
  FrameType,
  MAX_COLLECTIVE_DATA,
  MAX_PAYLOAD,
} from '../../ts/codec/sperli-frame.js';
import { type PieceEvent, PieceStream, STREAM_MIN } from '../../ts/codec/sperli-mesh-stream.js';
import { CkptDataKind, decodeCkptData, MAX_CHUNK } from '../../ts/codec/sperli-payloads.js';
import { FrameStream } from '../../ts/codec/sperli-stream.js';
import { combine, sha256 } from '../../ts/core/index.js';
import { sendFile, sendFileParts } from '../../ts/sperli/checkpoint-frames.js';
import { rankFileHeader } from '../../ts/sperli/checkpoint-take.js';
import { Comm } from '../../ts/sperli/comm.js';
import { IncomingFrame } from '../../ts/sperli/comm-stream.js';
import { type Link, PeerLinks, transportOf } from '../../ts/sperli/mesh-links.js';
import { rng } from '../helpers/rng.js';

const JOB = new Uint8Array(16).fill(7);

function frameBytes(init: Partial<FrameInit> & { type: number }, payload: Uint8Array): Uint8Array {
  return encodeFrame({ jobId: JOB, sourceRank: 1, targetRank: 0, incarnation: 1, ...init }, payload);
}

function context(): FrameContext {
  return new FrameContext({ jobId: JOB, peerRank: 1, ownRank: 0, incarnation: 1 }, { helloReceived: true });
}

function pattern(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  const next = rng(seed);
  for (let i = 0; i < n; i++) b[i] = next() & 0xff;
  return b;
}

/** Whole frames from PieceStream events: begin/piece/end put back together. */
function collect(events: PieceEvent[]): { type: number; payload: Uint8Array; streamed: boolean }[] {
  const out: { type: number; payload: Uint8Array; streamed: boolean }[] = [];
  let open: { type: number; parts: Uint8Array[] } | undefined;
  for (const e of events) {
    if (e.kind === 'frame') out.push({ type: e.header.type, payload: e.payload, streamed: false });
    else if (e.kind === 'begin') open = { type: e.header.type, parts: [] };
    else if (e.kind === 'piece') open?.parts.push(e.bytes.slice());
    else if (e.kind === 'end' && open) {
      out.push({ type: open.type, payload: Buffer.concat(open.parts), streamed: true });
      open = undefined;
    } else if (e.kind === 'refuse') throw e.error;
  }
  return out;
}

describe('PieceStream (the mesh frame decoder)', () => {
  it('hands large COLLECTIVE and CKPT_DATA payloads on piece by piece, everything else whole, as FrameStream does, for any chunking', () => {
    const frames = [
      frameBytes({ type: FrameType.DATA, tag: 3 }, pattern(10, 1)),
      frameBytes({ type: FrameType.COLLECTIVE }, pattern(STREAM_MIN + 4097, 2)),
      frameBytes({ type: FrameType.COLLECTIVE }, pattern(40, 3)),
      frameBytes({ type: FrameType.DATA, tag: 4 }, pattern(STREAM_MIN * 2, 4)),
      frameBytes({ type: FrameType.COLLECTIVE }, pattern(STREAM_MIN, 5)),
      frameBytes({ type: FrameType.COLLECTIVE }, pattern(STREAM_MIN - 1, 6)),
      frameBytes({ type: FrameType.CKPT_DATA, epoch: 3n }, pattern(STREAM_MIN + 24, 7)),
    ];
    const wire = Buffer.concat(frames);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: wire.length - 1 }), { maxLength: 30 }), (cuts) => {
        const at = [...new Set(cuts)].sort((a, b) => a - b);
        const chunks: Uint8Array[] = [];
        let prev = 0;
        for (const c of [...at, wire.length]) {
          chunks.push(Uint8Array.from(wire.subarray(prev, c)));
          prev = c;
        }
        const reference = new FrameStream(context());
        const whole = chunks.flatMap((c) => reference.push(c));
        const stream = new PieceStream(context());
        stream.streaming = true;
        const events: PieceEvent[] = [];
        for (const c of chunks) stream.push(c, (e) => events.push(e));
        const got = collect(events);
        expect(got.map((f) => f.type)).toEqual(whole.map((e) => (e.kind === 'frame' ? e.header.type : -1)));
        got.forEach((f, i) => {
          const w = whole[i] as { payload: Uint8Array };
          expect(Buffer.compare(f.payload, w.payload)).toBe(0);
          // Only a COLLECTIVE or CKPT_DATA payload of STREAM_MIN bytes or more that did not arrive in one chunk is streamed.
          const may = f.type === FrameType.COLLECTIVE || f.type === FrameType.CKPT_DATA;
          if (f.streamed) expect(may && f.payload.length >= STREAM_MIN).toBe(true);
        });
      }),
      { numRuns: 60 },
    );
  });

  it('without streaming, every frame arrives whole', () => {
    const wire = frameBytes({ type: FrameType.COLLECTIVE }, pattern(STREAM_MIN * 3, 9));
    const stream = new PieceStream(context());
    const events: PieceEvent[] = [];
    for (let at = 0; at < wire.length; at += 1000) stream.push(wire.slice(at, at + 1000), (e) => events.push(e));
    expect(events.map((e) => e.kind)).toEqual(['frame']);
  });

  it('refuses a header above 16 MiB before any payload byte, and takes nothing after', () => {
    const head = frameBytes({ type: FrameType.COLLECTIVE }, new Uint8Array(16)).slice(0, FRAME_HEADER_SIZE);
    new DataView(head.buffer).setUint32(0, MAX_PAYLOAD + 1, true);
    const stream = new PieceStream(context());
    stream.streaming = true;
    const events: PieceEvent[] = [];
    stream.push(head.subarray(0, 20), (e) => events.push(e));
    stream.push(Buffer.concat([head.subarray(20), new Uint8Array(100_000)]), (e) => events.push(e));
    stream.push(new Uint8Array(10), (e) => events.push(e));
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ kind: 'refuse', error: { code: 'H1610', details: { reason: 'length' } } });
    expect(stream.refused).toBe(true);
  });
});

describe('IncomingFrame', () => {
  it('gives the collective header across pieces, and every data byte to a late or an early drain', async () => {
    const payload = pattern(16 + 1000, 11);
    for (const early of [false, true]) {
      const f = new IncomingFrame(payload.length);
      const got = new Uint8Array(1000);
      let drained: Promise<void> | undefined;
      const sink = (at: number, c: Uint8Array) => got.set(c, at);
      if (early) drained = f.drain(sink);
      f.push(payload.subarray(0, 5));
      f.push(payload.subarray(5, 300));
      expect(Buffer.compare(await f.header(), payload.subarray(0, 16))).toBe(0);
      f.push(payload.subarray(300, 301));
      if (!early) drained = f.drain(sink);
      f.push(payload.subarray(301));
      f.end();
      await drained;
      expect(Buffer.compare(got, payload.subarray(16))).toBe(0);
    }
  });

  it('a failure rejects the drain that waits for the rest', async () => {
    const f = new IncomingFrame(16 + 100);
    f.push(new Uint8Array(40));
    const drained = f.drain(() => {});
    const error = Object.assign(new Error('lost'), { code: 'H1612' });
    f.fail(error as never);
    await expect(drained).rejects.toBe(error);
  });
});

/**
 * A job of `size` PeerLinks in one process whose pipes cut what is written into chunks
 * of random lengths (1 .. maxChunk bytes), delivered on later turns of the event loop:
 * the pieces a COLLECTIVE frame reaches the root in are then rarely whole elements.
 */
function choppyJob(size: number, seed: number, maxChunk: number): Comm[] {
  const next = rng(seed);
  const links = Array.from(
    { length: size },
    (_, rank) =>
      new PeerLinks({ jobId: JOB, rank, size, incarnation: 1, heartbeatMs: 0, silenceMs: 0, closeGraceMs: 10 }),
  );
  for (let a = 0; a < size; a++) {
    for (let b = 0; b < size; b++) {
      if (a === b) continue;
      const to = links[b] as PeerLinks;
      let chain: Promise<void> = Promise.resolve();
      const link: Link = {
        write(bytes) {
          const copy = Uint8Array.from(bytes);
          chain = chain.then(async () => {
            for (let at = 0; at < copy.length; ) {
              const n = 1 + (next() % maxChunk);
              to.receive(a, copy.subarray(at, at + n));
              at += n;
              if (next() % 4 === 0) await new Promise((r) => setImmediate(r));
            }
          });
          return chain;
        },
        end: () => chain.then(() => to.linkClosed(a)),
      };
      (links[a] as PeerLinks).attach(b, link);
    }
  }
  return links.map((l) => new Comm(transportOf(l)));
}

function fold<T extends Float64Array | Int32Array | BigInt64Array>(inputs: T[], op: 'sum' | 'max'): T {
  const out = inputs[0]!.slice() as T;
  for (let r = 1; r < inputs.length; r++) combine(out, inputs[r]!, op);
  return out;
}

describe('large reductions over pieces of any length', () => {
  it('allreduce f64 and i64 sum and i32 max on 3 ranks give the reference fold bit for bit', async () => {
    const drains = vi.spyOn(IncomingFrame.prototype, 'drain');
    const comms = choppyJob(3, 42, 70_000);
    const n = 150_001;
    const next = rng(5);
    const f64 = comms.map(() => Float64Array.from({ length: n }, () => (next() - 2 ** 31) / 7.3));
    const i64 = comms.map(() => BigInt64Array.from({ length: n }, () => BigInt(next()) * 1_000_003n));
    const i32 = comms.map(() => Int32Array.from({ length: n + 1 }, () => next() | 0));
    const before = f64[2]!.slice();
    const results = await Promise.all(
      comms.map(async (c) => ({
        f64: await c.allreduce(f64[c.rank]!, 'sum'),
        i64: await c.allreduce(i64[c.rank]!, 'sum'),
        i32: await c.allreduce(i32[c.rank]!, 'max'),
        big: await c.bcast(1, c.rank === 1 ? pattern(300_007, 3) : undefined),
      })),
    );
    const want = { f64: fold(f64, 'sum'), i64: fold(i64, 'sum'), i32: fold(i32, 'max') };
    for (const r of results) {
      expect(Buffer.compare(Buffer.from(r.f64.buffer), Buffer.from(want.f64.buffer))).toBe(0);
      expect(Buffer.compare(Buffer.from(r.i64.buffer), Buffer.from(want.i64.buffer))).toBe(0);
      expect(Buffer.compare(Buffer.from(r.i32.buffer), Buffer.from(want.i32.buffer))).toBe(0);
      expect(Buffer.compare(r.big, pattern(300_007, 3))).toBe(0);
    }
    // Contributions, results and the broadcast did arrive piece by piece.
    expect(drains.mock.calls.length).toBeGreaterThanOrEqual(12);
    drains.mockRestore();
    // The inputs are never changed.
    expect(Buffer.compare(Buffer.from(f64[2]!.buffer), Buffer.from(before.buffer))).toBe(0);
    await Promise.all(comms.map((c) => c.finalize()));
  });
});

/**
 * A job of PeerLinks in one process whose pipes deliver in 64 KiB pieces on later turns
 * of the event loop; `watch(from, to, bytes)` sees every piece as it is delivered, and
 * returning false from it cuts that pipe there (the receiver sees the link close).
 */
function watchedJob(size: number, watch: (from: number, to: number, bytes: Uint8Array) => boolean): Comm[] {
  const links = Array.from(
    { length: size },
    (_, rank) =>
      new PeerLinks({ jobId: JOB, rank, size, incarnation: 1, heartbeatMs: 0, silenceMs: 0, closeGraceMs: 10 }),
  );
  for (let a = 0; a < size; a++) {
    for (let b = 0; b < size; b++) {
      if (a === b) continue;
      const to = links[b] as PeerLinks;
      let chain: Promise<void> = Promise.resolve();
      let cut = false;
      const link: Link = {
        write(bytes) {
          const copy = Uint8Array.from(bytes);
          chain = chain.then(async () => {
            for (let at = 0; at < copy.length && !cut; at += 65_536) {
              await new Promise((r) => setImmediate(r));
              const piece = copy.subarray(at, at + 65_536);
              if (!watch(a, b, piece)) {
                cut = true;
                to.linkClosed(a);
                return;
              }
              to.receive(a, piece);
            }
          });
          return chain;
        },
        end: () =>
          chain.then(() => {
            if (!cut) to.linkClosed(a);
            cut = true;
          }),
      };
      (links[a] as PeerLinks).attach(b, link);
    }
  }
  return links.map((l) => new Comm(transportOf(l)));
}

describe('the allreduce result leaves the root while the last contribution arrives', () => {
  it('rank 0 sends result bytes before it has all of rank 1, and every rank gets the reference fold', async () => {
    const n = 1 << 19; // 4 MiB of f64
    const next = rng(17);
    const inputs = [0, 1].map(() => Float64Array.from({ length: n }, () => (next() - 2 ** 31) / 3.1));
    const contribution = n * 8;
    let received = 0; // bytes of rank 1 delivered to rank 0
    let sent = 0; // bytes of rank 0 delivered to rank 1
    let receivedAtFirstResult = -1;
    const comms = watchedJob(2, (from, _to, bytes) => {
      if (from === 1) received += bytes.length;
      else {
        sent += bytes.length;
        // Past the frame and collective headers: result bytes.
        if (receivedAtFirstResult < 0 && sent > 52 + 16) receivedAtFirstResult = received;
      }
      return true;
    });
    const results = await Promise.all(comms.map((c) => c.allreduce(inputs[c.rank]!, 'sum')));
    const want = fold(inputs, 'sum');
    for (const r of results) expect(Buffer.compare(Buffer.from(r.buffer), Buffer.from(want.buffer))).toBe(0);
    expect(receivedAtFirstResult).toBeGreaterThan(0);
    expect(receivedAtFirstResult).toBeLessThan(contribution);
    await Promise.all(comms.map((c) => c.finalize()));
  });

  it('a contributor lost halfway: no rank returns a result, and none hangs', async () => {
    const n = 1 << 19;
    const inputs = [0, 1, 2].map((r) => new Float64Array(n).fill(r + 1));
    let fromTwo = 0;
    const comms = watchedJob(3, (from, to, bytes) => {
      if (from === 2 && to === 0) {
        fromTwo += bytes.length;
        return fromTwo < 2 << 20; // rank 2's link to the root is cut after about 2 MiB
      }
      return true;
    });
    const settled = await Promise.allSettled(comms.map((c) => c.allreduce(inputs[c.rank]!, 'sum')));
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected', 'rejected']);
    // Rank 1 was receiving the result as it was folded: it learns of the loss, never of a result.
    expect(((settled[1] as PromiseRejectedResult).reason as { code: string }).code).toBe('H1612');
  });

  it("a contribution longer than the root's, found after result bytes went out: H1618 at the root, H1612 elsewhere", async () => {
    // Rank 1 contributes one frame more than the root: the root has already sent the first
    // result frame (whole: it is not the message's last) when the extra frame's header arrives.
    const perFrame = MAX_COLLECTIVE_DATA / 8;
    const lengths = [perFrame, perFrame + 4];
    const comms = watchedJob(2, () => true);
    const settled = await Promise.allSettled(
      comms.map((c) => c.allreduce(new Float64Array(lengths[c.rank]!).fill(1), 'sum')),
    );
    const codes = settled.map((s) => (s.status === 'fulfilled' ? 'ok' : (s.reason as { code: string }).code));
    expect(codes).toEqual(['H1618', 'H1612']);
  });
});

describe('rank files sent and written from their parts', () => {
  it('rankFileHeader is the header encodeRankFile writes', () => {
    const state = pattern(5000, 8);
    const id = { jobId: JOB, epoch: 12n, rank: 3, size: 5 };
    const head = rankFileHeader(id, state.length, sha256(state));
    expect(Buffer.compare(head, encodeRankFile(id, state).subarray(0, 80))).toBe(0);
  });

  it('sendFileParts sends exactly the frames sendFile sends for the joined file', async () => {
    for (const n of [0, 10, MAX_CHUNK - 80, MAX_CHUNK - 79, 3 * MAX_CHUNK + 5]) {
      const head = pattern(80, n);
      const body = pattern(n, n + 1);
      const capture = () => {
        const frames: Uint8Array[] = [];
        const link = {
          send: async (_p: number, _t: number, payload: Uint8Array, _e: bigint, prefix?: Uint8Array) => {
            frames.push(Buffer.concat([prefix ?? new Uint8Array(0), payload]));
          },
        };
        return { frames, link: link as never };
      };
      const a = capture();
      const b = capture();
      await sendFileParts(a.link, 1, CkptDataKind.ownChunk, 0, 1n, head, body);
      await sendFile(b.link, 1, CkptDataKind.ownChunk, 0, 1n, Buffer.concat([head, body]));
      expect(a.frames.length).toBe(b.frames.length);
      a.frames.forEach((f, i) => {
        expect(Buffer.compare(f, b.frames[i]!)).toBe(0);
        expect(decodeCkptData(f).chunk.length).toBeLessThanOrEqual(MAX_CHUNK);
      });
    }
  });
});
