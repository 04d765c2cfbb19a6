/**
 * The small path of reduce and allreduce (ts/sperli/collectives.ts, SmallReduce): one
 * frame each way, written at once and taken in the call that delivers it, and the known
 * COLLECTIVE header a connection accepts by comparing bytes (ts/codec/sperli-mesh-stream.ts).
 * Results must be those of the general path, calls must keep their order when small and
 * general calls are mixed, and every frame that is not exactly the expected one must end
 * the job as the general path does.
 */
import { describe, expect, it } from 'vitest';
import {
  decodeFrameHeader,
  encodeFrame,
  FrameContext,
  type FrameInit,
  FrameType,
  readFrameHeader,
} from '../../ts/codec/sperli-frame.js';
import { type PieceEvent, PieceStream } from '../../ts/codec/sperli-mesh-stream.js';
import { CollectiveOp, encodeCollective } from '../../ts/codec/sperli-payloads.js';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { Comm } from '../../ts/sperli/comm.js';
import { createMemoryTransports, type MemoryTransport } from '../../ts/sperli/memory-transport.js';
import { runOn, TRANSPORTS } from '../helpers/comm-memory.js';
import { until } from '../helpers/until.js';

function codeOf(s: PromiseSettledResult<unknown>): string {
  if (s.status === 'fulfilled') return 'ok';
  return isPlexusError(s.reason) ? s.reason.code : String(s.reason);
}

describe('small and general calls mixed keep their order and results', () => {
  it.each(TRANSPORTS.flatMap((t) => [2, 3, 4].map((n) => [t, n] as const)))(
    '%s, %i ranks: calls made without waiting, small and large, settle in order with the right values',
    async (kind, size) => {
      const sum = (f: (r: number) => number) => Array.from({ length: size }, (_, r) => f(r)).reduce((a, b) => a + b);
      const results = await runOn(kind, size, async (comm) => {
        const r = comm.rank;
        const big = new Float64Array(70_000).fill(r + 1);
        const order: string[] = [];
        const track = <T>(name: string, p: Promise<T>) =>
          p.then((v) => {
            order.push(name);
            return v;
          });
        const calls = [
          track('a', comm.allreduce(new Float64Array([r, 2 * r]), 'sum')),
          track('b', comm.barrier()),
          track('c', comm.allreduce(new Int32Array([r + 1]), 'prod')),
          track('d', comm.allreduce(big, 'sum')),
          track('e', comm.reduce(size - 1, new Uint32Array([r, 7]), 'max')),
          track('f', comm.allreduce(new BigInt64Array([BigInt(r) - 2n]), 'min')),
          track('g', comm.bcast(0, r === 0 ? new Uint8Array([9, 8]) : undefined)),
          track('h', comm.allreduce(new Uint8Array([1 << r]), 'bor')),
        ];
        const v = await Promise.all(calls);
        return { v, order, seq: comm.collectiveSequence };
      });
      const prod = Array.from({ length: size }, (_, r) => r + 1).reduce((a, b) => a * b);
      for (const [rank, { v, order, seq }] of results.entries()) {
        expect(order).toEqual(['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']);
        expect(seq).toBe(8n);
        expect(Array.from(v[0] as Float64Array)).toEqual([sum((r) => r), sum((r) => 2 * r)]);
        expect(Array.from(v[2] as Int32Array)).toEqual([prod]);
        const d = v[3] as Float64Array;
        expect(d.length).toBe(70_000);
        expect(d[0]).toBe(sum((r) => r + 1));
        expect(d[69_999]).toBe(sum((r) => r + 1));
        if (rank === size - 1) expect(Array.from(v[4] as Uint32Array)).toEqual([size - 1, 7]);
        else expect(v[4]).toBeNull();
        expect(v[5]).toBeInstanceOf(BigInt64Array);
        expect(Array.from(v[5] as BigInt64Array)).toEqual([-2n]);
        expect(Array.from(v[6] as Uint8Array)).toEqual([9, 8]);
        expect(Array.from(v[7] as Uint8Array)).toEqual([(1 << size) - 1]);
      }
    },
  );

  it('a small allreduce behind a large message still queued to the root waits for it, and both arrive', async () => {
    const comms = createMemoryTransports(2).map((t) => new Comm(t));
    const big = new Uint8Array(20 * 2 ** 20).fill(5);
    const [r0, r1] = await Promise.all([
      (async () => {
        const sum = await comms[0]!.allreduce(new Int32Array([10]), 'sum');
        const m = await comms[0]!.recv(1, 3);
        return { sum: Array.from(sum), length: m.data.length, last: m.data[m.data.length - 1] };
      })(),
      (async () => {
        const sending = comms[1]!.send(0, 3, big);
        const sum = await comms[1]!.allreduce(new Int32Array([5]), 'sum');
        await sending;
        return { sum: Array.from(sum) };
      })(),
    ]);
    expect(r0).toEqual({ sum: [15], length: big.length, last: 5 });
    expect(r1).toEqual({ sum: [15] });
    await Promise.all(comms.map((c) => c.finalize()));
  });

  it('the root reduces contributions that arrived before its call, in rank order', async () => {
    const comms = createMemoryTransports(4).map((t) => new Comm(t));
    // Ranks 1..3 call first; their frames wait at root 2 until it calls. Integer prod
    // and sum are order-free, so a non-commutative check: bxor then the first operand.
    const early = [0, 1, 3].map((r) => comms[r]!.reduce(2, new Float64Array([2 ** r, -1]), 'sum'));
    // Part of the scenario: the root calls after the others' frames arrived (no event marks that).
    await new Promise((r) => setTimeout(r, 20));
    const atRoot = await comms[2]!.reduce(2, new Float64Array([4, 0.5]), 'sum');
    expect(await Promise.all(early)).toEqual([null, null, null]);
    expect(Array.from(atRoot as Float64Array)).toEqual([1 + 2 + 4 + 8, -2.5]);
    await Promise.all(comms.map((c) => c.finalize()));
  });
});

/** A 2-rank memory-transport job; the test speaks for rank 0 towards rank 1 through `inject`. */
function pair(): { comms: Comm[]; ts: MemoryTransport[] } {
  const ts = createMemoryTransports(2);
  return { ts, comms: ts.map((t) => new Comm(t)) };
}

describe('a frame that is not the expected one ends the job as on the general path', () => {
  const header = (over: Partial<Parameters<typeof encodeCollective>[0]> = {}) => ({
    op: CollectiveOp.allreduce,
    elementType: 1,
    reduceOp: 1,
    phase: 2,
    root: 0,
    sequence: 1n,
    ...over,
  });

  it.each([
    ['reduce-op', header({ reduceOp: 4 }), 4],
    ['sequence', header({ sequence: 2n }), 4],
    ['phase', header({ phase: 1 }), 4],
    ['data-length', header(), 8],
    ['data-length', header(), 0],
  ])('at a rank that is not the root: %s (H1617, ABORT reason 3)', async (reason, h, n) => {
    const { comms, ts } = pair();
    const t1 = ts[1] as MemoryTransport;
    const call = comms[1]!.allreduce(new Int32Array([1]), 'sum');
    t1.inject(0, t1.frameFrom(0, FrameType.COLLECTIVE, encodeCollective(h, new Uint8Array(n))));
    const [settled] = await Promise.allSettled([call]);
    expect(codeOf(settled!)).toBe('H1617');
    expect(((settled as PromiseRejectedResult).reason as PlexusError).details).toMatchObject({ reason, rank: 0 });
    await until(() => comms[0]!.failed !== undefined, { timeoutMs: 5_000, what: 'rank 0 to learn of the abort' });
    expect(comms[0]!.failed?.code).toBe('H1612');
    expect(comms[0]!.failed?.details).toMatchObject({ abortReason: 3, abortCode: 1617 });
  });

  it('a large frame that arrives in pieces where one small frame belongs: H1617 data-length', async () => {
    const { comms, ts } = pair();
    const t1 = ts[1] as MemoryTransport;
    const call = comms[1]!.allreduce(new Int32Array([1]), 'sum');
    const bytes = t1.frameFrom(0, FrameType.COLLECTIVE, encodeCollective(header(), new Uint8Array(100_000)));
    t1.inject(0, bytes.subarray(0, 70_000));
    t1.inject(0, bytes.subarray(70_000));
    const [settled] = await Promise.allSettled([call]);
    expect(codeOf(settled!)).toBe('H1617');
    expect(((settled as PromiseRejectedResult).reason as PlexusError).details).toMatchObject({
      reason: 'data-length',
      got: 100_000,
      expected: 4,
    });
  });

  it('at the root: a contribution of another length is H1618, another sequence H1617', async () => {
    for (const [h, n, code, reason] of [
      [header({ phase: 1 }), 8, 'H1618', 'contribution-length'],
      [header({ phase: 1, sequence: 5n }), 4, 'H1617', 'sequence'],
    ] as const) {
      const ts = createMemoryTransports(2);
      const comms = ts.map((t) => new Comm(t));
      const t0 = ts[0] as MemoryTransport;
      const call = comms[0]!.allreduce(new Int32Array([1]), 'sum');
      t0.inject(1, t0.frameFrom(1, FrameType.COLLECTIVE, encodeCollective(h, new Uint8Array(n))));
      const [settled] = await Promise.allSettled([call]);
      expect(codeOf(settled!)).toBe(code);
      expect(((settled as PromiseRejectedResult).reason as PlexusError).details).toMatchObject({ reason, rank: 1 });
      await until(() => comms[1]!.failed !== undefined, { timeoutMs: 5_000, what: 'rank 1 to learn of the abort' });
      expect(comms[1]!.failed?.code).toBe('H1612');
    }
  });

  it('a failure while the small call waits rejects it with the failure', async () => {
    const { comms, ts } = pair();
    const call = comms[0]!.allreduce(new Float64Array([1]), 'sum');
    (ts[1] as MemoryTransport).crash();
    const [settled] = await Promise.allSettled([call]);
    expect(codeOf(settled!)).toBe('H1612');
    expect(((settled as PromiseRejectedResult).reason as PlexusError).details).toMatchObject({
      reason: 'lost-peer',
      peer: 1,
    });
  });
});

describe('the known COLLECTIVE header of a connection (codec/sperli-mesh-stream.ts)', () => {
  const JOB = new Uint8Array(16).fill(7);
  const BASE: FrameInit = { type: FrameType.COLLECTIVE, jobId: JOB, sourceRank: 1, targetRank: 0, incarnation: 2 };
  const payload = encodeCollective(
    { op: CollectiveOp.allreduce, elementType: 6, reduceOp: 1, phase: 1, root: 0, sequence: 9n },
    new Uint8Array(8).fill(3),
  );

  function feed(bytes: Uint8Array, ctx: FrameContext): PieceEvent[] {
    const events: PieceEvent[] = [];
    const s = new PieceStream(ctx);
    s.push(bytes, (e) => events.push(e), true);
    return events;
  }
  const context = (hello = true) =>
    new FrameContext({ jobId: JOB, peerRank: 1, ownRank: 0, incarnation: 2 }, { helloReceived: hello });

  /** What the full decoder says of the frame's header. */
  function verdict(bytes: Uint8Array, hello = true): string {
    const out = decodeFrameHeader(context(hello), bytes);
    return out.kind === 'refuse' ? `refuse ${out.error.details.reason}` : out.kind;
  }

  function kindOf(events: PieceEvent[]): string {
    const e = events[0] as PieceEvent;
    if (e.kind === 'refuse') return `refuse ${e.error.details.reason}`;
    return e.kind === 'frame' ? 'accept' : e.kind;
  }

  it('the exact header is accepted with the fields the decoder reads, and a copy of the payload', () => {
    const bytes = encodeFrame(BASE, payload);
    const events = feed(bytes, context());
    expect(events).toHaveLength(1);
    const e = events[0] as Extract<PieceEvent, { kind: 'frame' }>;
    expect(e.kind).toBe('frame');
    expect(e.header).toEqual(readFrameHeader(bytes));
    expect(e.payload).toEqual(payload);
    expect(e.payload.buffer).not.toBe(bytes.buffer);
  });

  it.each<[string, Partial<FrameInit>]>([
    ['job id', { jobId: new Uint8Array(16).fill(8) }],
    ['source rank', { sourceRank: 2 }],
    ['target rank', { targetRank: 1 }],
    ['older incarnation', { incarnation: 1 }],
    ['newer incarnation', { incarnation: 3 }],
    ['epoch', { epoch: 1n }],
    ['tag', { tag: 1 }],
    ['flags', { flags: 1 }],
    ['service', { service: 1 }],
    ['membership epoch', { membershipEpoch: 1 }],
  ])('a header that differs in %s gets the decoder verdict', (_name, change) => {
    const bytes = encodeFrame({ ...BASE, ...change }, payload);
    const expected = verdict(bytes);
    expect(expected).not.toBe('accept');
    expect(kindOf(feed(bytes, context()))).toBe(expected);
  });

  it('before the HELLO the exact header is refused as the decoder refuses it', () => {
    const bytes = encodeFrame(BASE, payload);
    expect(verdict(bytes, false)).toBe('refuse hello-order');
    expect(kindOf(feed(bytes, context(false)))).toBe('refuse hello-order');
  });

  it('a COLLECTIVE shorter than its collective header is refused', () => {
    const bytes = encodeFrame(BASE, new Uint8Array(15));
    expect(kindOf(feed(bytes, context()))).toBe('refuse collective-short');
  });

  it('after the expectations change, the header of the old ones is judged by the new ones', () => {
    const ctx = context();
    const s = new PieceStream(ctx);
    const events: PieceEvent[] = [];
    s.push(encodeFrame(BASE, payload), (e) => events.push(e), true);
    ctx.update({ incarnation: 3 });
    s.push(encodeFrame(BASE, payload), (e) => events.push(e), true);
    s.push(encodeFrame({ ...BASE, incarnation: 3 }, payload), (e) => events.push(e), true);
    expect(events.map((e) => e.kind)).toEqual(['frame', 'drop', 'frame']);
  });
});
