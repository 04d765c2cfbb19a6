/**
 * The client port's bounds in cluster mode: a `serve --cluster` member (a cluster of one, real
 * process from dist/) takes the limit flags, refuses connections beyond the per-client bound
 * with GOAWAY, subscriptions beyond their bound with PLX_CHRONACTA_OVERLOADED, and appends once
 * with a 30-day deadline (which the member without the clamp answered with DEADLINE_EXCEEDED
 * while still writing the event).
 */
import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { GrpcStatus } from '../../ts/chronacta/grpc-server.js';
import { connect, rawCall, request } from '../chronacta/limits-helpers.js';
import { until } from '../helpers/until.js';
import { initOneMember, spawnServe, stopAll } from './helpers.js';

const spawned = new Set<ChildProcess>();
const sessions: http2.ClientHttp2Session[] = [];
const clients: ChronactaClient[] = [];
let root: string | undefined;

afterAll(async () => {
  for (const c of clients) c.close();
  for (const s of sessions) s.destroy();
  await stopAll(spawned);
  if (root) rmSync(root, { recursive: true, force: true });
});

describe('serve --cluster: the client port is bounded', () => {
  it('refuses connections and subscriptions beyond their bounds and clamps a 30-day deadline', async () => {
    root = await mkdtemp(join(tmpdir(), 'plexus-ha-limits-'));
    const { init } = await initOneMember(root);
    expect(init.code, init.stderr).toBe(0);
    const m = await spawnServe(
      1,
      join(root, 'node-1'),
      ['--tick-ms', '20', '--max-connections-per-client', '3', '--max-subscriptions', '1'],
      spawned,
    );
    const c = new ChronactaClient(m.address, { deadlineMs: 30 * 24 * 3600 * 1000 });
    clients.push(c);
    // The member elects itself; then a 30-day deadline appends once.
    const first = await until(
      () => c.append('long', [{ type: 'a' }], { idempotencyKey: 'k-a' }).catch(() => undefined),
      { timeoutMs: 30_000, what: 'the first append', intervalMs: 25 },
    );
    expect(first.lastVersion).toBe(0n);
    const raw = await connect(m.address);
    sessions.push(raw);
    const call = rawCall(raw, 'Append', request('Append', { stream: 'long', events: [{ type: 'b' }] }), {
      read: true,
      headers: { 'grpc-timeout': '99999999H' },
    });
    expect((await call.closed).status).toBe(GrpcStatus.OK);
    expect((await c.readStream('long')).events.map((e) => e.type)).toEqual(['a', 'b']);

    // One subscription is the bound: a second is refused with the coded error.
    const sub = c.subscribe({ all: true });
    const it1 = sub[Symbol.asyncIterator]();
    await it1.next();
    const err = await c
      .subscribe({ all: true })
      [Symbol.asyncIterator]()
      .next()
      .then(
        () => undefined,
        (e: unknown) => e as { code: string; details: { reason?: string } },
      );
    expect(err?.code).toBe('PLX_CHRONACTA_OVERLOADED');
    expect(err?.details.reason).toBe('subscriptions');
    sub.close();

    // From 127.0.0.1 the test already holds 2 connections (the client's and `raw`): 1 more fits.
    const codes: (number | undefined)[] = [];
    for (let i = 0; i < 3; i++) {
      const x = http2.connect(`http://${m.address}`);
      x.on('error', () => {});
      sessions.push(x);
      let code: number | undefined;
      x.on('goaway', (g) => {
        code = g;
      });
      x.on('close', () => codes.push(code));
    }
    await until(async () => (codes.length >= 2 ? true : undefined), {
      timeoutMs: 20_000,
      what: 'two connections refused',
      intervalMs: 25,
    });
    // A PING answered on each session still open: a GOAWAY for it would have come first.
    for (const x of sessions.filter((y) => !y.closed && !y.destroyed))
      await new Promise<void>((r) => (x.ping(() => r()) ? undefined : r()));
    expect(codes).toEqual([http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM]);
    // The member still serves the connections it took.
    await c.append('long', [{ type: 'c' }]);
  }, 120_000);
});
