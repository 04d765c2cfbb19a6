/**
 * Requests that protobufjs decodes without complaint but the server must refuse, on a real
 * server over loopback, sent as raw bytes by a node:http2 client: a ReadStream (and ReadAll,
 * Delete, Truncate) whose stream name is not UTF-8 (Append already refuses it), and a read
 * whose direction is not FORWARDS (0) or BACKWARDS (1). Each ends INVALID_ARGUMENT with
 * PLX_CHRONACTA_BAD_INPUT in the trailers; before, the name was read with U+FFFD in place
 * of the bad byte and direction 99 was read as forwards.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpcFrame as frame } from '../../ts/codec/grpc-frame.js';
import { type Running, serve, tempDir } from './helpers.js';

interface Reply {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  body: Buffer;
}

function call(port: number, method: string, message: Uint8Array): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const req = session.request({
      ':method': 'POST',
      ':path': `/plexus.chronacta.v1.EventStore/${method}`,
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    let headers: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on('response', (h) => {
      headers = h;
    });
    req.on('trailers', (t) => {
      trailers = t;
    });
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => {});
    req.on('close', () => {
      session.close();
      resolve({ headers, trailers, body: Buffer.concat(chunks) });
    });
    req.end(Buffer.from(frame(message)));
  });
}

function statusOf(r: Reply): { code: number; message: string; plexusCode: string | undefined } {
  const src = r.trailers['grpc-status'] !== undefined ? r.trailers : r.headers;
  const code = src['plexus-code'];
  return {
    code: Number(src['grpc-status']),
    message: decodeURIComponent(String(src['grpc-message'] ?? '')),
    plexusCode: typeof code === 'string' ? code : undefined,
  };
}

/** A protobuf LEN field. */
function len(field: number, bytes: number[]): number[] {
  return [(field << 3) | 2, bytes.length, ...bytes];
}

/** A protobuf varint field (values below 128). */
function varint(field: number, v: number): number[] {
  return [field << 3, v];
}

const A_FF_B = [0x61, 0xff, 0x62];
const ORDERS = [...Buffer.from('orders-1')];

describe('read requests protobufjs lets through', () => {
  let tmp: { dir: string; remove: () => Promise<void> };
  let run: Running;
  let port: number;
  beforeAll(async () => {
    tmp = await tempDir('request-check');
    run = await serve(tmp.dir);
    port = run.server.port;
    await run.client.append('orders-1', [{ type: 'a' }, { type: 'b' }]);
    // The name protobufjs makes of a\xffb, if it were taken: it must stay unread and unwritten.
    await run.client.append('a\ufffdb', [{ type: 'replacement' }]);
  });
  afterAll(async () => {
    await run?.stop();
    await tmp?.remove();
  });

  it('refuses a ReadStream whose stream name is not UTF-8, as Append does', async () => {
    const read = statusOf(await call(port, 'ReadStream', Uint8Array.from(len(1, A_FF_B))));
    expect(read).toMatchObject({ code: 3, plexusCode: 'PLX_CHRONACTA_BAD_INPUT' });
    expect(read.message).toContain('stream is not UTF-8');
    const append = statusOf(
      await call(port, 'Append', Uint8Array.from([...len(1, A_FF_B), ...len(2, [0x12, 1, 0x74])])),
    );
    expect(append).toMatchObject({ code: 3, plexusCode: 'PLX_CHRONACTA_BAD_INPUT' });
    // A type filter that is not UTF-8, and the other methods that take a stream name.
    const types = statusOf(await call(port, 'ReadStream', Uint8Array.from([...len(1, ORDERS), ...len(5, A_FF_B)])));
    expect(types).toMatchObject({ code: 3, plexusCode: 'PLX_CHRONACTA_BAD_INPUT' });
    expect(types.message).toContain('types is not UTF-8');
    const prefix = statusOf(await call(port, 'ReadAll', Uint8Array.from(len(4, A_FF_B))));
    expect(prefix).toMatchObject({ code: 3, plexusCode: 'PLX_CHRONACTA_BAD_INPUT' });
    for (const m of ['Delete', 'Truncate']) {
      const s = statusOf(await call(port, m, Uint8Array.from(len(1, A_FF_B))));
      expect(s, m).toMatchObject({ code: 3, plexusCode: 'PLX_CHRONACTA_BAD_INPUT' });
    }
    // Nothing was deleted or truncated under the U+FFFD name.
    expect((await run.client.readStream('a\ufffdb')).events.map((e) => e.type)).toEqual(['replacement']);
  });

  it('refuses a direction that is neither FORWARDS nor BACKWARDS', async () => {
    const stream = statusOf(await call(port, 'ReadStream', Uint8Array.from([...len(1, ORDERS), ...varint(2, 99)])));
    expect(stream).toMatchObject({ code: 3, plexusCode: 'PLX_CHRONACTA_BAD_INPUT' });
    expect(stream.message).toContain('direction 99');
    const all = statusOf(await call(port, 'ReadAll', Uint8Array.from(varint(1, 2))));
    expect(all).toMatchObject({ code: 3, plexusCode: 'PLX_CHRONACTA_BAD_INPUT' });
    expect(all.message).toContain('direction 2');
  });

  it('still serves well-formed reads, in both directions', async () => {
    const fwd = await call(port, 'ReadStream', Uint8Array.from([...len(1, ORDERS), ...varint(2, 0)]));
    expect(statusOf(fwd).code).toBe(0);
    const back = await call(port, 'ReadStream', Uint8Array.from([...len(1, ORDERS), ...varint(2, 1)]));
    expect(statusOf(back).code).toBe(0);
    const r = await run.client.readStream('orders-1', { direction: 'backwards' });
    expect(r.events.map((e) => e.type)).toEqual(['b', 'a']);
    // Non-ASCII UTF-8 names are fine.
    await run.client.append('zähler-1', [{ type: 'x' }]);
    expect((await run.client.readStream('zähler-1')).events).toHaveLength(1);
  });
});
