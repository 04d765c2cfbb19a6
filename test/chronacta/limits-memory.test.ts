/**
 * The gRPC port's memory bounds with real `plexus chronacta serve` processes (dist/): a client
 * that stops reading its responses, subscribers that never read, and connections whose
 * requests never finish arriving. Each case reads the server's RSS from /proc and asserts it
 * stays under a bound that the server without these limits passed by far (see the numbers in
 * each case), that calls beyond a bound end with RESOURCE_EXHAUSTED, and that what was held is
 * given back after the stall or request timeout.
 */
import type http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { GrpcStatus } from '../../ts/chronacta/grpc-server.js';
import { until } from '../helpers/until.js';
import { tempDir } from './helpers.js';
import {
  connect,
  MIB,
  metric,
  rawCall,
  request,
  rssBytes,
  rssSampler,
  type Served,
  serveProcess,
} from './limits-helpers.js';

const sessions: http2.ClientHttp2Session[] = [];
const servers: Served[] = [];
const removals: (() => Promise<void>)[] = [];

async function server(flags: readonly string[]): Promise<Served> {
  const t = await tempDir('limits');
  removals.push(t.remove);
  const s = await serveProcess(t.dir, flags);
  servers.push(s);
  return s;
}

async function open(address: string, localAddress?: string): Promise<http2.ClientHttp2Session> {
  const s = await connect(address, localAddress);
  sessions.push(s);
  return s;
}

afterAll(async () => {
  for (const s of sessions) s.destroy();
  for (const s of servers) await s.stop();
  for (const r of removals) await r();
});

/** Appends `count` events of `size` bytes to `stream`, 1 MiB per append. */
async function fill(address: string, stream: string, count: number, size: number): Promise<void> {
  const client = new ChronactaClient(address, { deadlineMs: 60_000 });
  try {
    const per = Math.max(1, Math.floor(MIB / size));
    for (let i = 0; i < count; i += per) {
      const n = Math.min(per, count - i);
      await client.append(
        stream,
        Array.from({ length: n }, () => ({ type: 'blob', data: Buffer.alloc(size, 7) })),
      );
    }
  } finally {
    client.close();
  }
}

describe('a client that stops reading', () => {
  let s: Served;
  beforeAll(async () => {
    // 1000 events of 8 KiB: a ReadStream of the whole stream is a 4 MiB response.
    s = await server(['--stall-timeout-ms', '6000']);
    await fill(s.address, 'big', 1000, 8192);
  }, 120_000);

  it('gets at most its connection budget (128 MiB) buffered, RESOURCE_EXHAUSTED beyond it, and the stalled calls reset', async () => {
    const base = rssBytes(s.pid);
    const rss = rssSampler(s.pid);
    const session = await open(s.address);
    const calls = [];
    // 150 reads of about 4 MiB each (a read's response stops at 4 MiB), none of which is read,
    // one after the other as a client pipelining them does. Without bounds the server held
    // them all.
    let refused = 0;
    for (let i = 0; i < 150; i++) {
      const c = rawCall(session, 'ReadStream', request('ReadStream', { stream: 'big', maxCount: 1000 }));
      calls.push(c);
      const h = await c.headers;
      if (Number(h['grpc-status']) === GrpcStatus.RESOURCE_EXHAUSTED) refused++;
    }
    const peak = rss.peak();
    rss.stop();
    console.log(
      `server RSS: ${Math.round(base / MIB)} MiB at the start, peak ${Math.round((peak - base) / MIB)} MiB above it`,
    );
    console.log(`reads taken: ${150 - refused}, refused: ${refused}`);
    expect(refused).toBeGreaterThan(0);
    // (On a loaded machine the first reads may already be reset by the stall timeout and free room for later ones.)
    const ends = await Promise.all(calls.map((c) => c.closed));
    const refusal = ends.find((e) => e.status !== undefined);
    expect(refusal?.status).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(refusal?.message).toMatch(/read the responses already sent/);
    // 128 MiB of responses, one more being built, and the collector's slack.
    expect(peak - base).toBeLessThan(330 * MIB);
    // Nothing taken for 6 s: every accepted read is reset (ENHANCE_YOUR_CALM: RESOURCE_EXHAUSTED at grpc-js).
    const reset = ends.filter((e) => e.rstCode === 11).length;
    expect(reset).toBe(150 - refused);
    await until(async () => (await metric(s.metrics, 'chronacta_grpc_buffered_bytes')) === 0, {
      timeoutMs: 20_000,
      what: 'no bytes held',
      intervalMs: 50,
    });
    expect(await metric(s.metrics, 'chronacta_grpc_limited_total', 'reason="stalled"')).toBe(reset);
    expect(await metric(s.metrics, 'chronacta_grpc_limited_total', 'reason="buffered_bytes"')).toBe(refused);
    // A client that reads is served in full afterwards.
    const reader = rawCall(
      await open(s.address),
      'ReadStream',
      request('ReadStream', { stream: 'big', maxCount: 1000 }),
      {
        read: true,
      },
    );
    const done = await reader.closed;
    expect(done.status).toBe(GrpcStatus.OK);
    expect(done.bytes).toBeGreaterThan(3 * MIB);
  }, 120_000);
});

describe('subscribers that never read', () => {
  it('are capped per connection and in total (RESOURCE_EXHAUSTED beyond), and reset after the stall timeout', async () => {
    const s = await server([
      '--max-subscriptions',
      '100',
      '--max-subscriptions-per-connection',
      '25',
      '--stall-timeout-ms',
      '8000',
    ]);
    // 4000 events of 2 KiB: each subscriber from the start holds a page of them while it waits.
    await fill(s.address, 'sub', 4000, 2048);
    const base = rssBytes(s.pid);
    const rss = rssSampler(s.pid);
    const calls = [];
    for (let c = 0; c < 20; c++) {
      const session = await open(s.address);
      for (let i = 0; i < 30; i++) {
        calls.push(rawCall(session, 'Subscribe', request('Subscribe', { all: { fromPosition: '1' } })));
      }
    }
    const heads = await Promise.all(calls.map((c) => c.headers));
    const refused = heads.filter((h) => Number(h['grpc-status']) === GrpcStatus.RESOURCE_EXHAUSTED).length;
    // Appends go on meanwhile (the subscribers' live queues do not slow them).
    const client = new ChronactaClient(s.address, { deadlineMs: 20_000 });
    const started = Date.now();
    await client.append('other', [{ type: 'x', data: Buffer.alloc(100) }]);
    expect(Date.now() - started).toBeLessThan(5000);
    client.close();
    const peak = rss.peak();
    rss.stop();
    console.log(
      `server RSS: ${Math.round(base / MIB)} MiB at the start, peak ${Math.round((peak - base) / MIB)} MiB above it`,
    );
    // 100 subscribers of at most a page (256 x 2 KiB) and a stream buffer each.
    expect(peak - base).toBeLessThan(250 * MIB);
    // 25 of each connection's 30 until 100 are open: 100 accepted, 500 refused.
    expect(refused).toBe(600 - 100);
    const ends = await Promise.all(calls.map((c) => c.closed));
    expect(ends.filter((e) => e.rstCode === 11).length).toBe(100);
    expect(await metric(s.metrics, 'chronacta_subscriptions_active')).toBe(0);
    expect(await metric(s.metrics, 'chronacta_grpc_limited_total', 'reason="subscriptions"')).toBe(500);
  }, 120_000);
});

describe('requests that never finish arriving', () => {
  it('are refused beyond the byte budget and end with DEADLINE_EXCEEDED after the request timeout', async () => {
    const s = await server(['--max-buffered-bytes', String(64 * MIB), '--request-timeout-ms', '5000']);
    const base = rssBytes(s.pid);
    const rss = rssSampler(s.pid);
    // 12 connections, each starting an append of 70 MiB and sending 24 MiB of it: 288 MiB
    // that the old server kept for good.
    const prefix = Buffer.alloc(5);
    prefix.writeUInt32BE(70 * MIB, 1);
    const chunk = Buffer.alloc(MIB, 1);
    const calls = [];
    for (let c = 0; c < 12; c++) {
      const session = await open(s.address);
      const call = rawCall(session, 'Append', prefix, { end: false, read: true });
      calls.push(call);
      // One connection after the other: the first ones fill the budget, the later ones are refused.
      for (let i = 0; i < 24; i++) await new Promise((r) => call.stream.write(chunk, r));
    }
    const ends = await Promise.all(calls.map((c) => c.closed));
    const peak = rss.peak();
    rss.stop();
    console.log(
      `server RSS: ${Math.round(base / MIB)} MiB at the start, peak ${Math.round((peak - base) / MIB)} MiB above it`,
    );
    const statuses = ends.map((e) => e.status);
    expect(statuses.filter((x) => x === GrpcStatus.RESOURCE_EXHAUSTED).length).toBeGreaterThan(0);
    expect(statuses.filter((x) => x === GrpcStatus.DEADLINE_EXCEEDED).length).toBeGreaterThan(0);
    expect(
      ends.filter((e) => e.status !== GrpcStatus.RESOURCE_EXHAUSTED && e.status !== GrpcStatus.DEADLINE_EXCEEDED),
    ).toEqual([]);
    const timedOut = ends.find((e) => e.status === GrpcStatus.DEADLINE_EXCEEDED);
    expect(timedOut?.message).toMatch(/did not arrive in full within 5000 ms/);
    expect(peak - base).toBeLessThan(200 * MIB);
    await until(async () => (await metric(s.metrics, 'chronacta_grpc_buffered_bytes')) === 0, {
      timeoutMs: 20_000,
      what: 'no bytes held',
      intervalMs: 50,
    });
    // The server still takes a whole append of 40 MiB.
    const session = await open(s.address);
    const whole = rawCall(
      session,
      'Append',
      request('Append', {
        stream: 'after',
        events: Array.from({ length: 8 }, () => ({ type: 'big', data: Buffer.alloc(5 * MIB, 2) })),
      }),
      { read: true },
    );
    expect((await whole.closed).status).toBe(GrpcStatus.OK);
  }, 120_000);
});
