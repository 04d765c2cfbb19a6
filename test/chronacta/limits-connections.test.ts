/**
 * The gRPC port's connection bounds and timeouts with real `plexus chronacta serve` processes
 * (dist/): a flood of idle connections under a low open-file limit (appends and /readyz keep
 * working), /readyz recovering once a failed append's cause has gone, connections per client,
 * streams per connection, idle connections, a grpc-timeout beyond a timer's reach, and the
 * limit flags' checks.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { GrpcStatus, parseTimeout } from '../../ts/chronacta/grpc-server.js';
import { runNode } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import { tempDir } from './helpers.js';
import { connect, MAIN, metric, rawCall, readyz, request, type Served, serveProcess } from './limits-helpers.js';

const servers: Served[] = [];
const removals: (() => Promise<void>)[] = [];
const sockets: net.Socket[] = [];
const sessions: http2.ClientHttp2Session[] = [];
const clients: ChronactaClient[] = [];

async function server(flags: readonly string[], files?: number): Promise<Served> {
  const t = await tempDir('limits');
  removals.push(t.remove);
  const s = await serveProcess(t.dir, flags, files);
  servers.push(s);
  return s;
}

function client(address: string): ChronactaClient {
  const c = new ChronactaClient(address, { deadlineMs: 10_000 });
  clients.push(c);
  return c;
}

afterAll(async () => {
  for (const c of clients) c.close();
  for (const s of sockets) s.destroy();
  for (const s of sessions) s.destroy();
  for (const s of servers) await s.stop();
  for (const r of removals) await r();
});

/** How long a flood the server cannot account for is given to use up its files. */
const SETTLE_MS = 1000;

/**
 * `count` idle TCP connections to `address` from 127.0.0.2 (another client than the test's
 * own); resolves once `settled()` says the server took or dropped them all, or (without it)
 * after `SETTLE_MS`.
 */
async function flood(address: string, count: number, settled?: () => Promise<boolean>): Promise<net.Socket[]> {
  const port = Number(address.slice(address.lastIndexOf(':') + 1));
  const out: net.Socket[] = [];
  for (let i = 0; i < count; i++) {
    const s = net.connect({ host: '127.0.0.1', port, localAddress: '127.0.0.2' });
    s.on('error', () => {});
    out.push(s);
    sockets.push(s);
  }
  await Promise.all(
    out.map((s) => new Promise<void>((r) => (s.connecting ? s.once('connect', r).once('close', r) : r()))),
  );
  if (settled)
    await until(settled, {
      timeoutMs: 20_000,
      what: `the server to take or drop ${count} connections`,
      intervalMs: 50,
    });
  // A server out of file descriptors neither takes nor drops a connection and its metrics port
  // does not answer either: nothing marks the moment its files are used up but time.
  else await new Promise((r) => setTimeout(r, SETTLE_MS));
  return out;
}

/** 2 appends of 100 KiB: with 64 KiB segments, each opens a new segment file. */
async function appendSome(c: ChronactaClient): Promise<void> {
  for (let i = 0; i < 2; i++) {
    await c.append(
      's',
      Array.from({ length: 50 }, () => ({ type: 't', data: Buffer.alloc(2048, 1) })),
    );
  }
}

const readyzSoon = (metrics: string) =>
  Promise.race([
    readyz(metrics),
    new Promise<{ status: number; body: string }>((r) => setTimeout(() => r({ status: 0, body: 'no answer' }), 5000)),
  ]);

describe('a flood of idle connections', () => {
  it('is cut at --max-connections (by default half the open-file limit): appends and /readyz keep working', async () => {
    // 200 open files: the default bound is 100 connections. The server without it took all
    // 300, and its appends failed with EMFILE when they opened a segment.
    const s = await server(['--segment-bytes', '65536'], 200);
    const c = client(s.address);
    await appendSome(c);
    // Every flood connection either holds a connection slot or was refused for want of one.
    const idle = await flood(s.address, 300, async () => {
      const limited = await metric(s.metrics, 'chronacta_grpc_limited_total', 'reason="connections"');
      return limited + (await metric(s.metrics, 'chronacta_grpc_connections')) >= 300;
    });
    await appendSome(c);
    expect((await readyzSoon(s.metrics)).status).toBe(200);
    expect(await metric(s.metrics, 'chronacta_grpc_limited_total', 'reason="connections"')).toBeGreaterThan(150);
    expect(await metric(s.metrics, 'chronacta_grpc_connections')).toBeLessThanOrEqual(100);
    for (const x of idle) x.destroy();
    await appendSome(c);
  }, 120_000);

  it('makes /readyz fail while appends fail for want of files, and /readyz recovers once they are gone', async () => {
    // A connection bound above the open-file limit lets the flood use up the files.
    const s = await server(['--segment-bytes', '65536', '--max-connections', '1000'], 200);
    const c = client(s.address);
    await appendSome(c);
    const idle = await flood(s.address, 300);
    const failed = await appendSome(c).then(
      () => undefined,
      (e: unknown) => e as { code?: string; message: string },
    );
    expect(failed?.message).toMatch(/EMFILE/);
    for (const x of idle) x.destroy();
    // The old server kept answering 503 with the EMFILE failure for good.
    await until(async () => (await readyzSoon(s.metrics)).status === 200, {
      timeoutMs: 20_000,
      what: '/readyz to recover',
      intervalMs: 50,
    });
    await appendSome(c);
    const r = await readyz(s.metrics);
    expect(r.status).toBe(200);
  }, 120_000);
});

describe('connections and streams', () => {
  it('refuses connections beyond --max-connections-per-client with GOAWAY; other clients go on', async () => {
    const s = await server(['--max-connections-per-client', '20']);
    const closed: (number | undefined)[] = [];
    const mine: http2.ClientHttp2Session[] = [];
    for (let i = 0; i < 40; i++) {
      const x = http2.connect(`http://${s.address}`, {
        localAddress: '127.0.0.2',
      } as http2.ClientSessionOptions);
      x.on('error', () => {});
      let code: number | undefined;
      x.on('goaway', (c) => {
        code = c;
      });
      x.on('close', () => closed.push(code));
      sessions.push(x);
      mine.push(x);
      await new Promise<void>((r) => x.once('connect', () => r()).once('close', () => r()));
    }
    await until(() => closed.length >= 20, { timeoutMs: 20_000, what: '20 connections closed', intervalMs: 50 });
    // The server counts the sessions it admitted: 20 of them open (with 20 closed of 40) leaves
    // none that a 21st GOAWAY could still close.
    await until(async () => (await metric(s.metrics, 'chronacta_grpc_connections')) >= 20, {
      timeoutMs: 20_000,
      what: 'the 20 admitted sessions counted',
      intervalMs: 50,
    });
    expect(closed.length).toBe(20);
    expect(closed.every((c) => c === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM)).toBe(true);
    expect(await metric(s.metrics, 'chronacta_grpc_limited_total', 'reason="connections_per_client"')).toBe(20);
    // Another address is not affected, and the count goes down as connections close.
    await client(s.address).append('s', [{ type: 't' }]);
    for (const x of mine) x.destroy();
    await until(async () => (await metric(s.metrics, 'chronacta_grpc_connections')) <= 1, {
      timeoutMs: 20_000,
      what: 'closed',
      intervalMs: 50,
    });
    const again = await connect(s.address, '127.0.0.2');
    sessions.push(again);
    const call = rawCall(again, 'ReadStream', request('ReadStream', { stream: 's' }), { read: true });
    expect((await call.closed).status).toBe(GrpcStatus.OK);
  }, 120_000);

  it('announces --max-concurrent-streams and closes connections idle for --idle-timeout-ms', async () => {
    const s = await server(['--max-concurrent-streams', '8', '--idle-timeout-ms', '1000']);
    const idle = await connect(s.address);
    const busy = await connect(s.address);
    sessions.push(idle, busy);
    // SETTINGS_MAX_CONCURRENT_STREAMS (the old server announced none: unlimited).
    await until(() => idle.remoteSettings.maxConcurrentStreams === 8, {
      timeoutMs: 10_000,
      what: 'the server SETTINGS',
      intervalMs: 50,
    });
    // An open subscription keeps its connection.
    const sub = rawCall(busy, 'Subscribe', request('Subscribe', { all: {} }), { read: true });
    await sub.headers;
    const goaway = await new Promise<number>((r) => idle.once('goaway', (code) => r(code)));
    expect(goaway).toBe(http2.constants.NGHTTP2_NO_ERROR);
    await until(() => idle.closed || idle.destroyed, {
      timeoutMs: 10_000,
      what: 'the idle connection closed',
      intervalMs: 50,
    });
    expect(busy.closed).toBe(false);
    expect(await metric(s.metrics, 'chronacta_grpc_limited_total', 'reason="idle"')).toBeGreaterThanOrEqual(1);
    sub.stream.close();
  }, 60_000);
});

describe('a grpc-timeout beyond a timer', () => {
  it('neither fails at once nor writes and then fails: a 30-day deadline appends once', async () => {
    const s = await server([]);
    // The project's client with a 30-day deadline (the old server answered DEADLINE_EXCEEDED
    // at once and still wrote the event).
    const c = new ChronactaClient(s.address, { deadlineMs: 30 * 24 * 3600 * 1000 });
    clients.push(c);
    const r = await c.append('long', [{ type: 'a' }]);
    expect(r.lastVersion).toBe(0n);
    // Any client: the largest grpc-timeout the header takes (99999999 hours).
    const session = await connect(s.address);
    sessions.push(session);
    const call = rawCall(session, 'Append', request('Append', { stream: 'long', events: [{ type: 'b' }] }), {
      read: true,
      headers: { 'grpc-timeout': '99999999H' },
    });
    expect((await call.closed).status).toBe(GrpcStatus.OK);
    const read = await c.readStream('long');
    expect(read.events.map((e) => e.type)).toEqual(['a', 'b']);
    // A short deadline still ends a call that waits: a subscription with a 300 ms grpc-timeout.
    const sub = rawCall(session, 'Subscribe', request('Subscribe', { all: {} }), {
      read: true,
      headers: { 'grpc-timeout': '300m' },
    });
    expect((await sub.closed).status).toBe(GrpcStatus.DEADLINE_EXCEEDED);
  }, 60_000);
});

describe("the project's client", () => {
  it('gets PLX_CHRONACTA_OVERLOADED naming the limit for a subscription beyond --max-subscriptions', async () => {
    const s = await server(['--max-subscriptions', '1']);
    const c = client(s.address);
    const first = c.subscribe({ all: true });
    const it1 = first[Symbol.asyncIterator]();
    expect((await it1.next()).value?.kind).toBe('caughtUp');
    const second = c.subscribe({ all: true });
    const err = await second[Symbol.asyncIterator]()
      .next()
      .then(
        () => undefined,
        (e: unknown) => e as { code: string; details: { reason?: string } },
      );
    expect(err?.code).toBe('PLX_CHRONACTA_OVERLOADED');
    expect(err?.details.reason).toBe('subscriptions');
    first.close();
  }, 60_000);

  it('never sends a grpc-timeout beyond the longest timer (2^31 - 1 ms), whatever its deadline', async () => {
    // A bare HTTP/2 server on loopback that records the header and answers UNAVAILABLE.
    const seen: string[] = [];
    const h2 = http2.createServer();
    h2.on('stream', (stream, headers) => {
      seen.push(String(headers['grpc-timeout']));
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '14' }, { endStream: true });
    });
    await new Promise<void>((r) => h2.listen(0, '127.0.0.1', () => r()));
    const port = (h2.address() as net.AddressInfo).port;
    try {
      for (const days of [30, 365, 24.9]) {
        const c = new ChronactaClient(`127.0.0.1:${port}`, { deadlineMs: days * 24 * 3600 * 1000 });
        await c.readStream('x').catch(() => undefined);
        c.close();
      }
    } finally {
      await new Promise((r) => h2.close(r));
    }
    expect(seen.length).toBe(3);
    for (const v of seen) expect(parseTimeout(v)).toBeLessThanOrEqual(2 ** 31 - 1);
  });
});

describe('the limit flags', () => {
  it('refuses a bound out of its range with a usage error (exit 2)', async () => {
    const run = (...args: string[]) =>
      runNode(MAIN, ['chronacta', 'serve', ...args], { timeoutMs: 60_000 }).then((r) => ({
        code: r.code,
        stderr: r.stderr,
      }));
    for (const args of [
      ['--max-connections', '0'],
      ['--stall-timeout-ms', '5'],
      ['--max-buffered-bytes', 'lots'],
      ['--request-timeout-ms', String(2 ** 31)],
    ]) {
      const r = await run(...args);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(args[0]);
    }
  }, 60_000);
});
