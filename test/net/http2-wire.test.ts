import * as http2 from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import { CLUSTER_HEADER_SIZE, type ClusterFrame } from '../../ts/codec/cluster-frame.js';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { fnv1a64 } from '../../ts/core/index.js';
import { createClusterCa, issueNodeCertificate, nodeOfName, nodeOfPeer } from '../../ts/net/ca.js';
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

async function rejection(p: Promise<unknown>): Promise<PlexusError> {
  try {
    await p;
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  throw new Error('expected a rejection');
}

describe('cluster CA names', () => {
  it('maps node names to node ids only for the own cluster', async () => {
    expect(nodeOfName('a.c1.plexus.internal', 'c1')).toBe('a');
    expect(nodeOfName('a.c2.plexus.internal', 'c1')).toBeUndefined();
    expect(nodeOfName('x.a.c1.plexus.internal', 'c1')).toBeUndefined();
    expect(nodeOfPeer({ subjectaltname: 'DNS:a.c1.plexus.internal' }, 'c1')).toBe('a');
    expect(nodeOfPeer({ subjectaltname: 'DNS:a.c1.plexus.internal, DNS:b.c1.plexus.internal' }, 'c1')).toBeUndefined();
    const ca = await createClusterCa('c9');
    await expect(issueNodeCertificate(ca, 'Bad_Name')).rejects.toMatchObject({ code: 'PLX_WIRE_BAD_NAME' });
  });
});

describe('Http2Wire over mutual TLS 1.3', () => {
  let net: Http2Net | undefined;
  const extra: Http2Wire[] = [];
  afterEach(async () => {
    await net?.close();
    net = undefined;
    for (const w of extra.splice(0)) await w.close();
  });

  it('refuses a certificate of a foreign CA in the TLS handshake', async () => {
    net = await http2Net(['a']);
    const seen: ClusterFrame[] = [];
    net.wires.get('a')?.onFrame(async (_from, fr) => {
      seen.push(fr);
      return 'stored';
    });
    // Same cluster name and node name, but another CA.
    const foreignCa = await createClusterCa('c1');
    const foreign = await issueNodeCertificate(foreignCa, 'b');
    const own = await nodeCreds('a');
    const w = new Http2Wire({
      self: 'b',
      cluster: 'c1',
      tls: { cert: foreign.cert, key: foreign.key, ca: own.ca },
      resolve: (p) => net?.addresses.get(p),
      isMember: () => true,
      deliveryDeadlineMs: 600,
      retryBackoffMs: 20,
    });
    extra.push(w);
    const e = await rejection(w.send('a', f('vt:b', 'vt:a', 0)));
    expect(e.code).toBe('PLX_WIRE_DEADLINE');
    expect(seen).toHaveLength(0);
    expect(
      net.wires
        .get('a')
        ?.refusals()
        .some((r) => r.code === 'PLX_WIRE_UNTRUSTED'),
    ).toBe(true);
  });

  it('refuses a server whose certificate does not name the node dialled', async () => {
    net = await http2Net(['a', 'b']);
    const seen: ClusterFrame[] = [];
    net.wires.get('b')?.onFrame(async (_from, fr) => {
      seen.push(fr);
      return 'stored';
    });
    const creds = await nodeCreds('c');
    const w = new Http2Wire({
      self: 'c',
      cluster: 'c1',
      tls: creds,
      // 'a' resolves to b's address: b's certificate does not name a.
      resolve: () => net?.addresses.get('b'),
      isMember: () => true,
      deliveryDeadlineMs: 500,
      retryBackoffMs: 20,
    });
    extra.push(w);
    const e = await rejection(w.send('a', f('vt:c', 'vt:a', 0)));
    expect(e.code).toBe('PLX_WIRE_DEADLINE');
    expect(String((e.cause as Error | undefined)?.message)).toContain('does not name a.c1.plexus.internal');
    expect(seen).toHaveLength(0);
  });

  it('refuses an oversized frame from its header, before reading the payload', async () => {
    net = await http2Net(['a', 'b']);
    let handled = 0;
    net.wires.get('a')?.onFrame(async () => {
      handled++;
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
    const stream = session.request({ ':method': 'POST', ':path': '/plexus/frames' }, { endStream: false });
    const header = new Uint8Array(CLUSTER_HEADER_SIZE);
    new DataView(header.buffer).setUint32(0, 2 * 1024 * 1024, true); // 2 MiB claimed
    header[4] = 1;
    header[5] = 1;
    stream.write(header);
    const code = await new Promise<number>((resolve) => {
      stream.on('error', () => {});
      stream.on('close', () => resolve(stream.rstCode ?? -1));
    });
    session.destroy();
    expect(code).toBe(http2.constants.NGHTTP2_PROTOCOL_ERROR);
    expect(handled).toBe(0);
    expect(
      net.wires
        .get('a')
        ?.refusals()
        .some((r) => r.code === 'PLX_WIRE_FRAME_TOO_LARGE' && r.peer === 'b'),
    ).toBe(true);
  });

  it('resends unacknowledged frames after a lost connection; the receiver stores each message once', async () => {
    net = await http2Net(['a', 'b'], { deliveryDeadlineMs: 5000 });
    const ids = new Map<string, number>();
    const order: string[] = [];
    net.wires.get('b')?.onFrame(async (_from, fr) => {
      const id = Buffer.from(fr.messageId).toString('hex');
      ids.set(id, (ids.get(id) ?? 0) + 1);
      order.push(new TextDecoder().decode(fr.payload));
      // A receiver that takes a moment per message, so that most are still in flight below.
      await new Promise((r) => setTimeout(r, 1));
      return 'stored';
    });
    const a = net.wires.get('a') as Http2Wire;
    const sends = Array.from({ length: 100 }, (_, i) => a.send('b', f('vt:x', 'vt:y', i)));
    // The connection is lost with some messages stored and most not yet.
    await until(() => order.length >= 5, { what: 'the first messages stored' });
    a.disconnect('b');
    const verdicts = await Promise.all(sends);
    expect(verdicts.every((v) => v === 'stored' || v === 'duplicate')).toBe(true);
    expect([...ids.values()].every((n) => n === 1)).toBe(true);
    expect(ids.size).toBe(100);
    // Each message was stored once and the pair's order held.
    expect(order).toEqual(Array.from({ length: 100 }, (_, i) => `${i}`));
  });

  it('sends ACKs on one ACK stream per connection; when it fails, unacknowledged frames are sent again', async () => {
    net = await http2Net(['a', 'b'], { poolSize: 1 });
    const b = net.wires.get('b') as Http2Wire;
    const a = net.wires.get('a') as Http2Wire;
    let hold: (() => void) | undefined;
    const held = new Promise<void>((r) => {
      hold = r;
    });
    const stored = new Map<string, number>();
    b.onFrame(async (_from, fr) => {
      const k = new TextDecoder().decode(fr.payload);
      stored.set(k, (stored.get(k) ?? 0) + 1);
      if (k === '5') await held;
      return 'stored';
    });
    expect(await a.send('b', f('vt:s', 'vt:t', -1))).toBe('stored');
    const sinks = [
      ...(b as unknown as { inbound: { serverSessions: Set<{ plexusAcks?: { stream: http2.Http2Stream } }> } }).inbound
        .serverSessions,
    ].map((s) => s.plexusAcks);
    expect(sinks.length).toBe(1);
    expect(sinks[0]).toBeDefined();
    const sends = Array.from({ length: 10 }, (_, i) => a.send('b', f('vt:s', 'vt:t', i)));
    await until(() => stored.has('5'), { what: 'frame 5 stored' });
    // Frames 0..4 are stored and may be acknowledged; the ACK stream now fails.
    sinks[0]?.stream.close(http2.constants.NGHTTP2_CANCEL);
    hold?.();
    const verdicts = await Promise.all(sends);
    expect(verdicts.every((v) => v === 'stored' || v === 'duplicate')).toBe(true);
    // Every message reached the handler once, in order, whatever was sent again.
    for (let i = 0; i < 10; i++) expect(stored.get(`${i}`)).toBe(1);
  });

  it('keeps per-pair order when pairs beyond the stream cap share streams, over a pool of connections', async () => {
    net = await http2Net(['a', 'b'], { streamCap: 3, poolSize: 2 });
    const got = new Map<string, number[]>();
    net.wires.get('b')?.onFrame(async (_from, fr) => {
      const k = `${fr.sender}>${fr.target}`;
      got.set(k, [...(got.get(k) ?? []), Number(new TextDecoder().decode(fr.payload))]);
      return 'stored';
    });
    const a = net.wires.get('a') as Http2Wire;
    const sends: Promise<unknown>[] = [];
    for (let i = 0; i < 30; i++) for (let p = 0; p < 10; p++) sends.push(a.send('b', f(`vt:s${p}`, 'vt:t', i)));
    await Promise.all(sends);
    expect(got.size).toBe(10);
    for (const seq of got.values()) expect(seq).toEqual(Array.from({ length: 30 }, (_, i) => i));
  });
});

describe('DedupCache', () => {
  it('remembers the last `capacity` ids and forgets the oldest first', async () => {
    const { DedupCache } = await import('../../ts/net/receiver.js');
    const d = new DedupCache(3);
    for (const id of ['a', 'b', 'c', 'b', 'd']) d.add(id);
    expect(['a', 'b', 'c', 'd'].map((x) => d.has(x))).toEqual([false, true, true, true]);
    expect(d.size).toBe(3);
    for (let i = 0; i < 100_000; i++) d.add(`k${i}`);
    expect(d.size).toBe(3);
    expect(d.has('k99999') && d.has('k99997') && !d.has('k99996')).toBe(true);
  });
});

describe('Http2Wire backpressure', () => {
  it('a slow consumer holds its stream’s sender; the receiver’s buffered bytes stay bounded; others flow', async () => {
    const net = await http2Net(['a', 'b'], { deliveryDeadlineMs: 30_000 });
    try {
      const { BoundedMailbox } = await import('../../ts/cluster/mailbox.js');
      const slow = new BoundedMailbox<ClusterFrame>(4);
      let fast = 0;
      const b = net.wires.get('b') as Http2Wire;
      b.onFrame(async (_from, fr) => {
        if (fr.target === 'vt:slow') await slow.put(fr);
        else fast++;
        return 'stored';
      });
      const a = net.wires.get('a') as Http2Wire;
      const big = new Uint8Array(4096);
      // 4 MiB for a mailbox of 4 that nobody empties yet.
      const slowSends = Array.from({ length: 1024 }, () =>
        a.send('b', { shard: 1, epoch: 1n, sender: 'vt:s', target: 'vt:slow', payload: big }),
      );
      let settled = 0;
      for (const p of slowSends) void p.then(() => settled++);
      await until(() => slow.size === 4, { what: 'the slow mailbox to fill' });
      // The fast pair's frames follow the slow pair's on the same connection: once they are all
      // stored, every byte of the slow pair that the sender could send has reached the receiver.
      await Promise.all(Array.from({ length: 200 }, (_, i) => a.send('b', f('vt:x', 'vt:fast', i))));
      // Read-ahead (64 KiB) plus one stream window (256 KiB) plus a chunk at most.
      expect(b.inboundBufferedBytes()).toBeLessThanOrEqual(64 * 1024 + 256 * 1024 + 32 * 1024);
      expect(slow.size).toBe(4);
      expect(settled).toBeLessThanOrEqual(5);
      expect(fast).toBe(200);
      // Emptying the mailbox lets the slow pair finish, in order.
      const drained: number[] = [];
      const drain = (async () => {
        while (drained.length < 1024) {
          await slow.next();
          drained.push(1);
        }
      })();
      const verdicts = await Promise.all(slowSends);
      await drain;
      expect(verdicts.every((v) => v === 'stored')).toBe(true);
    } finally {
      await net.close();
    }
  });

  it('past the stream cap, a full mailbox slows exactly the pairs hashed to its stream', async () => {
    const net = await http2Net(['a', 'b'], { streamCap: 2, poolSize: 1 });
    try {
      const { BoundedMailbox } = await import('../../ts/cluster/mailbox.js');
      const slow = new BoundedMailbox<ClusterFrame>(2);
      const got: string[] = [];
      const b = net.wires.get('b') as Http2Wire;
      b.onFrame(async (_from, fr) => {
        if (fr.target === 'vt:slow') await slow.put(fr);
        got.push(`${fr.sender}>${fr.target}#${new TextDecoder().decode(fr.payload)}`);
        return 'stored';
      });
      const a = net.wires.get('a') as Http2Wire;
      // The first two pairs take streams 0 and 1; later pairs share them by hash.
      await a.send('b', f('vt:s0', 'vt:slow', -1));
      await slow.next();
      await a.send('b', f('vt:s1', 'vt:other', -1));
      const slotOf = (sender: string, target: string) => Number(fnv1a64(`${sender}\u0000${target}`) % 2n);
      const later = Array.from({ length: 40 }, (_, i) => `vt:p${i}`);
      const onSlow = later.find((s) => slotOf(s, 'vt:t') === 0) as string;
      const onOther = later.find((s) => slotOf(s, 'vt:t') === 1) as string;
      expect(onSlow && onOther).toBeTruthy();
      // Fill the slow mailbox and leave one more frame waiting to be stored.
      const slowSends = Array.from({ length: 4 }, (_, i) => a.send('b', f('vt:s0', 'vt:slow', i)));
      await until(() => slow.size >= 2, { what: 'two frames in the slow mailbox' });
      const blocked = a.send('b', f(onSlow, 'vt:t', 0));
      let blockedDone = false;
      void blocked.then(() => {
        blockedDone = true;
      });
      // A pair on the other stream flows while the slow stream is held.
      expect(await a.send('b', f(onOther, 'vt:t', 0))).toBe('stored');
      expect(await a.send('b', f('vt:s1', 'vt:other', 0))).toBe('stored');
      // One more round trip on the other stream, sent after the blocked frame on the same
      // connection: had the blocked frame been stored, its verdict would be in by now.
      await a.send('b', f('vt:s1', 'vt:other', 1));
      expect(blockedDone).toBe(false);
      expect(got).not.toContain(`${onSlow}>vt:t#0`);
      // Emptying the mailbox releases the shared stream, in order.
      const drain = (async () => {
        for (let i = 0; i < 4; i++) await slow.next();
      })();
      expect(await Promise.all(slowSends)).toEqual(new Array(4).fill('stored'));
      expect(await blocked).toBe('stored');
      await drain;
      const i0 = got.indexOf('vt:s0>vt:slow#3');
      expect(i0).toBeGreaterThanOrEqual(0);
      expect(got.indexOf(`${onSlow}>vt:t#0`)).toBeGreaterThan(i0);
    } finally {
      await net.close();
    }
  });
});
