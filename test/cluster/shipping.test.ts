/**
 * Journal shipping (ts/cluster/shipping.ts, docs/shard-shipping.md) between two FileLogs in
 * temporary directories (fsync on), over a real mutual-TLS 1.3 connection on loopback with
 * the cluster's node certificates: a journal of a few MiB shipped whole and verified record
 * by record (and again after reopening the receiver's log); a connection cut midway and the
 * stream resumed from the receiver's end; a record corrupted on the wire refused with nothing
 * from its chunk on stored; a lower epoch refused on both sides; a slow receiver keeping the
 * bytes in flight, as seen on the wire, within the window.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Duplex } from 'node:stream';
import * as tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShipReceiver, ShipSender } from '../../ts/cluster/shipping.js';
import { encodeShipChunk, type ShipFrame, ShipStream } from '../../ts/codec/shard-shipping.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { createClusterCa, issueNodeCertificate, nodeIdentityPolicy } from '../../ts/net/ca.js';
import { freePort } from '../../ts/net/ports.js';
import { type TlsEndpoint, tlsEndpoint } from '../../ts/net/tls-endpoint.js';
import { openLog } from '../../ts/storage/index.js';
import { refusal } from '../helpers/refusal.js';
import { journal, SlowLog, sameRecords } from './shipping-helpers.js';

const KIB = 1024;
const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'plexus-ship-'));
  dirs.push(d);
  return d;
}

let senderEnd: TlsEndpoint<string>;
let receiverEnd: TlsEndpoint<string>;
let server: tls.Server;
let port: number;
/** What the server does with the next accepted connection from node `b`. */
let onAccept: (socket: tls.TLSSocket) => void = (s) => s.destroy();
const sockets = new Set<tls.TLSSocket>();

beforeAll(async () => {
  const ca = await createClusterCa('ship');
  const a = await issueNodeCertificate(ca, 'a');
  const b = await issueNodeCertificate(ca, 'b');
  const policy = nodeIdentityPolicy('ship');
  senderEnd = tlsEndpoint({ cert: a.cert, key: a.key, ca: a.ca }, policy);
  receiverEnd = tlsEndpoint({ cert: b.cert, key: b.key, ca: b.ca }, policy);
  server = tls.createServer(senderEnd.serverOptions());
  server.on('secureConnection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    if (senderEnd.accept(s).identity !== 'b') s.destroy();
    else onAccept(s);
  });
  server.on('tlsClientError', () => {});
  port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
}, 30_000);

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise<void>((r) => server.close(() => r()));
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Node b dials node a over mutual TLS 1.3 (a's certificate bound in the handshake). */
function dial(): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect(
      receiverEnd.clientOptions(
        { expect: 'a', mismatch: (n) => new Error(`the server is ${String(n)}`) },
        { host: '127.0.0.1', port },
      ),
    );
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.once('secureConnect', () => {
      expect(s.getProtocol()).toBe('TLSv1.3');
      resolve(s);
    });
    s.once('error', reject);
  });
}

/** The server side of the next connection, handed to `use` (wrapped by `wrap` first). */
function nextAccepted<T>(use: (conn: Duplex) => Promise<T>, wrap: (s: tls.TLSSocket) => Duplex = (s) => s): Promise<T> {
  const p = new Promise<T>((resolve, reject) => {
    onAccept = (s) => {
      onAccept = (x) => x.destroy();
      use(wrap(s)).then(resolve, reject);
    };
  });
  // Awaited by the test later: a refusal before then is not unhandled.
  p.catch(() => {});
  return p;
}

/**
 * The sender's socket seen through a tap: every frame it writes passes `change` (by its index)
 * and is decoded as written; every frame it reads is decoded too.
 */
function tap(
  socket: tls.TLSSocket,
  seen: { written: { frame: ShipFrame; bytes: number }[]; read: ShipFrame[] },
  change: (frame: Buffer, index: number) => Buffer = (f) => f,
): Duplex {
  const out = new ShipStream();
  const inn = new ShipStream();
  let index = 0;
  const d = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      for (const f of out.push(new Uint8Array(chunk))) seen.written.push({ frame: f, bytes: chunk.length });
      socket.write(change(chunk, index++), (e) => cb(e ?? null));
    },
    final(cb) {
      socket.end();
      cb();
    },
    destroy(err, cb) {
      socket.destroy();
      cb(err);
    },
  });
  socket.on('data', (b: Buffer) => {
    seen.read.push(...inn.push(new Uint8Array(b)));
    if (!d.push(b)) socket.pause();
  });
  socket.on('end', () => d.push(null));
  socket.on('close', () => d.destroy());
  return d;
}

describe('journal shipping over mutual TLS', () => {
  it('ships a journal of a few MiB whole: every record, epoch and batch id, durable across reopen, within the window', async () => {
    const source = await journal(tempDir(), 400, 8 * KIB); // about 3.1 MiB
    const dir = tempDir();
    const target = await openLog(dir, { fsync: 'batch' });
    const window = 512 * KIB;
    const sender = new ShipSender({
      sourceOf: (s) => (s === 7 ? { log: source, epoch: 5n } : undefined),
      window,
      maxChunk: 128 * KIB,
    });
    const receiver = new ShipReceiver({ shard: 7, log: target, window, maxChunk: 128 * KIB });
    const served = nextAccepted((c) => sender.serve(c));
    const conn = await dial();
    const got = await receiver.receive(conn);
    const sent = await served;
    conn.destroy();
    expect(got).toMatchObject({ shard: 7, epoch: 5n, from: 0n, end: source.last, records: 400 });
    expect(sent).toMatchObject({
      shard: 7,
      epoch: 5n,
      from: 0n,
      end: source.last,
      records: 400,
      window,
      maxChunk: 128 * KIB,
    });
    expect(sent.chunks).toBeGreaterThan(20);
    expect(sent.bytes).toBeGreaterThan(3 * 1024 * KIB);
    expect(sent.maxInFlight).toBeLessThanOrEqual(window);
    expect(got.maxHeld).toBeLessThanOrEqual(window);
    expect(receiver.acceptedEpoch).toBe(5n);
    await sameRecords(source, target, source.last);
    expect(target.highestEpoch).toBe(4n);
    await target.close();
    const reopened = await openLog(dir, { fsync: 'batch' });
    await sameRecords(source, reopened, source.last);
    // A second stream on the same journal ships nothing and verifies the end.
    const again = new ShipReceiver({ shard: 7, log: reopened });
    const served2 = nextAccepted((c) => sender.serve(c));
    const conn2 = await dial();
    expect(await again.receive(conn2)).toMatchObject({ from: source.last, end: source.last, records: 0 });
    expect((await served2).records).toBe(0);
    conn2.destroy();
    await reopened.close();
    await source.close();
  }, 120_000);

  it('resumes after a cut connection from the end the receiver holds, shipping only what follows it', async () => {
    const source = await journal(tempDir(), 240, 8 * KIB);
    const target = await openLog(tempDir(), { fsync: 'batch' });
    const sender = new ShipSender({
      sourceOf: () => ({ log: source, epoch: 9n }),
      window: 256 * KIB,
      maxChunk: 64 * KIB,
    });
    let conn: tls.TLSSocket | undefined;
    // The receiver's connection is cut once a third of the journal is stored.
    const slow = new SlowLog(target, 2, (log) => {
      if (log.last >= 80n) conn?.destroy();
    });
    const receiver = new ShipReceiver({ shard: 1, log: slow, window: 256 * KIB, maxChunk: 64 * KIB });
    const served = nextAccepted((c) => sender.serve(c));
    conn = await dial();
    const cut = await refusal(receiver.receive(conn));
    expect(cut.code).toBe('PLX_SHIP_CLOSED');
    expect((await refusal(served)).code).toBe('PLX_SHIP_CLOSED');
    const held = target.last;
    expect(cut.details.held).toBe(Number(held));
    expect(held).toBeGreaterThanOrEqual(80n);
    expect(held).toBeLessThan(source.last);
    await sameRecords(source, target, held);

    conn = undefined;
    const resumed = new ShipReceiver({ shard: 1, log: target, window: 256 * KIB, maxChunk: 64 * KIB });
    const served2 = nextAccepted((c) => sender.serve(c));
    const conn2 = await dial();
    const got = await resumed.receive(conn2);
    const sent = await served2;
    conn2.destroy();
    expect(got).toMatchObject({ from: held, end: source.last, records: Number(source.last - held) });
    expect(sent).toMatchObject({ from: held, records: Number(source.last - held) });
    await sameRecords(source, target, source.last);
    await target.close();
    await source.close();
  }, 120_000);

  it('refuses a record corrupted on the wire (PLX_SHIP_BAD_CRC on both sides) and stores nothing from its chunk on', async () => {
    const source = await journal(tempDir(), 120, 4 * KIB);
    const target = await openLog(tempDir(), { fsync: 'batch' });
    const sender = new ShipSender({
      sourceOf: () => ({ log: source, epoch: 4n }),
      window: 128 * KIB,
      maxChunk: 64 * KIB,
    });
    const receiver = new ShipReceiver({ shard: 2, log: target, window: 128 * KIB, maxChunk: 64 * KIB });
    const seen = { written: [] as { frame: ShipFrame; bytes: number }[], read: [] as ShipFrame[] };
    // The third frame the sender writes (a chunk) gets its last byte (inside its last record's payload) flipped.
    const served = nextAccepted(
      (c) => sender.serve(c),
      (s) =>
        tap(s, seen, (f, i) => {
          if (i !== 2) return f;
          const g = Buffer.from(f);
          g[g.length - 1] = (g[g.length - 1] as number) ^ 0x40;
          return g;
        }),
    );
    const conn = await dial();
    const bad = await refusal(receiver.receive(conn));
    const third = seen.written[2]?.frame;
    if (third?.type !== 'chunk') throw new Error('the third frame written was not a chunk');
    expect(bad.code).toBe('PLX_SHIP_BAD_CRC');
    expect(bad.details.position).toBe(Number(third.last));
    const peer = await refusal(served);
    expect(peer.code).toBe('PLX_SHIP_BAD_CRC');
    expect(peer.details.peer).toBe(true);
    expect(peer.details.position).toBe(Number(third.last));
    expect(target.last).toBe(third.first - 1n);
    await sameRecords(source, target, target.last);
    conn.destroy();
    await target.close();
    await source.close();
  }, 120_000);

  it('refuses a stream of a lower epoch than the receiver accepted: the sender at OPEN, the receiver at a chunk', async () => {
    const source = await journal(tempDir(), 16, 1 * KIB);
    const target = await openLog(tempDir(), { fsync: 'batch' });
    const sender = new ShipSender({ sourceOf: () => ({ log: source, epoch: 5n }) });
    const receiver = new ShipReceiver({ shard: 3, log: target, acceptedEpoch: 6n });
    const served = nextAccepted((c) => sender.serve(c));
    const conn = await dial();
    const mine = await refusal(receiver.receive(conn));
    expect(mine.code).toBe('PLX_SHIP_STALE_EPOCH');
    expect(mine.details.peer).toBe(true);
    expect((await refusal(served)).code).toBe('PLX_SHIP_STALE_EPOCH');
    expect(target.last).toBe(0n);
    conn.destroy();

    // A sender that does not check (raw frames): the receiver refuses its chunk itself.
    const answered: ShipFrame[] = [];
    const raw = nextAccepted(
      (c) =>
        new Promise<void>((resolve) => {
          const stream = new ShipStream();
          c.on('data', (b: Buffer) => {
            for (const f of stream.push(new Uint8Array(b))) {
              answered.push(f);
              if (f.type === 'open') {
                c.write(
                  encodeShipChunk(3, 2n, [
                    {
                      position: f.end + 1n,
                      epoch: 2n,
                      batchId: new Uint8Array(16),
                      payload: new Uint8Array([1, 2, 3]),
                    },
                  ]),
                );
              }
              if (f.type === 'refuse') resolve();
            }
          });
          c.on('close', () => resolve());
        }),
    );
    const conn2 = await dial();
    const stale = await refusal(receiver.receive(conn2));
    await raw;
    expect(stale.code).toBe('PLX_SHIP_STALE_EPOCH');
    expect(stale.details.peer).toBe(false);
    expect(answered.map((f) => f.type)).toEqual(['open', 'refuse']);
    expect(answered[0]).toMatchObject({ type: 'open', shard: 3, epoch: 6n, end: 0n });
    expect(answered[1]).toMatchObject({ type: 'refuse', reason: 1 });
    expect(target.last).toBe(0n);
    conn2.destroy();
    await target.close();
    await source.close();
  }, 60_000);

  it('keeps the bytes in flight within the window when the receiver is slow, as counted on the wire', async () => {
    const source = await journal(tempDir(), 256, 8 * KIB); // 2 MiB
    const target = await openLog(tempDir(), { fsync: 'batch' });
    const window = 192 * KIB;
    const maxChunk = 64 * KIB;
    const sender = new ShipSender({ sourceOf: () => ({ log: source, epoch: 5n }), window, maxChunk });
    const receiver = new ShipReceiver({ shard: 4, log: new SlowLog(target, 15), window, maxChunk });
    const seen = { written: [] as { frame: ShipFrame; bytes: number }[], read: [] as ShipFrame[] };
    // Bytes in flight on the wire: chunks written whose last position no ACK read so far covers.
    let maxOnWire = 0;
    let acked = 0n;
    const onWire = (): number => {
      let n = 0;
      for (const w of seen.written) if (w.frame.type === 'chunk' && w.frame.last > acked) n += w.bytes;
      return n;
    };
    const served = nextAccepted(
      (c) => sender.serve(c),
      (s) =>
        tap(s, seen, (f) => {
          // Counted as each frame goes out, after the tap decoded it.
          for (const r of seen.read) if (r.type === 'ack' && r.durable > acked) acked = r.durable;
          maxOnWire = Math.max(maxOnWire, onWire());
          return f;
        }),
    );
    const conn = await dial();
    const got = await receiver.receive(conn);
    const sent = await served;
    conn.destroy();
    expect(got.records).toBe(256);
    expect(sent.maxInFlight).toBeLessThanOrEqual(window);
    expect(got.maxHeld).toBeLessThanOrEqual(window);
    expect(maxOnWire).toBeLessThanOrEqual(window);
    // The window was used (more than one chunk in flight), so it is what held the sender back.
    expect(maxOnWire).toBeGreaterThan(maxChunk);
    expect(seen.written.filter((w) => w.frame.type === 'chunk').length).toBe(sent.chunks);
    for (const w of seen.written) expect(w.bytes).toBeLessThanOrEqual(maxChunk);
    await sameRecords(source, target, source.last);
    await target.close();
    await source.close();
  }, 120_000);

  it('refuses a receiver whose journal diverged at its end, a sender that compacted past it, and a sender whose journal has a newer epoch than its lease', async () => {
    const source = await journal(tempDir(), 32, 1 * KIB);
    const sender = new ShipSender({ sourceOf: () => ({ log: source, epoch: 5n }) });
    // Same length as the first 8 records, other bytes: refused at OPEN, nothing appended.
    const diverged = await journal(tempDir(), 8, 1 * KIB);
    const served = nextAccepted((c) => sender.serve(c));
    const conn = await dial();
    const mismatch = await refusal(new ShipReceiver({ shard: 0, log: diverged }).receive(conn));
    expect(mismatch.code).toBe('PLX_SHIP_END_MISMATCH');
    expect(mismatch.details.position).toBe(8);
    expect((await refusal(served)).code).toBe('PLX_SHIP_END_MISMATCH');
    expect(diverged.last).toBe(8n);
    conn.destroy();

    // A sender whose closed segments below the receiver's end + 1 are gone.
    const dir = tempDir();
    const small = await openLog(dir, { fsync: 'batch', segmentBytes: 4 * KIB });
    for (let i = 0; i < 12; i++) await small.append([randomBytes(1500)], { epoch: 1n });
    await small.compactBefore(10n);
    expect(small.first).toBeGreaterThan(1n);
    const compacting = new ShipSender({ sourceOf: () => ({ log: small, epoch: 1n }) });
    const empty = await openLog(tempDir(), { fsync: 'batch' });
    const served2 = nextAccepted((c) => compacting.serve(c));
    const conn2 = await dial();
    const compacted = await refusal(new ShipReceiver({ shard: 0, log: empty }).receive(conn2));
    expect(compacted.code).toBe('PLX_SHIP_COMPACTED');
    expect(compacted.details.position).toBe(1);
    expect((await refusal(served2)).code).toBe('PLX_SHIP_COMPACTED');
    expect(empty.last).toBe(0n);
    conn2.destroy();

    // A sender holding lease epoch 2 over records written at epoch 3 and 4 has lost its lease.
    const stale = new ShipSender({ sourceOf: () => ({ log: source, epoch: 2n }) });
    const served3 = nextAccepted((c) => stale.serve(c));
    const conn3 = await dial();
    expect((await refusal(new ShipReceiver({ shard: 0, log: empty }).receive(conn3))).code).toBe(
      'PLX_SHIP_STALE_EPOCH',
    );
    expect((await refusal(served3)).code).toBe('PLX_SHIP_STALE_EPOCH');
    expect(empty.last).toBe(0n);
    conn3.destroy();
    for (const l of [empty, small, diverged, source]) await l.close();
  }, 60_000);

  it('refuses a sender that breaks the protocol: a gap in positions, a window overrun, bytes that are not frames', async () => {
    /** A raw sender: answers OPEN with `reply(open)`, collects what the receiver sends back. */
    const rawSender = (reply: (open: ShipFrame & { type: 'open' }) => Uint8Array[]) => {
      const answered: ShipFrame[] = [];
      const done = nextAccepted(
        (c) =>
          new Promise<ShipFrame[]>((resolve) => {
            const stream = new ShipStream();
            c.on('data', (b: Buffer) => {
              for (const f of stream.push(new Uint8Array(b))) {
                answered.push(f);
                if (f.type === 'open') for (const bytes of reply(f)) c.write(bytes);
                if (f.type === 'refuse') resolve(answered);
              }
            });
            c.on('close', () => resolve(answered));
          }),
      );
      return done;
    };
    const rec = (position: bigint, size = 3) => ({
      position,
      epoch: 1n,
      batchId: new Uint8Array(16),
      payload: new Uint8Array(size),
    });
    const target = await openLog(tempDir(), { fsync: 'batch' });
    await target.append([new Uint8Array([9])], { epoch: 1n });

    // A chunk from 5 where 2 is due.
    let peer = rawSender(() => [encodeShipChunk(8, 1n, [rec(5n)])]);
    let conn = await dial();
    let e = await refusal(new ShipReceiver({ shard: 8, log: target }).receive(conn));
    expect(e.code).toBe('PLX_SHIP_BAD_FRAME');
    expect(e.details.position).toBe(5);
    expect((await peer).map((f) => f.type)).toEqual(['open', 'refuse']);
    conn.destroy();

    // Chunks of 40 KiB sent without waiting for an ACK, into a 64 KiB window of a slow log.
    peer = rawSender((open) => [
      encodeShipChunk(8, 1n, [rec(open.end + 1n, 40 * KIB)]),
      encodeShipChunk(8, 1n, [rec(open.end + 2n, 40 * KIB)]),
    ]);
    conn = await dial();
    e = await refusal(
      new ShipReceiver({ shard: 8, log: new SlowLog(target, 200), window: 64 * KIB, maxChunk: 64 * KIB }).receive(conn),
    );
    expect(e.code).toBe('PLX_SHIP_BAD_FRAME');
    expect(e.message).toContain('overran the window');
    const back = await peer;
    expect(back[back.length - 1]).toMatchObject({ type: 'refuse', reason: 7 });
    // The chunk within the window was stored and acknowledged; nothing after the overrun.
    expect(target.last).toBe(2n);
    conn.destroy();

    // Bytes that are not frames.
    peer = rawSender(() => [new TextEncoder().encode('HTTP/1.1 200 OK\r\n\r\n')]);
    conn = await dial();
    e = await refusal(new ShipReceiver({ shard: 8, log: target }).receive(conn));
    expect(e.code).toBe('PLX_SHIP_BAD_FRAME');
    expect(e.details.reason).toBe('magic');
    expect((await peer).map((f) => f.type)).toEqual(['open', 'refuse']);
    expect(target.last).toBe(2n);
    conn.destroy();
    await target.close();
  }, 60_000);

  it('refuses an unknown shard and a receiver beyond the sender end', async () => {
    const source = await journal(tempDir(), 8, 1 * KIB);
    const longer = await journal(tempDir(), 16, 1 * KIB);
    const sender = new ShipSender({ sourceOf: (s) => (s === 0 ? { log: source, epoch: 5n } : undefined) });
    const served = nextAccepted((c) => sender.serve(c));
    const conn = await dial();
    const target = await openLog(tempDir(), { fsync: 'batch' });
    expect((await refusal(new ShipReceiver({ shard: 9, log: target }).receive(conn))).code).toBe(
      'PLX_SHIP_UNKNOWN_SHARD',
    );
    expect((await refusal(served)).code).toBe('PLX_SHIP_UNKNOWN_SHARD');
    conn.destroy();
    const served2 = nextAccepted((c) => sender.serve(c));
    const conn2 = await dial();
    const beyond = await refusal(new ShipReceiver({ shard: 0, log: longer }).receive(conn2));
    expect(beyond.code).toBe('PLX_SHIP_BEYOND_END');
    expect(isPlexusError(await served2.catch((e: unknown) => e), 'PLX_SHIP_BEYOND_END')).toBe(true);
    conn2.destroy();
    await target.close();
    await longer.close();
    await source.close();
  }, 60_000);
});
