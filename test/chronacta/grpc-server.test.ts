/**
 * The lean gRPC server (grpc-server.ts) on the wire: a raw node:http2 client checks the
 * framing, the statuses and trailers, deadlines and cancellation; the Chronacta server
 * behind it is checked with the grpc-js client for deadlines and metadata that is not
 * ASCII.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import {
  type CallStatus,
  type GrpcMethod,
  type GrpcServer,
  parseTimeout,
  startGrpcServer,
} from '../../ts/chronacta/grpc-server.js';
import { grpcFrame as frame } from '../../ts/codec/grpc-frame.js';
import { serve, tempDir } from './helpers.js';

interface Reply {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  body: Buffer;
}

function call(port: number, path: string, body: Buffer[], headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const req = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...headers,
    });
    let head: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on('response', (h) => {
      head = h;
    });
    req.on('trailers', (t) => {
      trailers = t;
    });
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => {});
    req.on('close', () => {
      session.close();
      resolve({ headers: head, trailers, body: Buffer.concat(chunks) });
    });
    // One byte per write: the server must put the message together.
    (async () => {
      for (const b of body) {
        await new Promise<void>((r) => req.write(b, () => r()));
      }
      req.end();
    })().catch(reject);
  });
}

/** The status of a reply: from the trailers, or from the headers of a trailers-only reply. */
function statusOf(r: Reply): { code: number; message: string } {
  const src = r.trailers['grpc-status'] !== undefined ? r.trailers : r.headers;
  return { code: Number(src['grpc-status']), message: decodeURI(String(src['grpc-message'] ?? '')) };
}

function bytesOf(f: Uint8Array): Buffer[] {
  return [...f].map((b) => Buffer.from([b]));
}

describe('the lean gRPC server', () => {
  let server: GrpcServer;
  const cancelled: string[] = [];
  beforeAll(async () => {
    const methods = new Map<string, GrpcMethod>([
      ['/t.T/Echo', { kind: 'unary', handle: async (req) => frame(req) }],
      [
        '/t.T/Fail',
        {
          kind: 'unary',
          handle: async () => {
            throw new Error('nope: ünïcode % sign');
          },
        },
      ],
      [
        '/t.T/Slow',
        {
          kind: 'unary',
          handle: (_req, ctx) =>
            new Promise((resolve) => {
              ctx.onCancel(() => cancelled.push('slow'));
              setTimeout(() => resolve(frame(Buffer.from('late'))), 400);
            }),
        },
      ],
      [
        '/t.T/Count',
        {
          kind: 'stream',
          handle: (req, s) => {
            const n = req[0] as number;
            for (let i = 0; i < n; i++) s.write(frame(Buffer.from([i])));
            s.end({ code: 9, details: 'done here', metadata: { 'x-n': String(n) } });
          },
        },
      ],
    ]);
    server = await startGrpcServer('127.0.0.1', 0, methods, {
      maxMessageBytes: 1024,
      statusOf: (e): CallStatus => ({ code: 13, details: (e as Error).message, metadata: { 'x-kind': 'test' } }),
    });
  });
  afterAll(async () => {
    await server.close();
  });

  it('puts a message sent one byte at a time together, and answers with one framed message and OK', async () => {
    const r = await call(server.port, '/t.T/Echo', bytesOf(frame(Buffer.from('hello'))));
    expect(r.headers[':status']).toBe(200);
    expect(r.headers['content-type']).toBe('application/grpc+proto');
    expect(r.headers.date).toBeUndefined();
    expect(r.headers['grpc-encoding']).toBeUndefined();
    expect(statusOf(r)).toEqual({ code: 0, message: '' });
    expect([...r.body]).toEqual([...frame(Buffer.from('hello'))]);
  });

  it('ends a failed call with a trailers-only reply: status, percent-encoded message, metadata', async () => {
    const r = await call(server.port, '/t.T/Fail', [Buffer.from(frame(Buffer.from('x')))]);
    expect(r.body.length).toBe(0);
    expect(statusOf(r)).toEqual({ code: 13, message: 'nope: ünïcode % sign' });
    expect(r.headers['x-kind']).toBe('test');
  });

  it('answers a request that is not gRPC with HTTP 415', async () => {
    const r = await call(server.port, '/t.T/Echo', [Buffer.from('hi')], { 'content-type': 'text/plain' });
    expect(r.headers[':status']).toBe(415);
  });

  it('answers an unknown method with UNIMPLEMENTED', async () => {
    const r = await call(server.port, '/t.T/Nothing', [Buffer.from(frame(Buffer.from('x')))]);
    expect(statusOf(r).code).toBe(12);
    expect(statusOf(r).message).toMatch(/no method \/t\.T\/Nothing/);
  });

  it('refuses a message above the limit from its length alone, and compressed or missing messages', async () => {
    const head = Buffer.from([0, 0, 0, 0x10, 0]); // 4096 bytes announced, none sent
    const big = await call(server.port, '/t.T/Echo', [head]);
    expect(statusOf(big).code).toBe(8);
    expect(statusOf(big).message).toMatch(/4096 bytes is above the limit of 1024/);
    const z = await call(server.port, '/t.T/Echo', [Buffer.from([1, 0, 0, 0, 1, 0])]);
    expect(statusOf(z).code).toBe(12);
    expect(z.headers['grpc-accept-encoding']).toBe('identity');
    const none = await call(server.port, '/t.T/Echo', []);
    expect(statusOf(none).code).toBe(12);
    const two = await call(server.port, '/t.T/Echo', [
      Buffer.concat([frame(Buffer.from('a')), frame(Buffer.from('b'))]),
    ]);
    expect(statusOf(two).code).toBe(12);
    const enc = await call(server.port, '/t.T/Echo', [Buffer.from(frame(Buffer.from('a')))], {
      'grpc-encoding': 'gzip',
    });
    expect(statusOf(enc).code).toBe(12);
  });

  it('ends a call at its grpc-timeout with DEADLINE_EXCEEDED and tells the handler', async () => {
    const r = await call(server.port, '/t.T/Slow', [Buffer.from(frame(Buffer.from('x')))], { 'grpc-timeout': '50m' });
    expect(statusOf(r).code).toBe(4);
    expect(r.body.length).toBe(0);
    expect(cancelled).toContain('slow');
    const bad = await call(server.port, '/t.T/Echo', [Buffer.from(frame(Buffer.from('x')))], {
      'grpc-timeout': 'soon',
    });
    expect(statusOf(bad).code).toBe(13);
  });

  it('streams messages, then ends with the status in trailers', async () => {
    const r = await call(server.port, '/t.T/Count', [Buffer.from(frame(Buffer.from([3])))]);
    expect([...r.body]).toEqual([0, 1, 2].flatMap((i) => [...frame(Buffer.from([i]))]));
    expect(r.trailers['grpc-status']).toBe('9');
    expect(r.trailers['grpc-message']).toBe('done%20here');
    expect(r.trailers['x-n']).toBe('3');
  });

  it('reads grpc-timeout in every unit', () => {
    expect(parseTimeout('2H')).toBe(7_200_000);
    expect(parseTimeout('3M')).toBe(180_000);
    expect(parseTimeout('4S')).toBe(4000);
    expect(parseTimeout('29999m')).toBe(29_999);
    expect(parseTimeout('1500u')).toBe(1.5);
    expect(parseTimeout('2000000n')).toBe(2);
    expect(parseTimeout('123456789m')).toBeUndefined();
    expect(parseTimeout('5x')).toBeUndefined();
  });
});

describe('Chronacta on the lean server, through grpc-js', () => {
  it('carries details that are not ASCII back to the client unchanged', async () => {
    const t = await tempDir('lean');
    const r = await serve(t.dir);
    try {
      await r.client.append('ström-日本', [{ type: 'a' }]);
      const err = await r.client.append('ström-日本', [{ type: 'a' }], { expectedVersion: 5n }).catch((e) => e);
      expect(err.code).toBe('PLX_CHRONACTA_WRONG_EXPECTED_VERSION');
      expect(err.details.stream).toBe('ström-日本');
      expect(err.details.actual).toBe(0n);
      expect(err.message).toMatch(/ström-日本/);
      // A deadline the server cannot meet: the client's own deadline, then its status.
      const quick = new ChronactaClient(r.server.address, { deadlineMs: 1 });
      const late = await quick.compact().catch((e) => e);
      expect(['PLX_CHRONACTA_TIMEOUT']).toContain(late.code);
      quick.close();
      expect((await r.client.readStream('ström-日本')).events).toHaveLength(1);
      // Messages that are not protobuf: refused as bad input, on the hand-written codec and on protobufjs.
      for (const method of ['Append', 'ReadAll']) {
        const bad = await call(r.server.port, `/plexus.chronacta.v1.EventStore/${method}`, [
          Buffer.from(frame(Buffer.from([0x0a, 0x09, 0x61]))),
        ]);
        expect(statusOf(bad).code).toBe(3);
        expect(bad.headers['plexus-code']).toBe('PLX_CHRONACTA_BAD_INPUT');
      }
    } finally {
      await r.stop();
      await t.remove();
    }
  });
});
