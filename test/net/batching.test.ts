/**
 * Batching on the wire, checked against hand-written HTTP/2 peers: a sender's frames of one
 * turn travel in one write; a receiver acknowledges them with ACK runs on the ACK stream; a
 * sender maps runs onto its frames by position, also after some of them passed their deadline.
 */
import * as http2 from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ACK_RUN_SIZE,
  AckRunReader,
  type ClusterFrame,
  ClusterFrameReader,
  encodeAckRun,
  encodeClusterFrame,
} from '../../ts/codec/cluster-frame.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { until } from '../helpers/until.js';
import { type Http2Net, http2Net, nodeCreds } from './helpers.js';

const enc = new TextEncoder();
const f = (sender: string, target: string, i: number) => ({
  shard: 1,
  epoch: 1n,
  sender,
  target,
  payload: enc.encode(`${i}`),
});

interface FakePeer {
  readonly address: string;
  /** Per frame stream: the chunks it received and the frames in them. */
  readonly streams: { id: number; chunks: number; frames: ClusterFrame[] }[];
  /** Writes ACK runs on the connection's ACK stream. */
  ack(runs: [number, number, number][]): void;
  /**
   * Resolves once the sender answered an HTTP/2 PING written after the last ACK runs went to
   * the socket: it has read them (its session hands DATA to the stream as it parses it, and
   * answers the PING after it).
   */
  readBack(): Promise<void>;
  close(): Promise<void>;
}

/** A peer 'b' speaking the wire's HTTP/2 paths by hand: it records frames and acknowledges only when told. */
async function fakePeer(): Promise<FakePeer> {
  const creds = await nodeCreds('b');
  const server = http2.createSecureServer({
    key: creds.key,
    cert: creds.cert,
    ca: creds.ca,
    requestCert: true,
    rejectUnauthorized: true,
    minVersion: 'TLSv1.3',
  });
  const streams: FakePeer['streams'] = [];
  let acks: http2.ServerHttp2Stream | undefined;
  let written: Promise<void> = Promise.resolve();
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('error', () => {});
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {});
    stream.respond({ ':status': 200 });
    if (headers[':path'] === '/plexus/ack-runs') {
      acks = stream;
      return;
    }
    const rec = { id: stream.id ?? 0, chunks: 0, frames: [] as ClusterFrame[] };
    streams.push(rec);
    const reader = new ClusterFrameReader();
    stream.on('data', (c: Buffer) => {
      rec.chunks++;
      reader.push(c);
      for (let fr = reader.next(); fr; fr = reader.next()) rec.frames.push(fr);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    address: `127.0.0.1:${port}`,
    streams,
    ack(runs) {
      const b = Buffer.alloc(runs.length * ACK_RUN_SIZE);
      runs.forEach(([sid, count, status], i) => {
        encodeAckRun(b, i * ACK_RUN_SIZE, sid, count, status);
      });
      const stream = acks;
      if (stream) written = new Promise<void>((r) => stream.write(b, () => r()));
    },
    async readBack() {
      await written;
      await new Promise<void>((resolve, reject) => {
        acks?.session?.ping((e) => (e ? reject(e) : resolve()));
      });
    },
    close: async () => {
      for (const s of sessions) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe('Http2Wire batches', () => {
  const cleanup: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  async function sender(peer: FakePeer, deliveryDeadlineMs = 5000): Promise<Http2Wire> {
    const w = new Http2Wire({
      self: 'a',
      cluster: 'c1',
      tls: await nodeCreds('a'),
      resolve: (n) => (n === 'b' ? peer.address : undefined),
      isMember: () => true,
      deliveryDeadlineMs,
      retryBackoffMs: 20,
      poolSize: 1,
    });
    cleanup.push(() => w.close());
    return w;
  }

  it('writes the frames a pair sends within one turn as one batch; one ACK run settles them all', async () => {
    const peer = await fakePeer();
    cleanup.push(() => peer.close());
    const a = await sender(peer);
    const sends = Array.from({ length: 200 }, (_, i) => a.send('b', f('vt:s', 'vt:t', i)));
    await until(() => (peer.streams[0]?.frames.length ?? 0) === 200, { timeoutMs: 5_000, what: '200 frames' });
    const s = peer.streams[0]!;
    // 200 frames of ~60 bytes: one write, at most a few DATA frames (16 KiB each).
    expect(s.chunks).toBeLessThanOrEqual(2);
    expect(s.frames.map((fr) => new TextDecoder().decode(fr.payload))).toEqual(
      Array.from({ length: 200 }, (_, i) => `${i}`),
    );
    peer.ack([
      [s.id, 150, 0],
      [s.id, 50, 1],
    ]);
    const verdicts = await Promise.all(sends);
    expect(verdicts.slice(0, 150).every((v) => v === 'stored')).toBe(true);
    expect(verdicts.slice(150).every((v) => v === 'duplicate')).toBe(true);
  });

  it('maps ACK runs onto frames by position after the oldest frames passed their deadline', async () => {
    const peer = await fakePeer();
    cleanup.push(() => peer.close());
    const a = await sender(peer, 400);
    const early = Array.from({ length: 5 }, (_, i) => a.send('b', f('vt:s', 'vt:t', i)));
    const earlyOutcome = early.map((p) =>
      p.then(
        () => 'acked',
        (e) => (isPlexusError(e) ? e.code : 'other'),
      ),
    );
    await until(() => (peer.streams[0]?.frames.length ?? 0) === 5, { timeoutMs: 5_000, what: 'the early frames' });
    // Part of the scenario: the late frames leave 200 ms after the early ones, so their
    // deadlines come after the early frames have expired.
    await new Promise((r) => setTimeout(r, 200));
    const late = Array.from({ length: 5 }, (_, i) => a.send('b', f('vt:s', 'vt:t', 5 + i)));
    let lateSettled = 0;
    for (const p of late) void p.then(() => lateSettled++);
    await until(() => (peer.streams[0]?.frames.length ?? 0) === 10, { timeoutMs: 5_000, what: 'the late frames' });
    // The early frames fail by their deadline while the peer holds their ACKs.
    expect(await Promise.all(earlyOutcome)).toEqual(Array(5).fill('PLX_WIRE_DEADLINE'));
    const sid = peer.streams[0]!.id;
    // The first five ACKs name the five expired frames: nothing of the late ones may settle.
    peer.ack([[sid, 5, 0]]);
    await peer.readBack();
    expect(lateSettled).toBe(0);
    peer.ack([[sid, 5, 1]]);
    expect(await Promise.all(late)).toEqual(Array(5).fill('duplicate'));
  });
  it('closes a connection whose peer acknowledges more frames than a stream carried, then sends again', async () => {
    const peer = await fakePeer();
    cleanup.push(() => peer.close());
    const a = await sender(peer);
    const sends = Array.from({ length: 3 }, (_, i) => a.send('b', f('vt:s', 'vt:t', i)));
    await until(() => (peer.streams[0]?.frames.length ?? 0) === 3, { timeoutMs: 5_000, what: 'three frames' });
    peer.ack([[peer.streams[0]!.id, 10, 0]]);
    await until(() => (peer.streams[1]?.frames.length ?? 0) === 3, {
      timeoutMs: 5_000,
      what: 'the frames sent again on a new connection',
    });
    expect(peer.streams[1]!.frames.map((fr) => new TextDecoder().decode(fr.payload))).toEqual(['0', '1', '2']);
    peer.ack([[peer.streams[1]!.id, 3, 1]]);
    expect(await Promise.all(sends)).toEqual(['duplicate', 'duplicate', 'duplicate']);
  });
});

describe('Http2Wire receiver', () => {
  let net: Http2Net | undefined;
  afterEach(async () => {
    await net?.close();
    net = undefined;
  });

  it('takes many frames from one chunk one by one, in order, and answers with a few ACK runs, the first ones early', async () => {
    net = await http2Net(['a', 'b']);
    const seen: string[] = [];
    let inHandler = 0;
    let maxInHandler = 0;
    net.wires.get('a')?.onFrame(async (_from, fr) => {
      inHandler++;
      maxInHandler = Math.max(maxInHandler, inHandler);
      for (let i = 0; i < 3; i++) await Promise.resolve();
      seen.push(new TextDecoder().decode(fr.payload));
      inHandler--;
      return 'stored';
    });
    const b = await nodeCreds('b');
    const session = http2.connect(`https://${net.addresses.get('a')}`, {
      ca: b.ca,
      cert: b.cert,
      key: b.key,
      servername: 'a.c1.plexus.internal',
      minVersion: 'TLSv1.3',
    });
    session.on('error', () => {});
    const acks = session.request({ ':method': 'POST', ':path': '/plexus/ack-runs' }, { endStream: false });
    const runs: [number, number, number][] = [];
    const reader = new AckRunReader();
    acks.on('data', (c: Buffer) => reader.feed(c, (sid, count, status) => runs.push([sid, count, status])));
    await new Promise((r) => acks.once('response', r));
    const stream = session.request({ ':method': 'POST', ':path': '/plexus/frames' }, { endStream: false });
    const frames = Array.from({ length: 100 }, (_, i) =>
      encodeClusterFrame({
        shard: 1,
        epoch: 1n,
        messageId: new Uint8Array(16).fill(i),
        sender: 'vt:b',
        target: 'vt:a',
        payload: enc.encode(`${i}`),
      }),
    );
    // A repeat of frame 7 at the end: answered duplicate.
    stream.write(Buffer.concat([...frames, frames[7]!]));
    await until(() => runs.reduce((n, r) => n + r[1], 0) === 101, { timeoutMs: 5_000, what: '101 acknowledgements' });
    session.destroy();
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => `${i}`));
    expect(maxInHandler).toBe(1);
    expect(runs.every((r) => r[0] === stream.id)).toBe(true);
    expect(runs.length).toBeLessThan(20);
    // The first ACKs of the turn go out after 8 frames, the next after 16 more: the sender can
    // send again while the rest are stored.
    expect(runs[0]).toEqual([stream.id, 8, 0]);
    expect(runs[1]).toEqual([stream.id, 16, 0]);
    expect(runs[runs.length - 1]).toEqual([stream.id, 1, 1]);
    expect(runs.slice(0, -1).every((r) => r[2] === 0)).toBe(true);
  });
});
