import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeRaftMessage } from '../../ts/codec/raft-wire.js';
import { isPlexusError } from '../../ts/core/index.js';
import { certificateIdentity, createJobCa, issueRankCertificate } from '../../ts/crypto/x509.js';
import { RaftNode } from '../../ts/raft/node.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import type { Entry, Message } from '../../ts/raft/types.js';
import { RaftDriver } from '../../ts/raft-io/driver.js';
import { RaftTcpTransport, type RaftTlsOptions } from '../../ts/raft-io/tcp-transport.js';
import { loopTurns } from '../helpers/clock.js';
import { ProxyMesh } from '../helpers/fault-proxy.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** The node a SPERLI rank certificate names: its rank (these tests use ranks as node ids). */
const rankOf = (cert: { raw: Uint8Array }) => certificateIdentity(cert).rank;

function heartbeat(from: number, to: number, term = 1): Message {
  return {
    type: 'MsgHeartbeat',
    from,
    to,
    term,
    logTerm: 0,
    index: 0,
    commit: 0,
    reject: false,
    rejectHint: 0,
    entries: [],
  };
}

async function transport(id: number, got: Message[], tls?: RaftTlsOptions, peers?: Map<number, string>) {
  const t = await RaftTcpTransport.start({
    id,
    onMessage: (m) => got.push(m),
    tls,
    peers,
    retryMs: 20,
    maxRetryMs: 100,
  });
  closers.push(() => t.close());
  return t;
}

describe('Raft TCP transport', () => {
  it('delivers messages in order, drops while a peer is down and redials when it is back', async () => {
    const got2: Message[] = [];
    const t2 = await transport(2, got2);
    const t1 = await transport(1, [], undefined, new Map([[2, t2.address]]));
    t1.send([heartbeat(1, 2)]); // dropped: not connected yet, starts the dial
    expect(t1.stats.dropped).toBe(1);
    await until(() => t1.connected(2), { timeoutMs: 5000, what: 'connection' });
    t1.send([heartbeat(1, 2, 5), heartbeat(1, 2, 6), heartbeat(1, 2, 7)]);
    await until(() => got2.length === 3, { timeoutMs: 5000, what: 'delivery' });
    expect(got2.map((m) => m.term)).toEqual([5, 6, 7]);

    // The peer goes away: messages are dropped, never thrown; a new peer on the same id is reached.
    const port = t2.port;
    await t2.close();
    await until(() => !t1.connected(2), { timeoutMs: 5000, what: 'disconnect' });
    t1.send([heartbeat(1, 2, 8)]);
    expect(t1.stats.dropped).toBeGreaterThanOrEqual(2);
    const got2b: Message[] = [];
    const t2b = await RaftTcpTransport.start({ id: 2, port, onMessage: (m) => got2b.push(m) }).catch(() => undefined);
    if (t2b) {
      closers.push(() => t2b.close());
      await until(() => t1.connected(2), { timeoutMs: 5000, what: 'redial' });
      t1.send([heartbeat(1, 2, 9)]);
      await until(() => got2b.length === 1, { timeoutMs: 5000, what: 'delivery after redial' });
      expect(got2b[0]?.term).toBe(9);
    }
  });

  it('closes connections that greet the wrong node, send garbage or speak for another node', async () => {
    const got: Message[] = [];
    const t2 = await transport(2, got);
    const raw = (bytes: Uint8Array) =>
      new Promise<void>((resolve) => {
        const s = connect(t2.port, '127.0.0.1', () => s.write(bytes));
        s.on('close', () => resolve());
        s.on('error', () => undefined);
      });
    const greet = (from: number, to: number) => {
      const b = new Uint8Array(24);
      const dv = new DataView(b.buffer);
      dv.setUint32(0, 0x48525850, true);
      dv.setUint32(4, 1, true);
      dv.setBigUint64(8, BigInt(from), true);
      dv.setBigUint64(16, BigInt(to), true);
      return b;
    };
    await raw(greet(1, 3));
    await raw(new Uint8Array(64).fill(7));
    const { encodeRaftMessage } = await import('../../ts/codec/raft-wire.js');
    const spoof = encodeRaftMessage(heartbeat(3, 2));
    const both = new Uint8Array(24 + spoof.length);
    both.set(greet(1, 2));
    both.set(spoof, 24);
    await raw(both);
    expect(t2.stats.refused).toBe(3);
    expect(got).toEqual([]);
  });

  it('speaks mutual TLS 1.3 and refuses a peer whose certificate another CA signed', async () => {
    const jobId = randomBytes(16);
    const ca = await createJobCa({ jobId });
    const cred = async (c: typeof ca, rank: number) => {
      const r = await issueRankCertificate(c, { jobId, rank, host: '127.0.0.1' });
      return { key: r.key, cert: r.cert, ca: c.cert, peerId: rankOf };
    };
    const got: Message[] = [];
    const t2 = await transport(2, got, await cred(ca, 2));
    const t1 = await transport(1, [], await cred(ca, 1), new Map([[2, t2.address]]));
    t1.send([heartbeat(1, 2)]);
    await until(() => t1.connected(2), { timeoutMs: 5000, what: 'TLS connection' });
    t1.send([heartbeat(1, 2, 4)]);
    await until(() => got.length === 1, { timeoutMs: 5000, what: 'delivery over TLS' });
    expect(got[0]?.term).toBe(4);

    const other = await createJobCa({ jobId });
    const foreign = await cred(other, 3);
    const t3 = await transport(3, [], { ...foreign, ca: ca.cert }, new Map([[2, t2.address]]));
    t3.send([heartbeat(3, 2)]);
    await until(() => t2.stats.refused >= 1, { timeoutMs: 5000, what: 'refusal of a foreign certificate' });
    expect(got.length).toBe(1);
  });
});

describe('Raft TCP transport: connections bound to the node a certificate names', () => {
  const greet = (from: number, to: number) => {
    const b = new Uint8Array(24);
    const dv = new DataView(b.buffer);
    dv.setUint32(0, 0x48525850, true);
    dv.setUint32(4, 1, true);
    dv.setBigUint64(8, BigInt(from), true);
    dv.setBigUint64(16, BigInt(to), true);
    return b;
  };
  const jobId = randomBytes(16);
  const creds = async (ca: Awaited<ReturnType<typeof createJobCa>>, rank: number, mode?: 'permissive') => {
    const r = await issueRankCertificate(ca, { jobId, rank, host: '127.0.0.1' });
    return { key: r.key, cert: r.cert, ca: ca.cert, peerId: rankOf, ...(mode ? { mode } : {}) };
  };
  /** Connects (TLS with `tls`), writes `bytes` once connected; resolves once the server closes it. */
  const send = (port: number, bytes: Uint8Array, tls?: { key: string; cert: string; ca: string }) =>
    new Promise<void>((resolve) => {
      const s = tls
        ? tlsConnect({ port, host: '127.0.0.1', ...tls, checkServerIdentity: () => undefined })
        : connect(port, '127.0.0.1');
      s.once(tls ? 'secureConnect' : 'connect', () => s.write(bytes));
      s.on('data', () => undefined);
      s.on('error', () => undefined);
      s.on('close', () => resolve());
    });

  it('refuses a greeting that claims another node than the certificate, and plaintext on a TLS port', async () => {
    const ca = await createJobCa({ jobId });
    const got: Message[] = [];
    const t2 = await transport(2, got, await creds(ca, 2));
    const as3 = await creds(ca, 3);
    const claim1 = Buffer.concat([greet(1, 2), encodeRaftMessage(heartbeat(1, 2))]);
    await send(t2.port, claim1, as3); // node 3's certificate, greeting as node 1
    await send(t2.port, claim1); // plaintext
    expect(t2.stats.refused).toBe(2);
    expect(got).toEqual([]);
    // Node 3's certificate speaking as node 3 is heard; a message inside it from node 1 is not.
    const t3 = await transport(3, [], as3, new Map([[2, t2.address]]));
    t3.send([heartbeat(3, 2)]);
    await until(() => t3.connected(2), { timeoutMs: 5000, what: 'connection' });
    t3.send([heartbeat(3, 2, 5)]);
    await until(() => got.length === 1, { timeoutMs: 5000, what: 'delivery' });
    expect(got[0]).toMatchObject({ from: 3, term: 5 });
  });

  it('refuses, as a client, a server whose certificate names another node than the one dialled', async () => {
    const ca = await createJobCa({ jobId });
    const got: Message[] = [];
    // Node 3 listens where node 1 expects node 2.
    const t3 = await transport(3, got, await creds(ca, 3));
    const t1 = await transport(1, [], await creds(ca, 1), new Map([[2, t3.address]]));
    t1.send([heartbeat(1, 2)]);
    await until(() => t1.stats.refused >= 2, { timeoutMs: 5000, what: 'refused handshakes' });
    expect(t1.connected(2)).toBe(false);
    await expect(t1.openStream(2, 2000)).rejects.toMatchObject({ code: 'PLX_RAFT_TRANSPORT_UNREACHABLE' });
    expect(got).toEqual([]);
  });

  it('closes a connection that sends no greeting in time, with or without a finished TLS handshake', async () => {
    const ca = await createJobCa({ jobId });
    const t2 = await RaftTcpTransport.start({
      id: 2,
      onMessage: () => undefined,
      tls: await creds(ca, 2),
      greetingTimeoutMs: 300,
    });
    closers.push(() => t2.close());
    const silent = (tls?: { key: string; cert: string; ca: string }) =>
      new Promise<number>((resolve) => {
        const started = Date.now();
        const s = tls
          ? tlsConnect({ port: t2.port, host: '127.0.0.1', ...tls, checkServerIdentity: () => undefined })
          : connect(t2.port, '127.0.0.1');
        s.on('data', () => undefined);
        s.on('error', () => undefined);
        s.on('close', () => resolve(Date.now() - started));
      });
    const [plain, secured] = await Promise.all([silent(), silent(await creds(ca, 3))]);
    expect(plain).toBeLessThan(5000);
    expect(secured).toBeLessThan(5000);
    expect(t2.stats.refused).toBe(2);
  });

  it('permissive mode takes plaintext peers and dials them in plaintext, and speaks TLS with TLS peers', async () => {
    const ca = await createJobCa({ jobId });
    const gotPlain: Message[] = [];
    const gotTls: Message[] = [];
    const gotMixed: Message[] = [];
    const plain2 = await transport(2, gotPlain); // a member that does not speak TLS yet
    const tls3 = await transport(3, gotTls, await creds(ca, 3));
    const mixed1 = await transport(
      1,
      gotMixed,
      await creds(ca, 1, 'permissive'),
      new Map([
        [2, plain2.address],
        [3, tls3.address],
      ]),
    );
    const plain4 = await transport(4, [], undefined, new Map([[1, mixed1.address]]));
    await until(
      () => {
        mixed1.send([heartbeat(1, 2), heartbeat(1, 3)]);
        plain4.send([heartbeat(4, 1)]);
        return gotPlain.length > 0 && gotTls.length > 0 && gotMixed.length > 0;
      },
      { timeoutMs: 10_000, what: 'delivery both ways' },
    );
    expect(gotPlain[0]?.from).toBe(1);
    expect(gotTls[0]?.from).toBe(1);
    expect(gotMixed[0]?.from).toBe(4);
    // The permissive member opens side streams to both.
    for (const id of [2, 3]) (await mixed1.openStream(id, 5000)).destroy();
  });
});

describe('Raft driver and core: what no correct member sends', () => {
  function single(id: number, peers: number[]) {
    const storage = MemoryRaftStorage.bootstrap({ voters: [id, ...peers], learners: [] });
    const node = new RaftNode({ id, storage, random: () => 0, preVote: true, checkQuorum: true });
    const sent: Message[] = [];
    const driver = new RaftDriver({
      node,
      storage,
      send: (ms) => sent.push(...ms),
      applier: { apply: () => undefined },
    });
    return { node, driver, sent };
  }

  it('drops a message whose term is far ahead (2^53 - 1 would leave no next term to persist)', async () => {
    const { node, driver } = single(2, [1, 3]);
    driver.receive(heartbeat(1, 2, Number.MAX_SAFE_INTEGER));
    driver.receive(heartbeat(1, 2, 2 ** 20 + 2));
    // both refusals counted: the two messages were handled, and the term did not move
    await until(() => driver.termRefusals >= 2, { timeoutMs: 2000, what: 'two term refusals' });
    expect(node.status().term).toBe(1);
    expect(driver.termRefusals).toBe(2);
    driver.receive(heartbeat(1, 2, 7)); // an ordinary term step is taken
    await until(() => node.status().term === 7, { timeoutMs: 2000, what: 'term 7' });
    await driver.stop();
  });

  it('ignores MsgTimeoutNow from anyone but the current leader, at any other term', async () => {
    const { node, driver } = single(2, [1, 3]);
    driver.receive(heartbeat(1, 2, 3)); // node 1 leads term 3
    await until(() => node.status().lead === 1, { timeoutMs: 2000, what: 'leader 1' });
    const timeoutNow = (from: number, term: number): Message => ({
      ...heartbeat(from, 2, term),
      type: 'MsgTimeoutNow',
    });
    driver.receive(timeoutNow(3, 3)); // not the leader
    driver.receive(timeoutNow(3, 4)); // a later term
    driver.receive(timeoutNow(1, 4)); // the leader, at a term it does not lead
    // `receive` steps the node at once (an election would have begun already); the turns let
    // the driver's Ready that followed run too.
    await loopTurns();
    expect(node.status()).toMatchObject({ term: 3, role: 'follower', lead: 1 });
    driver.receive(timeoutNow(1, 3)); // the leader hands over: an election at once
    await until(() => node.status().term === 4, { timeoutMs: 2000, what: 'an election' });
    expect(node.status().role).toBe('candidate');
    await driver.stop();
  });
});

interface Member {
  id: number;
  node: RaftNode;
  driver: RaftDriver;
  transport: RaftTcpTransport;
  applied: Entry[];
}

/** Three members on real sockets, every link through a fault-injecting proxy. */
async function cluster(): Promise<{ members: Member[]; mesh: ProxyMesh }> {
  const ids = [1, 2, 3];
  const confState = { voters: ids, learners: [] };
  const members: Member[] = [];
  const transports: RaftTcpTransport[] = [];
  for (const id of ids) {
    const t = await RaftTcpTransport.start({
      id,
      onMessage: (m) => members[id - 1]?.driver.receive(m),
      retryMs: 20,
      maxRetryMs: 100,
    });
    closers.push(() => t.close());
    transports.push(t);
  }
  const mesh = await ProxyMesh.start(transports.map((t) => t.port));
  closers.push(() => mesh.close());
  for (const id of ids) {
    for (const peer of ids) if (peer !== id) transports[id - 1]?.setPeer(peer, mesh.addressFor(id - 1, peer - 1));
    const storage = MemoryRaftStorage.bootstrap(confState);
    const next = rng(id * 7919);
    const node = new RaftNode({ id, storage, random: (n) => next() % n, preVote: true, checkQuorum: true });
    const transport = transports[id - 1] as RaftTcpTransport;
    const applied: Entry[] = [];
    const driver = new RaftDriver({
      node,
      storage,
      send: (ms) => transport.send(ms),
      applier: { apply: (es) => void applied.push(...es.filter((e) => e.type === 'normal' && e.data.length > 0)) },
      tickMs: 20,
      timeoutMs: 3000,
    });
    members.push({ id, node, driver, transport, applied });
  }
  for (const m of members) {
    m.driver.start();
    closers.push(() => m.driver.stop());
  }
  return { members, mesh };
}

function leaderOf(members: Member[]): Member | undefined {
  const ls = members.filter((m) => m.node.status().role === 'leader');
  return ls.length === 1 ? ls[0] : undefined;
}

describe('Raft on real sockets through faulty links', () => {
  it('elects one leader, replicates, survives an isolated leader and converges after healing', async () => {
    const { members, mesh } = await cluster();
    await until(() => leaderOf(members) !== undefined, { timeoutMs: 10_000, what: 'a leader' });
    const first = leaderOf(members) as Member;
    const text = (s: string) => new TextEncoder().encode(s);
    for (let i = 0; i < 20; i++) await first.driver.propose(text(`a${i}`));
    const follower = members.find((m) => m !== first) as Member;
    await expect(follower.driver.propose(text('x'))).rejects.toSatisfy((e) => isPlexusError(e, 'PLX_RAFT_NOT_LEADER'));

    // Cut the leader off: the other two elect a new leader; the old one cannot commit.
    mesh.isolate(first.id - 1);
    const stale = first.driver.propose(text('lost?')).catch((e: unknown) => e);
    const rest = members.filter((m) => m !== first);
    await until(() => leaderOf(rest) !== undefined, { timeoutMs: 10_000, what: 'a new leader in the majority' });
    const second = leaderOf(rest) as Member;
    expect(second.node.status().term).toBeGreaterThan(first.node.status().term - 1);
    for (let i = 0; i < 10; i++) await second.driver.propose(text(`b${i}`));
    // Check-quorum: the isolated node steps down instead of staying leader forever.
    await until(() => first.node.status().role !== 'leader', {
      timeoutMs: 10_000,
      what: 'the isolated leader to step down',
    });
    const staleOutcome = await stale;
    expect(staleOutcome instanceof Error).toBe(true);

    mesh.heal();
    await until(() => members.every((m) => m.applied.length === members[0]!.applied.length && m.applied.length >= 30), {
      timeoutMs: 10_000,
      what: 'every member to apply the same log',
    });
    const logs = members.map((m) => m.applied.map((e) => new TextDecoder().decode(e.data)));
    expect(logs[1]).toEqual(logs[0]);
    expect(logs[2]).toEqual(logs[0]);
    expect(logs[0]?.filter((s) => s.startsWith('a')).length).toBe(20);
    expect(logs[0]?.filter((s) => s.startsWith('b')).length).toBe(10);
    expect(logs[0]).not.toContain('lost?');
    // A linearizable read on the leader.
    const leader = leaderOf(members) as Member;
    expect(await leader.driver.read()).toBeGreaterThanOrEqual(30);
  });
});
