/**
 * The TLS 1.3 mesh on loopback: every rank on its own address (127.0.0.1, 127.0.0.2, ...)
 * with ports picked beforehand. Hostile peers are raw node:tls clients and servers with
 * real certificates of the job CA (or of another CA), sending whatever the test says.
 */
import { once } from 'node:events';
import * as tls from 'node:tls';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { encodeFrame, FrameContext, type FrameInit, FrameType } from '../../ts/codec/sperli-frame.js';
import {
  type Abort,
  decodeAbort,
  decodeHeartbeat,
  encodeHeartbeat,
  encodeHello,
} from '../../ts/codec/sperli-payloads.js';
import { FrameStream, type StreamEvent } from '../../ts/codec/sperli-stream.js';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { CompositeSig } from '../../ts/crypto/index.js';
import { createJobCa, issueRankCertificate } from '../../ts/crypto/x509.js';
import { refusedHosts } from '../../ts/sperli/hosts.js';
import { type MeshOptions, openMesh } from '../../ts/sperli/mesh.js';
import type { RankTransport } from '../../ts/sperli/transport.js';
import { transportSuite } from '../compliance/transport.suite.js';
import { freePorts, issueCertificate, makeTestJob, type TestJob } from '../helpers/sperli-job.js';
import { until } from '../helpers/until.js';

const LOOP: MeshOptions = { silenceMs: 1500, heartbeatMs: 300, connectTimeoutMs: 5000, retryMs: 50 };
const utf8 = new TextEncoder();

/** Everything a test opened, closed after it. */
const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function track(t: RankTransport): RankTransport {
  cleanup.push(() => t.close());
  return t;
}

/** Opens every rank of `job` (or the ranks given) and closes them after the test. */
async function openAll(job: TestJob, opts: MeshOptions = LOOP, ranks?: number[]): Promise<RankTransport[]> {
  const which = ranks ?? job.descriptions.map((_, r) => r);
  const results = await Promise.allSettled(which.map((r) => openMesh(job.descriptions[r]!, opts)));
  const ok = results.flatMap((r) => (r.status === 'fulfilled' ? [track(r.value)] : []));
  const bad = results.find((r) => r.status === 'rejected');
  if (bad) throw (bad as PromiseRejectedResult).reason;
  return ok;
}

/** The mesh's failure: its setup's rejection, or the failure of the transport it gave. */
async function failureOf(p: Promise<RankTransport>, ms = 10_000): Promise<PlexusError> {
  let t: RankTransport;
  try {
    t = track(await p);
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  await until(() => t.failure !== undefined, { timeoutMs: ms, what: 'the failure' });
  return t.failure as PlexusError;
}

async function rejectionOf(p: Promise<unknown>): Promise<PlexusError> {
  try {
    const v = await p;
    if (v && typeof (v as RankTransport).close === 'function') track(v as RankTransport);
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  throw new Error('expected a rejection');
}

/**
 * Time that passes as part of a scenario (a mesh left idle for several silence windows, a rank
 * that starts late), not a wait for an event: the scenario is that this much time goes by.
 */
const letTimePass = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------
// A hostile peer: a raw TLS client with a real certificate.

interface RawPeer {
  readonly socket: tls.TLSSocket;
  /** What the mesh rank sent, decoded as the raw rank would. */
  readonly events: StreamEvent[];
  readonly closed: Promise<void>;
  isClosed(): boolean;
  /** Sends a frame from the raw rank to the mesh rank; `fields` override the header. */
  send(type: number, payload?: Uint8Array, fields?: Partial<FrameInit>): void;
  /** The types of the frames received so far. */
  types(): number[];
  aborts(): Abort[];
}

interface RawOptions {
  readonly cert?: string;
  readonly key?: string;
  readonly ca?: string;
  readonly tls?: tls.ConnectionOptions;
}

/** Connects as rank `as` to rank `to` of `job` (trying again while it does not listen yet). */
async function rawPeer(job: TestJob, as: number, to: number, o: RawOptions = {}): Promise<RawPeer | { error: Error }> {
  const entry = job.hosts[to]!;
  let tries = 0;
  return until(
    async () => {
      const socket = tls.connect({
        host: entry.name,
        port: entry.port,
        ca: [o.ca ?? job.ca.cert],
        cert: o.cert ?? job.creds[as]!.cert,
        key: o.key ?? job.creds[as]!.key,
        minVersion: 'TLSv1.3',
        checkServerIdentity: () => undefined,
        ...o.tls,
      });
      cleanup.push(() => {
        socket.destroy();
      });
      let connected = false;
      socket.once('connect', () => {
        connected = true;
      });
      const r = await new Promise<Error | undefined>((resolve) => {
        socket.once('secureConnect', () => resolve(undefined));
        socket.once('error', (e) => resolve(e));
      });
      if (r === undefined) return wrap(job, as, to, socket);
      socket.destroy();
      if (connected || tries++ > 100 || (r as NodeJS.ErrnoException).code !== 'ECONNREFUSED') return { error: r };
      return undefined; // not listening yet: try again
    },
    { timeoutMs: 30_000, intervalMs: 20, what: `rank ${to} to accept a connection` },
  );
}

function wrap(job: TestJob, as: number, to: number, socket: tls.TLSSocket): RawPeer {
  const events: StreamEvent[] = [];
  const stream = new FrameStream(
    new FrameContext({ jobId: job.jobId, peerRank: to, ownRank: as, incarnation: job.incarnation }),
  );
  let closed = false;
  socket.on('data', (b: Buffer) => events.push(...stream.push(b)));
  socket.on('error', () => {});
  const closedP = new Promise<void>((resolve) =>
    socket.once('close', () => {
      closed = true;
      resolve();
    }),
  );
  const frames = () => events.flatMap((e) => (e.kind === 'frame' ? [e] : []));
  return {
    socket,
    events,
    closed: closedP,
    isClosed: () => closed,
    send(type, payload = new Uint8Array(0), fields = {}) {
      socket.write(
        encodeFrame(
          { type, jobId: job.jobId, sourceRank: as, targetRank: to, incarnation: job.incarnation, ...fields },
          payload,
        ),
      );
    },
    types: () => frames().map((f) => f.header.type),
    aborts: () => frames().flatMap((f) => (f.header.type === FrameType.ABORT ? [decodeAbort(f.payload)] : [])),
  };
}

async function connected(job: TestJob, as: number, to: number, o: RawOptions = {}): Promise<RawPeer> {
  const p = await rawPeer(job, as, to, o);
  if ('error' in p) throw p.error;
  return p;
}

/** A raw rank that has sent its HELLO (with its own token unless given). */
async function greeted(job: TestJob, as: number, to: number, token = job.tokens[as]!): Promise<RawPeer> {
  const p = await connected(job, as, to);
  p.send(FrameType.HELLO, encodeHello(token));
  return p;
}

// ---------------------------------------------------------------------------------------

const jobs = new Map<number, TestJob>();

transportSuite('TLS 1.3 mesh on loopback', async (size) => {
  let job = jobs.get(size);
  if (job === undefined) {
    job = await makeTestJob({ size });
    jobs.set(size, job);
  } else {
    job = await job.withNewPorts();
  }
  const transports = await Promise.all(job.descriptions.map((d) => openMesh(d, LOOP)));
  return {
    transports,
    teardown: async () => {
      await Promise.all(transports.map((t) => t.close()));
    },
  };
});

describe('TLS 1.3 mesh: coming up', () => {
  it('a 4-rank mesh on 127.0.0.1..4 comes up and stays up on heartbeats alone', async () => {
    const job = await makeTestJob({ size: 4 });
    expect(job.hosts.map((h) => h.name)).toEqual(['127.0.0.1', '127.0.0.2', '127.0.0.3', '127.0.0.4']);
    // A silence window a loaded machine's stalls stay well below (4 ranks share this process).
    const silenceMs = 1000;
    const ts = await openAll(job, { silenceMs, heartbeatMs: silenceMs / 4, connectTimeoutMs: 5000 });
    const failures: PlexusError[] = [];
    for (const t of ts) t.onFailure((e) => failures.push(e));
    // Three silence windows with nothing but heartbeats on the connections.
    await letTimePass(3 * silenceMs);
    expect(failures).toEqual([]);
    for (const t of ts) expect(t.failure).toBeUndefined();
    const got: number[] = [];
    ts[3]?.onFrame((peer, f) => got.push(peer * 100 + f.tag));
    for (const t of ts.slice(0, 3)) await t.send(3, FrameType.DATA, 7, new Uint8Array([1]));
    await until(() => got.length === 3, { what: 'the frames' });
    expect(got.sort((x, y) => x - y)).toEqual([7, 107, 207]);
    await Promise.all(ts.map((t) => t.close()));
  });

  it('a rank that starts late is reached by retrying; a raw peer sees TLS 1.3 and HELLO first', async () => {
    const job = await makeTestJob({ size: 3 });
    const first = openMesh(job.descriptions[0]!, LOOP);
    const second = openMesh(job.descriptions[1]!, LOOP);
    // Rank 2 starts late: ranks 0 and 1 try it again and again (retryMs 50) meanwhile.
    await letTimePass(400);
    const ts = [track(await openMesh(job.descriptions[2]!, LOOP)), track(await first), track(await second)];
    for (const t of ts) expect(t.failure).toBeUndefined();
    await Promise.all(ts.map((t) => t.close()));

    const again = await makeTestJob({ size: 2 });
    const pending = openMesh(again.descriptions[1]!, LOOP);
    const raw = await greeted(again, 0, 1);
    const t = track(await pending);
    expect(raw.socket.getProtocol()).toBe('TLSv1.3');
    await until(() => raw.types().length > 0, { what: 'the HELLO' });
    expect(raw.types()[0]).toBe(FrameType.HELLO);
    await t.close();
    await raw.closed;
    expect(raw.types().at(-1)).toBe(FrameType.BYE);
  });

  it('a peer that never comes is lost after connectTimeoutMs (H1612 lost-peer, cause connect)', async () => {
    const job = await makeTestJob({ size: 2 });
    const opts = { ...LOOP, connectTimeoutMs: 400 };
    const [dialer, acceptor] = await Promise.all([
      rejectionOf(openMesh(job.descriptions[0]!, opts)),
      rejectionOf(openMesh((await job.withNewPorts()).descriptions[1]!, opts)),
    ]);
    expect(dialer.code).toBe('H1612');
    expect(dialer.details).toMatchObject({ reason: 'lost-peer', peer: 1, cause: 'connect' });
    expect(acceptor.details).toMatchObject({ reason: 'lost-peer', peer: 0, cause: 'connect' });
  });
});

describe('TLS 1.3 mesh: what the rank itself refuses', () => {
  let job: TestJob;
  beforeAll(async () => {
    job = await makeTestJob({ size: 2 });
  });

  it('refuses options that cannot work, a port 0, a refused host and a certificate of another rank', async () => {
    const d = job.descriptions[0]!;
    const e1 = await rejectionOf(openMesh(d, { silenceMs: 500, heartbeatMs: 500 }));
    expect([e1.code, e1.details.reason]).toEqual(['PLX_SPERLI_BAD_ARGUMENT', 'heartbeatMs']);
    const e2 = await rejectionOf(openMesh(d, { retryMs: 0 }));
    expect([e2.code, e2.details.reason]).toEqual(['PLX_SPERLI_BAD_ARGUMENT', 'retryMs']);
    const hosts = [job.hosts[0]!, { ...job.hosts[1]!, port: 0 }];
    const e3 = await rejectionOf(openMesh({ ...d, hosts }, LOOP));
    expect([e3.code, e3.details.reason, e3.details.field]).toEqual(['H1610', 'job-description', 'hosts[1].port']);
    const refused = refusedHosts({ env: '127.0.0.2' });
    const e4 = await rejectionOf(openMesh(d, { ...LOOP, refused }));
    expect([e4.code, e4.details.reason, e4.details.host]).toEqual(['H1610', 'refused-host', '127.0.0.2']);
    const e5 = await rejectionOf(openMesh({ ...d, rankCert: utf8.encode(job.creds[1]!.cert) }, LOOP));
    expect([e5.code, e5.details.reason, e5.details.field]).toEqual(['H1610', 'job-description', 'rankCert']);
  });

  it('cannot listen on a port in use (PLX_SPERLI_LISTEN)', async () => {
    const fresh = await job.withNewPorts();
    const own = fresh.hosts[0]!;
    const blocker = tls.createServer({});
    blocker.listen(own.port, own.name);
    await once(blocker, 'listening');
    cleanup.push(() => new Promise<void>((r) => blocker.close(() => r())));
    const e = await rejectionOf(openMesh(fresh.descriptions[0]!, LOOP));
    expect([e.code, e.details.port]).toEqual(['PLX_SPERLI_LISTEN', own.port]);
  });
});

describe('TLS 1.3 mesh: connections refused on the accepting side (the job goes on)', () => {
  let job: TestJob;
  let otherCa: Awaited<ReturnType<typeof createJobCa>>;
  beforeAll(async () => {
    job = await makeTestJob({ size: 2 });
    otherCa = await createJobCa({ jobId: job.jobId });
  });

  const cases: [string, () => Promise<RawOptions>, string, string | undefined][] = [
    [
      'a client offering TLS 1.2 at most',
      async () => ({ tls: { minVersion: 'TLSv1.2', maxVersion: 'TLSv1.2' } }),
      'tls-handshake',
      undefined,
    ],
    [
      'a client certificate from another CA',
      async () => issueRankCertificate(otherCa, { jobId: job.jobId, rank: 0, host: '127.0.0.1' }),
      'tls-handshake',
      undefined,
    ],
    [
      'a certificate of another job',
      async () => issueCertificate(job.ca, { commonName: `sperli-${'ab'.repeat(16)}-0`, host: '127.0.0.1' }),
      'peer-certificate',
      'job-id',
    ],
    ['a certificate of a rank that is not lower', async () => job.creds[1]!, 'peer-certificate', 'rank'],
    [
      'a certificate that names no rank',
      async () => issueCertificate(job.ca, { commonName: 'rank zero', host: '127.0.0.1' }),
      'peer-certificate',
      'name',
    ],
  ];

  for (const [what, make, reason, rule] of cases) {
    it(`refuses ${what} (H1610 ${reason}${rule ? ` ${rule}` : ''}), then takes the real rank 0`, async () => {
      const fresh = await job.withNewPorts();
      const refusals: PlexusError[] = [];
      const acceptor = openMesh(fresh.descriptions[1]!, { ...LOOP, onRefused: (e) => refusals.push(e) });
      const hostile = await rawPeer(fresh, 0, 1, await make());
      if (!('error' in hostile)) {
        hostile.send(FrameType.HELLO, encodeHello(fresh.tokens[0]!));
        await hostile.closed;
        expect(hostile.types()).toEqual([]);
      }
      await until(() => refusals.length > 0, { what: 'the refusal' });
      expect([refusals[0]?.code, refusals[0]?.details.reason, refusals[0]?.details.rule]).toEqual([
        'H1610',
        reason,
        rule,
      ]);
      const ts = [track(await openMesh(fresh.descriptions[0]!, LOOP)), track(await acceptor)];
      for (const t of ts) expect(t.failure).toBeUndefined();
      await Promise.all(ts.map((t) => t.close()));
    });
  }
});

describe('TLS 1.3 mesh: the server a rank dials is checked', () => {
  /** A TLS server with `cert` where rank 1 of `job` listens. */
  async function impostor(job: TestJob, cert: { cert: string; key: string }, ca = job.ca.cert): Promise<void> {
    const server = tls.createServer({ ...cert, ca: [ca], requestCert: true, minVersion: 'TLSv1.3' }, (s) => {
      s.on('error', () => {});
    });
    server.on('tlsClientError', () => {});
    const sockets = new Set<import('node:net').Socket>();
    server.on('connection', (s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    server.listen(job.hosts[1]!.port, job.hosts[1]!.name);
    await once(server, 'listening');
    cleanup.push(
      () =>
        new Promise<void>((r) => {
          for (const s of sockets) s.destroy();
          server.close(() => r());
        }),
    );
  }

  it('an IPv4 host is checked as an address: a certificate for 127.0.0.2 dialled as 127.0.0.1 is refused', async () => {
    const job = await makeTestJob({ size: 2, hosts: ['127.0.0.1', '127.0.0.1'] });
    await impostor(job, await issueRankCertificate(job.ca, { jobId: job.jobId, rank: 1, host: '127.0.0.2' }));
    const e = await rejectionOf(openMesh(job.descriptions[0]!, LOOP));
    expect([e.code, e.details.reason, e.details.rule, e.details.peer]).toEqual([
      'H1610',
      'peer-certificate',
      'host',
      1,
    ]);
  });

  it('a server that is another rank of the job is refused (H1610 peer-certificate rank)', async () => {
    const job = await makeTestJob({ size: 2 });
    await impostor(job, await issueRankCertificate(job.ca, { jobId: job.jobId, rank: 2, host: '127.0.0.2' }));
    const e = await rejectionOf(openMesh(job.descriptions[0]!, LOOP));
    expect([e.code, e.details.reason, e.details.rule, e.details.rank]).toEqual([
      'H1610',
      'peer-certificate',
      'rank',
      2,
    ]);
  });

  it('a server of another CA fails the handshake (H1610 tls-handshake)', async () => {
    const job = await makeTestJob({ size: 2 });
    const other = await createJobCa({ jobId: job.jobId });
    await impostor(
      job,
      await issueRankCertificate(other, { jobId: job.jobId, rank: 1, host: '127.0.0.2' }),
      other.cert,
    );
    const e = await rejectionOf(openMesh(job.descriptions[0]!, LOOP));
    expect([e.code, e.details.reason, e.details.peer]).toEqual(['H1610', 'tls-handshake', 1]);
  });
});

describe('TLS 1.3 mesh: HELLO and join tokens', () => {
  let job: TestJob;
  beforeAll(async () => {
    job = await makeTestJob({ size: 2 });
  });

  it('an expired join token is refused (H1610 join-token expiry); the peer that sent it gets ABORT (H1612)', async () => {
    const fresh = await job.withNewPorts();
    const expired = fresh.token(0, { expiry: BigInt(Date.now() - 1000) });
    const [r0, r1] = await Promise.all([
      failureOf(openMesh(fresh.description(0, { joinToken: expired }), LOOP)),
      rejectionOf(openMesh(fresh.descriptions[1]!, LOOP)),
    ]);
    expect([r1.code, r1.details.reason, r1.details.rule]).toEqual(['H1610', 'join-token', 'expiry']);
    expect(r0.code).toBe('H1612');
    expect(r0.details).toMatchObject({ reason: 'abort', peer: 1, abortReason: 2, abortCode: 1610, rank: 1 });
  });

  it('a token checked against the clock it is given: expiry not later than now is refused', async () => {
    const fresh = await job.withNewPorts();
    const late = { ...LOOP, clock: { now: () => Date.now() + 7_200_000 } };
    const [, r1] = await Promise.all([
      failureOf(openMesh(fresh.descriptions[0]!, LOOP)),
      rejectionOf(openMesh(fresh.descriptions[1]!, late)),
    ]);
    expect([r1.code, r1.details.rule]).toEqual(['H1610', 'expiry']);
  });

  it('a wrongly signed token is refused (H1610 join-token signature) and ABORT reason 2 goes back', async () => {
    const fresh = await job.withNewPorts();
    const forged = fresh.token(0, {}, CompositeSig.keygen().secretKey);
    const pending = rejectionOf(openMesh(fresh.descriptions[1]!, LOOP));
    const raw = await greeted(fresh, 0, 1, forged);
    const e = await pending;
    expect([e.code, e.details.reason, e.details.rule]).toEqual(['H1610', 'join-token', 'signature']);
    await raw.closed;
    expect(raw.types()).toEqual([FrameType.HELLO, FrameType.ABORT]);
    expect(raw.aborts()[0]).toMatchObject({ reason: 2, code: 1610, rank: 1 });
  });

  it('a token of another rank is refused (H1610 join-token rank)', async () => {
    const fresh = await job.withNewPorts();
    const pending = rejectionOf(openMesh(fresh.descriptions[1]!, LOOP));
    await greeted(fresh, 0, 1, fresh.tokens[1]!);
    const e = await pending;
    expect([e.code, e.details.reason, e.details.rule]).toEqual(['H1610', 'join-token', 'rank']);
  });

  it('a frame before HELLO is refused (H1610 hello-order)', async () => {
    const fresh = await job.withNewPorts();
    const pending = rejectionOf(openMesh(fresh.descriptions[1]!, LOOP));
    const raw = await connected(fresh, 0, 1);
    raw.send(FrameType.DATA, new Uint8Array(1));
    const e = await pending;
    expect([e.code, e.details.reason]).toEqual(['H1610', 'hello-order']);
  });

  it('a second HELLO is refused (H1610 hello-order) with ABORT reason 2', async () => {
    const fresh = await job.withNewPorts();
    const pending = openMesh(fresh.descriptions[1]!, LOOP);
    const raw = await greeted(fresh, 0, 1);
    const t = track(await pending);
    raw.send(FrameType.HELLO, encodeHello(fresh.tokens[0]!));
    await until(() => t.failure !== undefined, { what: 'the refusal' });
    expect([t.failure?.code, t.failure?.details.reason]).toEqual(['H1610', 'hello-order']);
    await raw.closed;
    expect(raw.aborts()).toEqual([expect.objectContaining({ reason: 2, code: 1610, rank: 1 })]);
  });
});

describe('TLS 1.3 mesh: frames refused after setup', () => {
  let job: TestJob;
  beforeAll(async () => {
    job = await makeTestJob({ size: 3 });
  });

  /** Raw rank 0 greets real ranks 1 and 2, which connect to each other. */
  async function withRawRank0(opts: MeshOptions = LOOP) {
    const fresh = await job.withNewPorts();
    const pending = [1, 2].map((r) => openMesh(fresh.descriptions[r]!, opts));
    const raws = [await greeted(fresh, 0, 1), await greeted(fresh, 0, 2)] as const;
    const ts = [track(await pending[0]!), track(await pending[1]!)] as const;
    return { fresh, raws, ts };
  }

  it('a forged source rank is refused (H1610 source-rank); the other rank gets ABORT reason 2 (H1612)', async () => {
    const { raws, ts } = await withRawRank0();
    raws[0].send(FrameType.DATA, new Uint8Array([1]), { sourceRank: 2 });
    await until(() => ts[0].failure !== undefined && ts[1].failure !== undefined, { what: 'both failures' });
    expect([ts[0].failure?.code, ts[0].failure?.details.reason]).toEqual(['H1610', 'source-rank']);
    expect(ts[1].failure?.code).toBe('H1612');
    expect(ts[1].failure?.details).toMatchObject({
      reason: 'abort',
      peer: 1,
      abortReason: 2,
      abortCode: 1610,
      rank: 1,
    });
    await raws[0].closed;
    expect(raws[0].aborts()).toEqual([expect.objectContaining({ reason: 2, code: 1610, rank: 1 })]);
  });

  it('a DATA frame with a reserved tag is refused (H1610 tag-reserved)', async () => {
    const { raws, ts } = await withRawRank0();
    const got: number[] = [];
    ts[0].onFrame((_, f) => got.push(f.tag));
    raws[0].send(FrameType.DATA, new Uint8Array(0), { tag: 5 });
    raws[0].send(FrameType.DATA, new Uint8Array(0), { tag: 0x8000_0000 });
    await until(() => ts[0].failure !== undefined, { what: 'the refusal' });
    expect([ts[0].failure?.code, ts[0].failure?.details.reason]).toEqual(['H1610', 'tag-reserved']);
    expect(got).toEqual([5]);
    await until(() => ts[1].failure !== undefined, { what: 'the abort' });
    expect(ts[1].failure?.details.abortReason).toBe(2);
  });

  it('HEARTBEAT counters that do not grow by one are refused (H1610 payload-size)', async () => {
    const { raws, ts } = await withRawRank0();
    raws[0].send(FrameType.HEARTBEAT, encodeHeartbeat(1n));
    raws[0].send(FrameType.HEARTBEAT, encodeHeartbeat(3n));
    await until(() => ts[0].failure !== undefined, { what: 'the refusal' });
    expect([ts[0].failure?.code, ts[0].failure?.details.reason, ts[0].failure?.details.rule]).toEqual([
      'H1610',
      'payload-size',
      'heartbeat-counter',
    ]);
  });

  it('a peer closing without BYE is lost: the others fail within silence + 1 s (H1612)', async () => {
    const opts = { ...LOOP, silenceMs: 1000, heartbeatMs: 200 };
    const { raws, ts } = await withRawRank0(opts);
    const t0 = Date.now();
    for (const r of raws) r.socket.destroy();
    await until(() => ts[0].failure !== undefined && ts[1].failure !== undefined, {
      timeoutMs: 5000,
      what: 'both failures',
    });
    expect(Date.now() - t0).toBeLessThan(opts.silenceMs + 1000);
    for (const t of ts) {
      const f = t.failure as PlexusError;
      expect(f.code).toBe('H1612');
      // Lost by itself, or told by the other rank (ABORT reason 1 naming rank 0).
      if (f.details.reason === 'lost-peer') expect(f.details).toMatchObject({ peer: 0, cause: 'close' });
      else expect(f.details).toMatchObject({ reason: 'abort', abortReason: 1, rank: 0 });
    }
  });

  it('a peer that falls silent is lost after silenceMs (ABORT reason 1 naming it)', async () => {
    const fresh = await makeTestJob({ size: 2 });
    const opts = { ...LOOP, silenceMs: 600, heartbeatMs: 150 };
    const pending = openMesh(fresh.descriptions[1]!, opts);
    const raw = await greeted(fresh, 0, 1);
    const t = track(await pending);
    const t0 = Date.now();
    await until(() => t.failure !== undefined, { timeoutMs: 5000, what: 'the loss' });
    const waited = Date.now() - t0;
    expect(waited).toBeGreaterThanOrEqual(400);
    expect(waited).toBeLessThan(opts.silenceMs + 1000);
    expect(t.failure?.details).toMatchObject({ reason: 'lost-peer', peer: 0, cause: 'silence' });
    await raw.closed;
    const frames = raw.events.flatMap((e) => (e.kind === 'frame' ? [e] : []));
    const beats = frames.filter((f) => f.header.type === FrameType.HEARTBEAT).map((f) => decodeHeartbeat(f.payload));
    expect(beats.length).toBeGreaterThanOrEqual(2);
    expect(beats).toEqual(beats.map((_, i) => BigInt(i + 1)));
    expect(raw.aborts()).toEqual([expect.objectContaining({ reason: 1, code: 1612, rank: 0 })]);
  });

  it('a peer that keeps sending heartbeats is not lost', async () => {
    const fresh = await makeTestJob({ size: 2 });
    const opts = { ...LOOP, silenceMs: 500, heartbeatMs: 100 };
    const pending = openMesh(fresh.descriptions[1]!, opts);
    const raw = await greeted(fresh, 0, 1);
    const t = track(await pending);
    // The raw peer answers each heartbeat of the mesh rank (one per heartbeatMs of quiet) with
    // one of its own: ten rounds span twice the silence window.
    const beatsIn = () => raw.types().filter((x) => x === FrameType.HEARTBEAT).length;
    for (let i = 1n; i <= 10n; i++) {
      await until(() => beatsIn() >= Number(i), { what: `heartbeat ${i} of the mesh rank` });
      raw.send(FrameType.HEARTBEAT, encodeHeartbeat(i));
    }
    expect(t.failure).toBeUndefined();
    raw.send(FrameType.BYE);
    raw.socket.end();
    await raw.closed;
    // The rank handled the close of the link after the BYE: no loss is reported nor coming.
    await until(() => t.closedLinks === 1, { what: 'the link closed at the mesh rank' });
    expect(t.lossesPending).toBe(0);
    expect(t.failure).toBeUndefined();
  });
});

it('freePorts gives distinct ports per loopback address', async () => {
  const ports = await freePorts(['127.0.0.1', '127.0.0.2', '127.0.0.3']);
  expect(ports.every((p) => p > 0)).toBe(true);
});
