/**
 * StaticReader.adopt on real node:tls connections: a connection a tls.Server accepted
 * decrypts into the reader's one buffer, after the bytes it had already decrypted, in
 * order; and a 2-rank mesh (rank 1 accepts rank 0's connection) moves a large message in
 * both directions intact.
 */
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import * as tls from 'node:tls';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FrameType } from '../../ts/codec/sperli-frame.js';
import { type MeshOptions, openMesh } from '../../ts/sperli/mesh.js';
import { READ_BUFFER, StaticReader } from '../../ts/sperli/static-reader.js';
import type { RankTransport, TransportFrame } from '../../ts/sperli/transport.js';
import { makeTestJob, type TestJob } from '../helpers/sperli-job.js';
import { until } from '../helpers/until.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

let job: TestJob;
beforeAll(async () => {
  job = await makeTestJob({ size: 2, hosts: ['127.0.0.1', '127.0.0.1'] });
}, 60_000);

/** A mutually authenticated TLS 1.3 pair: the server side (accepted) and the client side. */
async function pair(): Promise<{ accepted: tls.TLSSocket; client: tls.TLSSocket }> {
  const server = tls.createServer({
    ca: [job.ca.cert],
    cert: job.creds[1]!.cert,
    key: job.creds[1]!.key,
    requestCert: true,
    rejectUnauthorized: true,
    minVersion: 'TLSv1.3',
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const accepted = new Promise<tls.TLSSocket>((resolve) => server.once('secureConnection', resolve));
  const client = tls.connect({
    host: '127.0.0.1',
    port: (server.address() as AddressInfo).port,
    ca: [job.ca.cert],
    cert: job.creds[0]!.cert,
    key: job.creds[0]!.key,
    minVersion: 'TLSv1.3',
    checkServerIdentity: () => undefined,
  });
  cleanup.push(async () => {
    client.destroy();
    server.close();
    await once(server, 'close');
  });
  await once(client, 'secureConnect');
  const s = await accepted;
  cleanup.push(() => {
    s.destroy();
  });
  return { accepted: s, client };
}

function pattern(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (i * 31 + seed) & 0xff;
  return out;
}

describe('StaticReader.adopt (the reads of an accepted TLS connection)', () => {
  it('takes what arrived before it, then every read lands in its one buffer, in order', async () => {
    const { accepted, client } = await pair();
    const early = pattern(1000, 1);
    client.write(early);
    // Wait until the accepted side has decrypted the early bytes (held in its readable buffer).
    await until(() => accepted.readableLength >= early.length, { what: 'the early bytes decrypted' });
    const reader = StaticReader.adopt(accepted);
    expect(reader).toBeInstanceOf(StaticReader);
    const r = reader as StaticReader;
    const later = pattern(3 * READ_BUFFER + 123, 7);
    const got: number[] = [];
    let transientReads = 0;
    let inOwnBuffer = 0;
    let total = 0;
    const done = new Promise<void>((resolve) => {
      r.attach((bytes, transient) => {
        if (transient) transientReads++;
        if (bytes.buffer === r.buffer.buffer) inOwnBuffer++;
        for (const b of bytes) got.push(b);
        total += bytes.length;
        if (total === early.length + later.length) resolve();
      });
    });
    // The socket gives no 'data' events any more: every read goes to the reader.
    let dataEvents = 0;
    accepted.on('data', () => dataEvents++);
    client.write(later);
    await done;
    expect(got.length).toBe(early.length + later.length);
    expect(Buffer.from(got.slice(0, early.length)).equals(Buffer.from(early))).toBe(true);
    expect(Buffer.from(got.slice(early.length)).equals(Buffer.from(later))).toBe(true);
    expect(transientReads).toBeGreaterThanOrEqual(4);
    expect(inOwnBuffer).toBe(transientReads);
    expect(dataEvents).toBe(0);
    // The end of the connection still reaches the socket.
    const closed = once(accepted, 'close');
    client.end();
    await closed;
  });

  it('leaves a socket that already has a data listener as it is', async () => {
    const { accepted, client } = await pair();
    const seen: Buffer[] = [];
    accepted.on('data', (d: Buffer) => seen.push(d));
    expect(StaticReader.adopt(accepted)).toBeUndefined();
    client.write(pattern(10, 3));
    await until(() => seen.length > 0, { what: 'the first data event' });
    expect([...Buffer.concat(seen)]).toEqual([...pattern(10, 3)]);
  });
});

describe('a 2-rank mesh with an adopted accepted connection', () => {
  const LOOP: MeshOptions = { silenceMs: 3000, heartbeatMs: 500, connectTimeoutMs: 5000, retryMs: 50 };

  it('carries a 5 MiB frame each way intact, and the small frames around it in order', async () => {
    const fresh = await makeTestJob({ size: 2 });
    const ts: RankTransport[] = await Promise.all(fresh.descriptions.map((d) => openMesh(d, LOOP)));
    for (const t of ts) cleanup.push(() => t.close());
    const frames: [number, TransportFrame][][] = [[], []];
    for (const t of ts) {
      t.onFrame((peer, f) => {
        if (f.incoming !== undefined) throw new Error('streams are not enabled here');
        frames[t.rank]!.push([peer, f]);
      });
    }
    const big = [pattern(5 << 20, 11), pattern(5 << 20, 13)];
    for (const t of ts) {
      const peer = 1 - t.rank;
      await t.send(peer, FrameType.DATA, 1, Uint8Array.of(t.rank, 1));
      await t.send(peer, FrameType.DATA, 2, big[t.rank]!);
      await t.send(peer, FrameType.DATA, 3, Uint8Array.of(t.rank, 3));
    }
    await until(() => frames[0]!.length >= 3 && frames[1]!.length >= 3, {
      timeoutMs: 20_000,
      what: 'three frames at each rank',
    });
    for (const rank of [0, 1]) {
      const from = 1 - rank;
      const got = frames[rank]!;
      expect(got.map(([p, f]) => [p, f.tag])).toEqual([
        [from, 1],
        [from, 2],
        [from, 3],
      ]);
      expect([...got[0]![1].payload]).toEqual([from, 1]);
      expect(Buffer.from(got[1]![1].payload).equals(Buffer.from(big[from]!))).toBe(true);
      expect([...got[2]![1].payload]).toEqual([from, 3]);
    }
    for (const t of ts) expect(t.failure).toBeUndefined();
  }, 30_000);
});
