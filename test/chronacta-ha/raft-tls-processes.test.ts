/**
 * Three real `plexus chronacta serve --cluster` processes (made by `cluster init`, so their
 * Raft and catch-up traffic is mutual TLS 1.3 from the cluster CA), attacked on their Raft
 * ports by this process, which is no member: a plaintext connection, a TLS client without a
 * certificate, one whose certificate another CA signed, a valid member certificate whose
 * greeting claims another member's id, and, from a connection that holds a valid member
 * certificate, the 96-byte heartbeat with term 2^53 - 1 that used to wedge the cluster for
 * good and forged MsgTimeoutNow. After each attempt the cluster keeps its leader and its
 * term, keeps taking writes, and holds every acknowledged event. Build first (`npm run build`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemberCa, issueMemberCertificate, type PemPair, readCa } from '../../ts/chronacta/member-tls.js';
import { encodeRaftMessage } from '../../ts/codec/raft-wire.js';
import type { Message } from '../../ts/raft/types.js';
import { cli, MAIN, type ServeMember, startThree, type ThreeMembers } from '../chronacta-cluster/helpers.js';
import { until } from '../helpers/until.js';

const TICK_MS = '50';
/**
 * A forged message or a taken-over connection shows as an election only once a member has gone
 * an election timeout (10 ticks) without its leader; no event marks that nothing started, so
 * the cluster is watched for three timeouts before its leader and term are compared.
 */
const ELECTION_WINDOW_MS = 1500;
/** How long the attacker holds a connection the member keeps open (a member's) before moving on. */
const MEMBER_CONNECTION_MS = 1000;
let t: ThreeMembers;
let ca: PemPair;
const acked: { key: string; position: bigint }[] = [];
/** Every child's output since it started (stderr holds the members' refusals). */
const output = new Map<number, string[]>();

function watch(m: ServeMember): void {
  const lines: string[] = [];
  output.set(m.id, lines);
  m.child.stderr?.on('data', (d: Buffer | string) => lines.push(String(d)));
}

const raftPort = (id: number) => t.ports[2 + id] as number;

function greeting(from: number, to: number): Uint8Array {
  const b = new Uint8Array(24);
  const dv = new DataView(b.buffer);
  dv.setUint32(0, 0x48525850, true); // "PXRH"
  dv.setUint32(4, 1, true);
  dv.setBigUint64(8, BigInt(from), true);
  dv.setBigUint64(16, BigInt(to), true);
  return b;
}

function message(type: Message['type'], from: number, to: number, term: number): Message {
  return { type, from, to, term, logTerm: 0, index: 0, commit: 0, reject: false, rejectHint: 0, entries: [] };
}

/** The greeting and messages one connection sends: what an attacker writes after connecting. */
function packet(from: number, to: number, ms: Message[]): Buffer {
  return Buffer.concat([greeting(from, to), ...ms.map((m) => encodeRaftMessage(m))]);
}

/**
 * Connects to member `to`'s Raft port (TLS with `creds` when given), writes `bytes` once
 * connected, and resolves when the member closes the connection: how long that took and
 * whether the TLS handshake completed on this side.
 */
function attack(
  to: number,
  bytes: Uint8Array,
  creds?: { cert?: string; key?: string; ca: string },
): Promise<{ secured: boolean; closedMs: number }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    let secured = false;
    const s = creds
      ? tlsConnect({
          host: '127.0.0.1',
          port: raftPort(to),
          ca: creds.ca,
          ...(creds.cert ? { cert: creds.cert, key: creds.key } : {}),
          minVersion: 'TLSv1.3',
          checkServerIdentity: () => undefined,
        })
      : tcpConnect(raftPort(to), '127.0.0.1');
    s.once(creds ? 'secureConnect' : 'connect', () => {
      secured = creds !== undefined;
      s.write(bytes);
    });
    s.on('data', () => undefined);
    s.on('error', () => undefined);
    s.once('close', () => {
      clearTimeout(timer);
      resolve({ secured, closedMs: Date.now() - started });
    });
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`member ${to} kept the connection open`));
    }, 10_000);
  });
}

/** Leader id and term as every running member reports them; all must agree. */
async function agreed(): Promise<{ leader: string; term: bigint }> {
  const sts = await Promise.all(t.members.map((m) => m.client.clusterStatus()));
  const leaders = new Set(sts.map((s) => s.leaderId));
  const terms = new Set(sts.map((s) => s.term));
  if (leaders.size !== 1 || terms.size !== 1 || sts[0]?.leaderId === '') {
    throw new Error(`members disagree: ${JSON.stringify(sts.map((s) => [s.leaderId, String(s.term)]))}`);
  }
  return { leader: sts[0]?.leaderId as string, term: sts[0]?.term as bigint };
}

/** Appends `n` keyed events through the leader; records each acknowledged one. */
async function write(n: number, tag: string): Promise<void> {
  const leader = await t.leader();
  for (let i = 0; i < n; i++) {
    const key = `${tag}-${i}`;
    const r = await leader.client.append('attacked', [{ type: 't', data: key }], { idempotencyKey: key });
    acked.push({ key, position: r.firstPosition });
  }
}

/** After an attack: the same leader and term as before, writes still taken. */
async function unharmed(before: { leader: string; term: bigint }, tag: string): Promise<void> {
  await new Promise((r) => setTimeout(r, ELECTION_WINDOW_MS));
  expect(await agreed()).toEqual(before);
  await write(5, tag);
}

const stderrOf = (id: number) => (output.get(id) ?? []).join('');

describe.skipIf(!existsSync(MAIN))('chronacta serve --cluster: the Raft port takes members only', () => {
  beforeAll(async () => {
    t = await startThree('plexus-raft-tls-', ['--tick-ms', TICK_MS]);
    for (const m of t.members) watch(m);
    ca = await readCa(t.root);
    await t.leader();
    await write(10, 'start');
  }, 60_000);

  afterAll(async () => {
    await t?.close();
  });

  it('cluster init made the CA and a certificate per member', () => {
    expect(readFileSync(join(t.root, 'ca.pem'), 'utf8')).toContain('BEGIN CERTIFICATE');
    for (const id of [1, 2, 3]) {
      const tls = join(t.root, `node-${id}`, 'cluster', 'tls');
      for (const f of ['ca.pem', 'member.pem', 'member-key.pem']) expect(existsSync(join(tls, f))).toBe(true);
    }
  });

  it('refuses a plaintext connection, a client without a certificate and one of a foreign CA', async () => {
    const before = await agreed();
    const leader = Number(before.leader);
    const follower = [1, 2, 3].find((id) => id !== leader) as number;
    const huge = packet(leader, follower, [message('MsgHeartbeat', leader, follower, Number.MAX_SAFE_INTEGER)]);

    // Plaintext: closed before anything is read (the first byte is no TLS record).
    const plain = await attack(follower, huge);
    expect(plain.secured).toBe(false);
    await until(async () => (stderrOf(follower).includes('a plaintext connection on a TLS port') ? true : undefined), {
      timeoutMs: 5000,
      what: 'the plaintext refusal in the log',
      intervalMs: 25,
    });
    await unharmed(before, 'after-plaintext');

    // TLS without a client certificate: the handshake fails on the member's side.
    await attack(follower, huge, { ca: ca.cert });
    await until(async () => (stderrOf(follower).includes('refused a TLS handshake') ? true : undefined), {
      timeoutMs: 5000,
      what: 'the handshake refusal in the log',
      intervalMs: 25,
    });
    await unharmed(before, 'after-no-certificate');

    // A certificate naming the leader, from another CA.
    const foreignCa = await createMemberCa('foreign');
    const forged = await issueMemberCertificate(foreignCa, leader);
    const refusedBefore = (stderrOf(follower).match(/refused a TLS handshake/g) ?? []).length;
    await attack(follower, huge, { ...forged, ca: ca.cert });
    await until(
      async () =>
        (stderrOf(follower).match(/refused a TLS handshake/g) ?? []).length > refusedBefore ? true : undefined,
      { timeoutMs: 5000, what: 'the foreign CA refusal in the log', intervalMs: 25 },
    );
    await unharmed(before, 'after-foreign-ca');
    expect(stderrOf(follower)).not.toContain('PLX_RAFT_TERM_OUT_OF_RANGE'); // nothing got as far as Raft
  }, 60_000);

  it("refuses a member certificate whose greeting claims another member's id", async () => {
    const before = await agreed();
    const leader = Number(before.leader);
    const [follower, other] = [1, 2, 3].filter((id) => id !== leader) as [number, number];
    // A valid certificate of member `other` (as a member that went bad holds one), claiming to be the leader.
    const stolen = await issueMemberCertificate(ca, other);
    const r = await attack(
      follower,
      packet(leader, follower, [message('MsgHeartbeat', leader, follower, Number.MAX_SAFE_INTEGER)]),
      { ...stolen, ca: ca.cert },
    );
    expect(r.secured).toBe(true);
    await until(
      async () =>
        stderrOf(follower).includes(`the greeting claims node ${leader}, the certificate names node ${other}`)
          ? true
          : undefined,
      { timeoutMs: 5000, what: 'the greeting refusal in the log', intervalMs: 25 },
    );
    // A certificate of a node that is no member at all is refused in the same way when it claims one.
    const stranger = await issueMemberCertificate(ca, 99);
    await attack(follower, packet(leader, follower, []), { ...stranger, ca: ca.cert });
    await until(
      async () =>
        stderrOf(follower).includes(`the greeting claims node ${leader}, the certificate names node 99`)
          ? true
          : undefined,
      { timeoutMs: 5000, what: 'the stranger refusal in the log', intervalMs: 25 },
    );
    await unharmed(before, 'after-claim');
  }, 60_000);

  it('drops the huge-term heartbeat and forged TimeoutNow even on a member connection, and the cluster goes on', async () => {
    const before = await agreed();
    const leader = Number(before.leader);
    const [follower, other] = [1, 2, 3].filter((id) => id !== leader) as [number, number];
    const own = await issueMemberCertificate(ca, other);
    const term = Number(before.term);
    // The 96-byte packet of the attack run (greeting and heartbeat), then TimeoutNow at the
    // current term and the next, from a member that is not the leader.
    const huge = packet(other, follower, [message('MsgHeartbeat', other, follower, Number.MAX_SAFE_INTEGER)]);
    expect(huge.length).toBe(96);
    const forgedTimeouts = packet(other, follower, [
      ...Array.from({ length: 10 }, () => message('MsgTimeoutNow', other, follower, term)),
      ...Array.from({ length: 10 }, () => message('MsgTimeoutNow', other, follower, term + 1)),
    ]);
    // The member keeps these connections open (they are a member's): close them after a while.
    for (const bytes of [huge, forgedTimeouts]) {
      await Promise.race([
        attack(follower, bytes, { ...own, ca: ca.cert }).catch(() => undefined),
        new Promise((r) => setTimeout(r, MEMBER_CONNECTION_MS)),
      ]);
    }
    await until(async () => (stderrOf(follower).includes('PLX_RAFT_TERM_OUT_OF_RANGE') ? true : undefined), {
      timeoutMs: 5000,
      what: 'the term refusal in the log',
      intervalMs: 25,
    });
    await unharmed(before, 'after-huge-term');
    // Every member still runs (none stopped on an unpersistable term).
    for (const m of t.members) expect(m.child.exitCode).toBeNull();
    for (const m of t.members) expect(stderrOf(m.id)).not.toContain('persisting failed');
  }, 60_000);

  it('holds every acknowledged event on every member', async () => {
    const leader = await t.leader();
    const last = (await leader.client.clusterStatus()).lastPosition as bigint;
    for (const m of t.members) {
      await until(async () => (((await m.client.clusterStatus()).lastPosition ?? 0n) >= last ? true : undefined), {
        timeoutMs: 10_000,
        what: `member ${m.id} to catch up`,
        intervalMs: 25,
      });
      const r = await cli(
        'read',
        'attacked',
        '--max-count',
        '1000',
        '--consistency',
        'follower',
        '--server',
        m.address,
      );
      expect(r.code, r.stderr).toBe(0);
      const events = r.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { data?: string; position?: number })
        .filter((e) => e.data !== undefined);
      const at = new Map(events.map((e) => [e.data, BigInt(e.position as number)]));
      for (const a of acked) expect(at.get(a.key)).toBe(a.position);
      expect(events.length).toBe(acked.length);
    }
  }, 60_000);
});
