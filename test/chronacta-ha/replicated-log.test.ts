/**
 * The replicated log on three members (real sockets through proxies, real files): replication,
 * compare-and-set and fencing, the apply path's duplicate and divergence handling, restart and
 * catch-up, membership changes and leadership transfer.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseHaConfig } from '../../ts/chronacta/cluster-config.js';
import { type AppliedBatch, openClusterLog, type ReplicatedLog } from '../../ts/chronacta/cluster-log.js';
import { createMemberCa, issueMemberCertificate, memberOfCertificate } from '../../ts/chronacta/member-tls.js';
import { encodeEvfr } from '../../ts/codec/evfr.js';
import { isPlexusError } from '../../ts/core/errors.js';
import type { RaftTlsOptions } from '../../ts/raft-io/tcp-transport.js';
import { until } from '../helpers/until.js';
import { type Cluster, quiet, readAll, snapshot, startCluster, TICK_MS, text } from './helpers.js';

let cluster: Cluster | undefined;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await cluster?.close();
  cluster = undefined;
});

function idOf(c: Cluster, log: ReplicatedLog): number {
  return [...c.logs].find(([, l]) => l === log)?.[0] as number;
}

async function sameEverywhere(c: Cluster, ids = c.ids): Promise<string[]> {
  const leader = await c.waitLeader(ids);
  await until(() => ids.every((id) => c.logs.get(id)?.last === leader.last), {
    timeoutMs: 10_000,
    what: 'convergence',
  });
  const snaps = await Promise.all(ids.map((id) => snapshot(c.logs.get(id) as ReplicatedLog)));
  for (const s of snaps) expect(s).toEqual(snaps[0]);
  return snaps[0] as string[];
}

/** Proposes raw bytes through the member's Raft driver, as a faulty or replaying leader would. */
function proposeRaw(log: ReplicatedLog, bytes: Uint8Array): Promise<number> {
  return (log as unknown as { driver: { propose(b: Uint8Array): Promise<number> } }).driver.propose(bytes);
}

describe('replicated log', () => {
  it('replicates every acknowledged append exactly once at the same positions on every member', async () => {
    const c = (cluster = await startCluster());
    const applied = new Map<number, AppliedBatch[]>();
    for (const [id, log] of c.logs) {
      const got: AppliedBatch[] = [];
      applied.set(id, got);
      log.onApply((b) => got.push(b));
    }
    const leader = await c.waitLeader();
    // Concurrent appends: positions follow call order, each batch acknowledged once committed.
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => leader.append([text(`e${i}`), text(`e${i}+`)])),
    );
    results.forEach((r, i) => {
      expect(r.first).toBe(BigInt(2 * i + 1));
      expect(r.last).toBe(BigInt(2 * i + 2));
    });
    const all = await sameEverywhere(c);
    expect(all.length).toBe(80);
    expect(new Set(all.map((r) => r.split('|')[1])).size).toBe(40); // one batch id per append
    expect(all[0]?.split('|')[3]).toBe('e0');
    expect(all[79]?.split('|')[3]).toBe('e39+');
    // Every member told its listener about every batch, in order.
    await until(() => [...applied.values()].every((a) => a.length === 40), { timeoutMs: 5000, what: 'listeners' });
    for (const a of applied.values()) {
      expect(a.map((b) => b.first)).toEqual(results.map((r) => r.first));
      expect(a[3]?.records[1]?.position).toBe(8n);
      // payloads[i] is the record at first + i; records (made when read) carry the same bytes.
      expect(a.every((b) => b.payloads.length === 2 && b.records.every((r, i) => r.payload === b.payloads[i]))).toBe(
        true,
      );
      expect(Buffer.from(a[3]?.payloads[1] ?? []).toString()).toBe('e3+');
    }
    // Status: the leader sees both followers caught up.
    const s = leader.status();
    expect(s.role).toBe('leader');
    expect(s.lastPosition).toBe(80n);
    expect(s.followers?.length).toBe(2);
    await until(() => (leader.status().followers ?? []).every((f) => f.lagPositions === 0 && f.lagEntries === 0), {
      what: '(leader.status().followers ?? []).every((f) => f.lagPositions === 0...',
    });
    expect(s.appendEntriesApplied).toBe(40);
    const f = c.logs.get(c.ids.find((id) => id !== idOf(c, leader)) as number) as ReplicatedLog;
    expect(f.status().leaderAddress).toBe(s.members.find((m) => m.id === s.id)?.advertise);
    // Reads backwards serve the local log.
    const back = await f.readBackward(80n, { maxCount: 2 });
    expect(back.map((r) => r.position)).toEqual([80n, 79n]);
  });

  it('refuses a compare-and-set only against committed positions', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    await leader.append([text('x')], { expectedLast: 0n });
    // Committed up to 1; an append in flight takes 2..3. A compare-and-set naming 1 is refused
    // only once that append is committed and applied, with the committed end past it.
    const inFlight = leader.append([text('a1'), text('a2')]);
    const refused = leader.append([text('b')], { expectedLast: 1n }).then(
      () => ({ error: undefined as unknown, lastAtRefusal: -1n }),
      (error: unknown) => ({ error, lastAtRefusal: leader.last }),
    );
    const [made, r] = await Promise.all([inFlight, refused]);
    expect(made.last).toBe(3n);
    expect(isPlexusError(r.error, 'PLX_STORAGE_CONFLICT')).toBe(true);
    expect((r.error as { details: unknown }).details).toMatchObject({ expected: 1n, actual: 3n });
    expect(r.lastAtRefusal).toBe(3n);
    // Below the committed end: refused at once, without a read barrier round.
    const rounds = leader.readBarrierRounds;
    const below = await leader.append([text('c')], { expectedLast: 2n }).catch((e: unknown) => e);
    expect(isPlexusError(below, 'PLX_STORAGE_CONFLICT')).toBe(true);
    expect((below as { details: unknown }).details).toMatchObject({ expected: 2n, actual: 3n });
    expect(leader.readBarrierRounds).toBe(rounds);
    // Beyond everything projected: refused after a read barrier confirmed this leader and its end.
    const beyond = await leader.append([text('d')], { expectedLast: 10n }).catch((e: unknown) => e);
    expect(isPlexusError(beyond, 'PLX_STORAGE_CONFLICT')).toBe(true);
    expect((beyond as { details: unknown }).details).toMatchObject({ expected: 10n, actual: 3n });
    expect(leader.readBarrierRounds).toBe(rounds + 1);
    const all = await sameEverywhere(c);
    expect(all.map((x) => x.split('|')[3])).toEqual(['x', 'a1', 'a2']);
  });

  it('refuses compare-and-set mismatches and stale epochs, and pipelines appends with expectedLast', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    await leader.append([text('x')], { expectedLast: 0n });
    const conflict = await leader.append([text('y')], { expectedLast: 0n }).catch((e: unknown) => e);
    expect(isPlexusError(conflict, 'PLX_STORAGE_CONFLICT')).toBe(true);
    expect((conflict as { details: { actual: bigint } }).details.actual).toBe(1n);
    // expectedLast counts pending proposals of this leader: both go ahead without waiting.
    const [a, b] = await Promise.all([
      leader.append([text('p1'), text('p2')], { expectedLast: 1n }),
      leader.append([text('p3')], { expectedLast: 3n }),
    ]);
    expect([a.first, a.last, b.first]).toEqual([2n, 3n, 4n]);
    const term = BigInt(leader.status().term);
    expect(leader.highestEpoch).toBe(term);
    const fenced = await leader.append([text('z')], { epoch: term - 1n }).catch((e: unknown) => e);
    expect(isPlexusError(fenced, 'PLX_STORAGE_FENCED')).toBe(true);
    const newer = await leader.append([text('z')], { epoch: term + 1n }).catch((e: unknown) => e);
    expect(isPlexusError(newer, 'PLX_CHRONACTA_HA_NOT_LEADER')).toBe(true);
    await leader.append([text('ok')], { epoch: term, expectedLast: 4n });
    const all = await sameEverywhere(c);
    expect(all.map((r) => r.split('|')[3])).toEqual(['x', 'p1', 'p2', 'p3', 'ok']);
    // Committed records cannot be truncated; a no-op truncation is fine.
    await leader.truncateAfter(5n);
    const trunc = await leader.truncateAfter(2n).catch((e: unknown) => e);
    expect(isPlexusError(trunc, 'PLX_CHRONACTA_HA_UNSUPPORTED')).toBe(true);
    const bad = await leader.append([]).catch((e: unknown) => e);
    expect(isPlexusError(bad, 'PLX_STORAGE_BAD_INPUT')).toBe(true);
  });

  it('skips a replayed EVFR entry (same batch at the same positions) on every member and stops on a conflicting batch', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    const batchId = new Uint8Array(16).fill(7);
    await leader.append([text('a'), text('b')], { batchId });
    await leader.append([text('c')]);
    await sameEverywhere(c);
    const term = leader.status().term;
    // The same batch again at positions 1..2, as a duplicated AppendEntries would carry it.
    await proposeRaw(leader, encodeEvfr({ batchId, first: 1, epoch: term, records: [text('a'), text('b')] }));
    await until(() => [...c.logs.values()].every((l) => l.status().duplicatesSkipped === 1), {
      timeoutMs: 5000,
      what: 'skips',
    });
    expect(leader.last).toBe(3n);
    const r = await leader.append([text('d')]);
    expect(r.first).toBe(4n);
    const all = await sameEverywhere(c);
    expect(all.map((x) => x.split('|')[3])).toEqual(['a', 'b', 'c', 'd']);
    // Other records at taken positions: a divergence; every member stops loudly.
    const other = encodeEvfr({ batchId: new Uint8Array(16).fill(9), first: 2, epoch: term, records: [text('x')] });
    const outcome = await proposeRaw(leader, other).catch((e: unknown) => e);
    expect(isPlexusError(outcome, 'PLX_CHRONACTA_HA_DIVERGED')).toBe(true);
    await until(() => [...c.logs.values()].every((l) => l.status().failure !== undefined), {
      timeoutMs: 5000,
      what: 'all to stop',
    });
    const after = await leader.append([text('e')]).catch((e: unknown) => e);
    expect(isPlexusError(after, 'PLX_CHRONACTA_HA_STOPPED')).toBe(true);
    for (const l of c.logs.values()) expect(l.last).toBe(4n);
  });

  it('stops every member loudly on a committed frame that leaves a gap', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    await leader.append([text('a')]);
    await sameEverywhere(c);
    const gap = encodeEvfr({
      batchId: new Uint8Array(16).fill(3),
      first: 5,
      epoch: leader.status().term,
      records: [text('g')],
    });
    const outcome = await proposeRaw(leader, gap).catch((e: unknown) => e);
    expect(isPlexusError(outcome, 'PLX_CHRONACTA_HA_DIVERGED')).toBe(true);
    expect((outcome as Error).message).toContain('a gap');
    await until(() => [...c.logs.values()].every((l) => l.status().failure !== undefined), {
      timeoutMs: 5000,
      what: 'all to stop',
    });
    for (const l of c.logs.values()) expect(l.last).toBe(1n); // never written with a gap
  });

  it('stops on a committed entry that is not a valid frame', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    const frame = encodeEvfr({ batchId: new Uint8Array(16).fill(4), first: 1, epoch: 1, records: [text('x')] });
    // The record's length runs past the body. (A changed payload byte would be the body checksum's
    // to see, and the Raft message's and journal record's checksums already cover an entry's bytes.)
    frame[56] = 0xff;
    const outcome = await proposeRaw(leader, frame).catch((e: unknown) => e);
    expect(isPlexusError(outcome, 'PLX_CHRONACTA_HA_DIVERGED')).toBe(true);
    expect((outcome as Error).message).toContain('record-length');
    for (const l of c.logs.values()) expect(l.last).toBe(0n);
  });

  it('a restarted member re-applies the Raft log idempotently and catches up', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    for (let i = 0; i < 10; i++) await leader.append([text(`a${i}`)]);
    await sameEverywhere(c);
    const fid = c.ids.find((id) => id !== idOf(c, leader)) as number;
    await c.stop(fid);
    for (let i = 0; i < 10; i++) await leader.append([text(`b${i}`)]);
    const back = await c.restart(fid);
    // Its local log held a0..a9: re-applying their entries skips them as duplicates.
    await until(() => back.last === 20n, { timeoutMs: 10_000, what: 'catch-up' });
    expect(back.status().duplicatesSkipped).toBe(10);
    const all = await sameEverywhere(c);
    expect(all.map((r) => r.split('|')[3]).slice(8, 12)).toEqual(['a8', 'a9', 'b0', 'b1']);
    // The leader restarts too: a new leader takes over and the log is unchanged.
    const lid = idOf(c, leader);
    await c.stop(lid);
    const rest = c.ids.filter((id) => id !== lid);
    const second = await c.waitLeader(rest);
    await second.append([text('c0')]);
    await c.restart(lid);
    const final = await sameEverywhere(c);
    expect(final.length).toBe(21);
    expect(final.slice(0, 20)).toEqual(all);
  });

  it('adds and removes members through Raft and hands leadership over', async () => {
    const c = (cluster = await startCluster());
    let leader = await c.waitLeader();
    await leader.append([text('before')]);
    // A fourth member joins empty (direct links: it is not behind the proxies).
    const dir = mkdtempSync(join(tmpdir(), 'plexus-ha-join-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const existing = leader.status().members;
    const fourth = await openClusterLog({
      id: 4,
      dir,
      join: true,
      members: [...existing, { id: 4, raftAddress: '127.0.0.1:0', advertise: '127.0.0.1:9004' }],
      dial: new Map(c.ids.map((id) => [id, `127.0.0.1:${c.ports.get(id)}`])),
      listen: { host: '127.0.0.1', port: 0 },
      tickMs: TICK_MS,
      timeoutMs: 2000,
      localFsync: 'never',
      logger: quiet,
    });
    cleanups.push(() => fourth.close());
    await leader.addMember({ id: 4, raftAddress: `127.0.0.1:${fourth.raftPort}`, advertise: '127.0.0.1:9004' });
    await until(() => fourth.last === 1n, { timeoutMs: 5000, what: 'the new member to catch up' });
    await leader.append([text('after')]);
    await until(() => fourth.last === 2n, { timeoutMs: 5000, what: 'replication to the new member' });
    expect(leader.status().voters).toEqual([1, 2, 3, 4]);
    expect((await readAll(fourth)).map((r) => Buffer.from(r.payload).toString())).toEqual(['before', 'after']);
    const dup = await leader.addMember({ id: 4, raftAddress: '127.0.0.1:1', advertise: '127.0.0.1:1' }).catch((e) => e);
    expect(isPlexusError(dup, 'PLX_CHRONACTA_HA_MEMBERSHIP')).toBe(true);

    // Leadership transfer (rolling upgrade: move it off a member before restarting it).
    const lid = idOf(c, leader);
    const target = c.ids.find((id) => id !== lid) as number;
    await leader.transferLeadership(target);
    leader = await c.waitLeader();
    expect(idOf(c, leader)).toBe(target);
    await leader.append([text('moved')]);
    await until(() => fourth.last === 3n, { timeoutMs: 5000, what: 'the new member to follow the new leader' });

    await leader.removeMember(4);
    expect(leader.status().voters).toEqual([1, 2, 3]);
    await leader.append([text('without4')]);
    await sameEverywhere(c);
    expect(fourth.last).toBe(3n); // it no longer receives entries
    const follower = c.logs.get(lid) as ReplicatedLog;
    const refused = await follower.addMember({ id: 5, raftAddress: '127.0.0.1:1', advertise: 'x:1' }).catch((e) => e);
    expect(isPlexusError(refused, 'PLX_CHRONACTA_HA_NOT_LEADER')).toBe(true);
  });

  it('runs between members over mutual TLS 1.3 and refuses a member of another CA', async () => {
    const ca = await createMemberCa('c1');
    const creds = new Map<number, RaftTlsOptions>();
    for (const id of [1, 2, 3]) {
      const r = await issueMemberCertificate(ca, id);
      creds.set(id, { key: r.key, cert: r.cert, ca: ca.cert, peerId: memberOfCertificate });
    }
    // Member 3 has a certificate from another CA: the others refuse it, so it never catches up.
    const other = await createMemberCa('c1');
    const foreign = await issueMemberCertificate(other, 3);
    creds.set(3, { key: foreign.key, cert: foreign.cert, ca: ca.cert, peerId: memberOfCertificate });
    // Members 1 and 2 count the TLS handshakes they refuse (member 3 dialling them).
    const refusedBy = new Map<number, number>();
    const counting = (id: number) => ({
      warn: (message: string) => {
        if (message.includes('refused a TLS handshake')) refusedBy.set(id, (refusedBy.get(id) ?? 0) + 1);
      },
      error: () => undefined,
    });
    const c = (cluster = await startCluster(3, {}, (id) => ({ tls: creds.get(id), logger: counting(id) })));
    const leader = await c.waitLeader([1, 2]);
    await leader.append([text('secret')]);
    const peer = c.logs.get(idOf(c, leader) === 1 ? 2 : 1) as ReplicatedLog;
    await until(() => peer.last === 1n, { timeoutMs: 5000, what: 'replication over TLS' });
    // Member 3 dials again after each refusal: once both others refused it twice since the
    // append, it has had its chances to get the record.
    const seen = { 1: refusedBy.get(1) ?? 0, 2: refusedBy.get(2) ?? 0 };
    await until(() => (refusedBy.get(1) ?? 0) >= seen[1] + 2 && (refusedBy.get(2) ?? 0) >= seen[2] + 2, {
      timeoutMs: 10_000,
      what: "members 1 and 2 to refuse member 3's certificate again",
    });
    expect((c.logs.get(3) as ReplicatedLog).last).toBe(0n);
    expect((c.logs.get(3) as ReplicatedLog).status().role).not.toBe('leader');
  });

  it('checks the cluster configuration', () => {
    const cfg = parseHaConfig({
      clusterId: 'c1',
      members: [
        { id: 1, raftAddress: '127.0.0.1:7001', advertise: '127.0.0.1:2113' },
        { id: 2, raftAddress: '127.0.0.1:7002' },
      ],
    });
    expect(cfg.members[1]?.advertise).toBe('127.0.0.1:7002');
    for (const bad of [
      null,
      { members: [] },
      { members: [{ id: 0, raftAddress: 'a:1' }] },
      { members: [{ id: 1, raftAddress: 'nohost' }] },
      {
        members: [
          { id: 1, raftAddress: 'a:1' },
          { id: 1, raftAddress: 'b:1' },
        ],
      },
    ]) {
      expect(() => parseHaConfig(bad)).toThrow(expect.objectContaining({ code: 'PLX_CHRONACTA_HA_BAD_CONFIG' }));
    }
  });
});
