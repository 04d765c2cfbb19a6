/**
 * The server limits in process: their defaults and ranges, the byte accounting's rule, and a
 * grpc-timeout beyond a timer's reach on the lean gRPC server (the process tests are
 * limits-memory.test.ts and limits-connections.test.ts).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type GrpcServer, GrpcStatus, startGrpcServer } from '../../ts/chronacta/grpc-server.js';
import {
  ConnectionLoad,
  DEFAULT_LIMITS,
  defaultMaxConnections,
  grpcLimits,
  MAX_TIMER_MS,
  openFileLimit,
  ServerLoad,
} from '../../ts/chronacta/limits.js';
import { startServer } from '../../ts/chronacta/server.js';
import { ManualClock } from '../../ts/core/clock.js';
import { until } from '../helpers/until.js';
import { tempDir } from './helpers.js';
import { connect, framed, rawCall } from './limits-helpers.js';

describe('grpcLimits', () => {
  it('gives the defaults, the connection bound within half the open-file limit', () => {
    const l = grpcLimits();
    expect(l.maxBufferedBytesPerConnection).toBe(DEFAULT_LIMITS.maxBufferedBytesPerConnection);
    expect(l.maxConnections).toBe(defaultMaxConnections());
    const files = openFileLimit();
    expect(files).toBeGreaterThan(0);
    expect(l.maxConnections).toBeLessThanOrEqual(Math.max(8, Math.floor((files as number) / 2)));
    expect(l.maxConnections).toBeLessThanOrEqual(4096);
  });

  it('refuses a value out of range, not a whole number, or an unknown limit with PLX_CHRONACTA_BAD_INPUT', () => {
    for (const bad of [
      { maxConnections: 0 },
      { stallTimeoutMs: MAX_TIMER_MS + 1 },
      { requestTimeoutMs: 1.5 },
      { maxBufferedBytes: Number.NaN },
      { nonsense: 1 } as never,
    ]) {
      expect(() => grpcLimits(bad)).toThrow(expect.objectContaining({ code: 'PLX_CHRONACTA_BAD_INPUT' }));
    }
    expect(grpcLimits({ maxSubscriptions: 0 }).maxSubscriptions).toBe(0);
  });

  it('startServer refuses a bad limit before it opens the data directory', async () => {
    const t = await tempDir('limits-bad');
    try {
      await expect(startServer({ dataDir: `${t.dir}/never`, limits: { idleTimeoutMs: 1 } })).rejects.toMatchObject({
        code: 'PLX_CHRONACTA_BAD_INPUT',
      });
    } finally {
      await t.remove();
    }
  });
});

describe('ServerLoad', () => {
  it('takes one message of any size on an empty connection, then bounds per connection and in total', () => {
    const load = new ServerLoad(grpcLimits({ maxBufferedBytesPerConnection: 2000, maxBufferedBytes: 3000 }));
    const a = new ConnectionLoad();
    const b = new ConnectionLoad();
    expect(load.fits(a, 5000)).toBe(true);
    load.take(a, 1200);
    expect(load.fits(a, 800)).toBe(true);
    expect(load.fits(a, 801)).toBe(false);
    expect(load.full(a)).toBe(false);
    load.take(b, 1600);
    // 2800 in total: b may take 200 more, not 201.
    expect(load.fits(b, 200)).toBe(true);
    expect(load.fits(b, 201)).toBe(false);
    load.take(a, 800);
    expect(load.full(a)).toBe(true);
    expect(load.full(b)).toBe(true);
    load.give(a, 2000);
    expect(load.full(b)).toBe(false);
    expect(load.buffered).toBe(1600);
  });

  it('bounds server-streaming calls per connection and in total', () => {
    const load = new ServerLoad(grpcLimits({ maxSubscriptions: 3, maxSubscriptionsPerConnection: 2 }));
    const a = new ConnectionLoad();
    const b = new ConnectionLoad();
    expect([load.startStreaming(a), load.startStreaming(a), load.startStreaming(a)]).toEqual([true, true, false]);
    expect([load.startStreaming(b), load.startStreaming(b)]).toEqual([true, false]);
    load.endStreaming(a);
    expect(load.startStreaming(b)).toBe(true);
  });
});

describe('the lean gRPC server and grpc-timeout', () => {
  let server: GrpcServer | undefined;
  afterEach(async () => {
    await server?.close(0);
    server = undefined;
  });

  it('closes an idle connection by the time of its clock, not before', async () => {
    const clock = new ManualClock(0);
    let idled = 0;
    server = await startGrpcServer('127.0.0.1', 0, new Map(), {
      maxMessageBytes: 1024,
      statusOf: () => ({ code: GrpcStatus.INTERNAL, details: 'x' }),
      limits: grpcLimits({ idleTimeoutMs: 1000 }),
      onLimit: (r) => {
        if (r === 'idle') idled++;
      },
      clock,
    });
    const session = await connect(`127.0.0.1:${server.port}`);
    try {
      let closed = false;
      session.once('close', () => {
        closed = true;
      });
      await until(() => server?.load().connections === 1, { timeoutMs: 5_000, what: 'the server sees the connection' });
      clock.advance(1000); // sweeps at 250, 500, 750, 1000: idle for exactly the bound, not past it
      // A PING answered on the same connection: a close the sweep started would come first.
      await new Promise<void>((resolve, reject) =>
        session.ping((err) => (err ? reject(err) : resolve())) ? undefined : reject(new Error('ping not sent')),
      );
      expect(idled).toBe(0);
      expect(closed).toBe(false);
      clock.advance(250);
      await until(() => closed, { timeoutMs: 5_000, what: 'the idle connection closes' });
      expect(idled).toBe(1);
    } finally {
      session.destroy();
    }
  });

  it('holds a deadline beyond 2^31 - 1 ms to that instead of ending the call at once', async () => {
    let ran = 0;
    server = await startGrpcServer(
      '127.0.0.1',
      0,
      new Map([
        [
          '/plexus.chronacta.v1.EventStore/Append',
          {
            kind: 'unary' as const,
            handle: async () => {
              ran++;
              // The work of the call: longer than the short deadline below, far below the long ones.
              await new Promise((r) => setTimeout(r, 50));
              return framed(Buffer.from('ok'));
            },
          },
        ],
      ]),
      { maxMessageBytes: 1024, statusOf: () => ({ code: GrpcStatus.INTERNAL, details: 'x' }) },
    );
    const session = await connect(`127.0.0.1:${server.port}`);
    try {
      for (const timeout of ['99999999H', '2592000S', '2147484S']) {
        const call = rawCall(session, 'Append', framed(Buffer.from('x')), {
          read: true,
          headers: { 'grpc-timeout': timeout },
        });
        expect((await call.closed).status, timeout).toBe(GrpcStatus.OK);
      }
      // A short one still ends the call.
      const short = rawCall(session, 'Append', framed(Buffer.from('x')), {
        read: true,
        headers: { 'grpc-timeout': '10m' },
      });
      expect((await short.closed).status).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    } finally {
      session.destroy();
    }
    expect(ran).toBe(4);
  });
});
