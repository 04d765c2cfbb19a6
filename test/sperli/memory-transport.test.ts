import { describe, expect, it } from 'vitest';
import { FrameType } from '../../ts/codec/sperli-frame.js';
import { encodeAbort, encodeHeartbeat, encodeHello } from '../../ts/codec/sperli-payloads.js';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { createMemoryTransports, type MemoryTransport } from '../../ts/sperli/memory-transport.js';
import { transportSuite } from '../compliance/transport.suite.js';
import { until } from '../helpers/until.js';

transportSuite('in-memory transport', async (size) => {
  const transports = createMemoryTransports(size);
  return {
    transports,
    teardown: async () => {
      await Promise.all(transports.map((t) => t.close()));
    },
  };
});

// Every read copied into one buffer that is overwritten after it, as the dialled TLS
// connections of the mesh read: whatever a transport keeps must be its own copy.
transportSuite('in-memory transport reading into one reused buffer', async (size) => {
  const transports = createMemoryTransports(size, { readBuffer: 1000 });
  return {
    transports,
    teardown: async () => {
      await Promise.all(transports.map((t) => t.close()));
    },
  };
});

/** A job of three in-memory ranks; rank 1 hears what the test injects as rank 0. */
async function refusal(
  inject: (t: MemoryTransport) => Uint8Array[],
  opts: { incarnation?: number } = {},
): Promise<{ error: PlexusError; others: PlexusError[]; delivered: number }> {
  const ts = createMemoryTransports(3, opts);
  const target = ts[1] as MemoryTransport;
  let delivered = 0;
  target.onFrame(() => delivered++);
  for (const bytes of inject(target)) target.inject(0, bytes);
  await until(() => ts.every((t) => t.failure !== undefined), { timeoutMs: 5_000, what: 'every rank to fail' });
  const error = target.failure as PlexusError;
  const others = [ts[0], ts[2]].map((t) => t?.failure as PlexusError);
  await Promise.all(ts.map((t) => t.close()));
  return { error, others, delivered };
}

describe('in-memory transport: frames injected as if from a peer pass the same checks', () => {
  it('a reserved DATA tag is refused (H1610 tag-reserved) and the others get ABORT reason 2 (H1612)', async () => {
    const r = await refusal((t) => [t.frameFrom(0, FrameType.DATA, new Uint8Array(1), { tag: 0x8000_0000 })]);
    expect([r.error.code, r.error.details.reason]).toEqual(['H1610', 'tag-reserved']);
    for (const o of r.others) {
      expect(o.code).toBe('H1612');
      expect(o.details).toMatchObject({ reason: 'abort', peer: 1, abortReason: 2, abortCode: 1610, rank: 1 });
    }
    expect(r.delivered).toBe(0);
  });

  it('a forged source rank is refused (H1610 source-rank)', async () => {
    const r = await refusal((t) => [t.frameFrom(0, FrameType.DATA, new Uint8Array(1), { sourceRank: 2 })]);
    expect([r.error.code, r.error.details.reason]).toEqual(['H1610', 'source-rank']);
  });

  it('a HELLO on a link that has had one is refused (H1610 hello-order)', async () => {
    const r = await refusal((t) => [t.frameFrom(0, FrameType.HELLO, encodeHello(new Uint8Array(0)))]);
    expect([r.error.code, r.error.details.reason]).toEqual(['H1610', 'hello-order']);
  });

  it('HEARTBEAT counters start at 1 and grow by one (else H1610 payload-size)', async () => {
    const r = await refusal((t) => [
      t.frameFrom(0, FrameType.HEARTBEAT, encodeHeartbeat(1n)),
      t.frameFrom(0, FrameType.HEARTBEAT, encodeHeartbeat(2n)),
      t.frameFrom(0, FrameType.DATA, new Uint8Array(0)),
      t.frameFrom(0, FrameType.HEARTBEAT, encodeHeartbeat(4n)),
    ]);
    expect([r.error.code, r.error.details.reason, r.error.details.rule]).toEqual([
      'H1610',
      'payload-size',
      'heartbeat-counter',
    ]);
    expect(r.delivered).toBe(1);
    const first = await refusal((t) => [t.frameFrom(0, FrameType.HEARTBEAT, encodeHeartbeat(0n))]);
    expect(first.error.details.rule).toBe('heartbeat-counter');
  });

  it('an ABORT that does not decode is refused (H1610 payload-size), a good one ends the job with H1612', async () => {
    const bad = encodeAbort({ reason: 1, code: 0, rank: 0, text: '' });
    bad[0] = 9;
    const r = await refusal((t) => [t.frameFrom(0, FrameType.ABORT, bad)]);
    expect([r.error.code, r.error.details.reason]).toEqual(['H1610', 'payload-size']);
    const ok = await refusal((t) => [
      t.frameFrom(0, FrameType.ABORT, encodeAbort({ reason: 3, code: 1617, rank: 0, text: 'mismatch' })),
    ]);
    expect(ok.error.code).toBe('H1612');
    expect(ok.error.details).toMatchObject({
      reason: 'abort',
      abortReason: 3,
      abortCode: 1617,
      rank: 0,
      text: 'mismatch',
    });
  });

  it('a frame of an older incarnation is dropped; a newer one is refused (H1610 incarnation)', async () => {
    const ts = createMemoryTransports(2, { incarnation: 2 });
    const [a, b] = ts as [MemoryTransport, MemoryTransport];
    const got: number[] = [];
    b.onFrame((_, f) => got.push(f.tag));
    b.inject(0, b.frameFrom(0, FrameType.DATA, new Uint8Array(3), { incarnation: 1, tag: 0xffff_ffff }));
    await a.send(1, FrameType.DATA, 8, new Uint8Array(0));
    await until(() => got.length === 1, { timeoutMs: 5_000, what: 'the good frame' });
    expect(got).toEqual([8]);
    expect(b.failure).toBeUndefined();
    b.inject(0, b.frameFrom(0, FrameType.DATA, new Uint8Array(0), { incarnation: 3 }));
    await until(() => b.failure !== undefined, { timeoutMs: 5_000, what: 'the refusal' });
    expect([b.failure?.code, b.failure?.details.reason]).toEqual(['H1610', 'incarnation']);
    await Promise.all(ts.map((t) => t.close()));
  });

  it('a frame after a BYE is refused (H1610 bye-order)', async () => {
    const r = await refusal((t) => [t.frameFrom(0, FrameType.BYE), t.frameFrom(0, FrameType.DATA, new Uint8Array(0))]);
    expect([r.error.code, r.error.details.reason]).toEqual(['H1610', 'bye-order']);
  });

  it('bytes split anywhere still make the same frames', async () => {
    const [a, b] = createMemoryTransports(2) as [MemoryTransport, MemoryTransport];
    const got: number[] = [];
    b.onFrame((_, f) => got.push(f.tag));
    const bytes = Buffer.concat(
      [1, 2, 3].map((tag) => b.frameFrom(0, FrameType.DATA, new Uint8Array(tag * 7), { tag })),
    );
    for (let i = 0; i < bytes.length; i += 5) b.inject(0, bytes.subarray(i, i + 5));
    await until(() => got.length === 3, { timeoutMs: 5_000, what: 'three frames' });
    expect(got).toEqual([1, 2, 3]);
    await Promise.all([a.close(), b.close()]);
  });

  it('a rank that crashes (no BYE) is a lost peer for the others (H1612 lost-peer)', async () => {
    const ts = createMemoryTransports(3);
    const failures: PlexusError[][] = ts.map(() => []);
    ts.forEach((t, i) => {
      t.onFailure((e) => failures[i]?.push(e));
    });
    (ts[2] as MemoryTransport).crash();
    await until(() => ts[0]?.failure !== undefined && ts[1]?.failure !== undefined, {
      timeoutMs: 5_000,
      what: 'the others to fail',
    });
    for (const t of [ts[0], ts[1]]) {
      const f = t?.failure as PlexusError;
      expect(f.code).toBe('H1612');
      const lost = f.details.reason === 'lost-peer' ? f.details.peer : f.details.rank;
      expect(lost).toBe(2);
    }
    expect(failures[0]?.length).toBe(1);
    expect(failures[1]?.length).toBe(1);
    await Promise.all(ts.map((t) => t.close()));
  });

  it('refuses a job size outside 1..4096 and a hook for a rank that is not a peer', () => {
    for (const size of [0, 4097, 1.5]) {
      try {
        createMemoryTransports(size);
        expect.unreachable();
      } catch (e) {
        expect(isPlexusError(e, 'PLX_SPERLI_BAD_ARGUMENT')).toBe(true);
      }
    }
    const [a] = createMemoryTransports(1);
    expect(() => a?.inject(0, new Uint8Array(0))).toThrow(/not another rank/);
  });
});
