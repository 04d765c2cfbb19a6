/**
 * The seed's partition matrix against three real `plexus chronacta serve --cluster`
 * processes (node dist/cli/main.js, built by `npx tsc -p tsconfig.build.json`) on loopback.
 *
 * Every directed Raft link goes through its own fault-injecting TCP proxy
 * (test/helpers/fault-proxy.ts): member i's data directory gets a cluster.json in which
 * every OTHER member's raftAddress is the proxy for the link i -> that member, while its own
 * raftAddress is the real one it listens on (same cluster id, same member ids, same
 * advertise addresses on every member). Cutting, delaying or dropping one proxy therefore
 * affects exactly one direction of one pair. Clients talk to each member's gRPC port
 * directly (ChronactaClient), and the assertions go through the client and ClusterService
 * status (role, leader, term, last position). At the end of each test every member is read
 * back over gRPC and, after the processes stopped, from its files on disk, and all must hold
 * the same events at the same positions.
 *
 * Every process is stopped by its PID in afterEach, also when a test fails.
 * The fast in-process stand-in of the same matrix is partitions.test.ts.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { clusterFiles, writeClusterFiles } from '../../ts/chronacta/layout.js';
import { createMemberCa, issueMemberFiles } from '../../ts/chronacta/member-tls.js';
import { decodeEntry } from '../../ts/chronacta/record.js';
import type { ClusterStatus } from '../../ts/chronacta/types.js';
import { RecordKind } from '../../ts/codec/chronacta-record.js';
import { openLog } from '../../ts/storage/file-log.js';
import { isRunning, MAIN, spawnServe, stopAll, stopChild } from '../chronacta-cluster/helpers.js';
import { ProxyMesh } from '../helpers/fault-proxy.js';
import { freePort } from '../helpers/ports.js';
import { until } from '../helpers/until.js';
import { pace } from './helpers.js';

const TICK_MS = 20;
const N = 3;
/** Every process this file started (stopped by PID in afterEach, whatever happened). */
const spawned = new Set<ChildProcess>();

/** The low end of the kernel's range of ephemeral ports (outgoing connections take theirs from it). */
interface Member {
  readonly id: number;
  readonly dir: string;
  readonly address: string;
  child: ChildProcess;
  client: ChronactaClient;
}

const running = (m: Member) => isRunning(m.child);

/** Closes the member's client and stops its process by PID: `signal`, SIGKILL after 5 s. */
function stopMember(m: Member, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  m.client.close();
  return stopChild(m.child, signal);
}

/** A member process at this file's tick, tracked in `spawned`. */
const spawnAt = (id: number, dir: string) => spawnServe(id, dir, ['--tick-ms', String(TICK_MS)], spawned);

interface ProcCluster {
  readonly root: string;
  readonly members: Member[];
  readonly mesh: ProxyMesh;
  member(id: number): Member;
  status(id: number): Promise<ClusterStatus>;
  /** The one member that accepts writes among `among`, once there is exactly one. */
  leader(among?: number[], ms?: number): Promise<Member>;
  restart(id: number): Promise<Member>;
  close(): Promise<void>;
}

async function startProcCluster(): Promise<ProcCluster> {
  const root = mkdtempSync(join(tmpdir(), 'plexus-ha-serve-'));
  const ports: number[] = [];
  while (ports.length < 2 * N) {
    const p = await freePort();
    if (!ports.includes(p)) ports.push(p);
  }
  const grpc = ports.slice(0, N);
  const raft = ports.slice(N);
  const mesh = await ProxyMesh.start(raft);
  const clusterId = `partitions-${process.pid}-${Date.now()}`;
  const dirs = Array.from({ length: N }, (_, i) => join(root, `node-${i + 1}`));
  // Mutual TLS between members, as `cluster init` sets it up (the proxies pass the bytes on).
  const ca = await createMemberCa(clusterId);
  for (let self = 1; self <= N; self++) {
    // This member's view: its own real Raft address, every peer behind the proxy self -> peer.
    const members = Array.from({ length: N }, (_, i) => ({
      id: i + 1,
      raftAddress: i + 1 === self ? `127.0.0.1:${raft[i]}` : mesh.addressFor(self - 1, i),
      advertise: `127.0.0.1:${grpc[i]}`,
    }));
    await writeClusterFiles(dirs[self - 1] as string, clusterFiles(clusterId, members, self));
    await issueMemberFiles(dirs[self - 1] as string, ca, self);
  }
  const members: Member[] = [];
  const c: ProcCluster = {
    root,
    members,
    mesh,
    member(id) {
      return members[id - 1] as Member;
    },
    status(id) {
      return c.member(id).client.clusterStatus();
    },
    leader(among = members.map((m) => m.id), ms = 15_000) {
      return until(
        async () => {
          const live = among.map((id) => c.member(id)).filter(running);
          const st = await Promise.all(live.map((m) => m.client.clusterStatus().catch(() => undefined)));
          const ls = live.filter((_, i) => st[i]?.acceptingWrites === true);
          return ls.length === 1 ? ls[0] : undefined;
        },
        { timeoutMs: ms, what: `one leader among ${among.join(',')}`, intervalMs: 25 },
      );
    },
    async restart(id) {
      const old = c.member(id);
      await stopMember(old, 'SIGKILL');
      const s = await spawnAt(id, old.dir);
      const m: Member = { ...old, child: s.child, client: new ChronactaClient(s.address, { deadlineMs: 5000 }) };
      members[id - 1] = m;
      return m;
    },
    async close() {
      for (const m of members) await stopMember(m);
      await mesh.close();
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    const settled = await Promise.allSettled(dirs.map((d, i) => spawnAt(i + 1, d)));
    const failed = settled.find((r) => r.status === 'rejected');
    if (failed) {
      // Stop the ones that did start, by PID, before giving up.
      for (const r of settled) if (r.status === 'fulfilled') await stopChild(r.value.child, 'SIGKILL');
      throw failed.reason;
    }
    const started = settled.map((r) => (r as PromiseFulfilledResult<Awaited<ReturnType<typeof spawnAt>>>).value);
    started.forEach((s, i) => {
      expect(s.address).toBe(`127.0.0.1:${grpc[i]}`);
      members.push({
        id: i + 1,
        dir: dirs[i] as string,
        address: s.address,
        child: s.child,
        client: new ChronactaClient(s.address, { deadlineMs: 5000 }),
      });
    });
  } catch (e) {
    await c.close();
    throw e;
  }
  return c;
}

const event = (data: string) => ({ type: 'seed', data });

/**
 * Every event member `m` serves from its own copy, as `position|stream|version|id|data`: a
 * follower read that is not redirected to the leader (the members have converged, so every
 * follower is within its staleness bound).
 */
async function served(m: Member): Promise<string[]> {
  const c = new ChronactaClient(m.address, {
    deadlineMs: 5000,
    readConsistency: 'follower',
    followReadRedirects: false,
  });
  try {
    // A follower refuses (PLX_CHRONACTA_STALE_READ) until it has heard from its leader recently: retry.
    return await until(() => readEvery(c, m.address), {
      timeoutMs: 10_000,
      what: `a read served by member ${m.id}`,
      intervalMs: 25,
    });
  } finally {
    c.close();
  }
}

async function readEvery(c: ChronactaClient, address: string): Promise<string[]> {
  const out: string[] = [];
  let from = 1n;
  for (;;) {
    const r = await c.readAll({ fromPosition: from, maxCount: 1000 });
    if (r.read) expect(r.read.address).toBe(address);
    for (const e of r.events)
      out.push(`${e.position}|${e.stream}|${e.version}|${e.id}|${Buffer.from(e.data).toString()}`);
    if (r.events.length === 0 || r.end) return out;
    from = (r.events[r.events.length - 1]?.position as bigint) + 1n;
  }
}

/** What a stopped member's local log holds on disk: `position|epoch|stream|version|data` of each event record. */
async function onDisk(dir: string): Promise<string[]> {
  const log = await openLog(join(dir, 'replica', 'log'));
  try {
    const out: string[] = [];
    let from = 1n;
    for (;;) {
      const recs = await log.read(from, { maxCount: 1000 });
      if (recs.length === 0) return out;
      for (const r of recs) {
        const e = decodeEntry(r.payload);
        if (e.kind !== RecordKind.EVENT) continue;
        out.push(`${r.position}|${r.epoch}|${e.stream}|${e.version}|${Buffer.from(e.data).toString()}`);
      }
      from = (recs[recs.length - 1]?.position as bigint) + 1n;
    }
  } finally {
    await log.close();
  }
}

/**
 * Heals every link, waits until every running member applied the leader's last position,
 * compares what they serve, stops them and compares their files. Returns the data fields.
 */
async function converged(c: ProcCluster): Promise<string[]> {
  c.mesh.heal();
  const leader = await c.leader();
  const target = (await leader.client.clusterStatus()).lastPosition;
  for (const m of c.members) {
    await until(async () => ((await m.client.clusterStatus()).lastPosition === target ? true : undefined), {
      timeoutMs: 15_000,
      what: `member ${m.id} to apply position ${target}`,
      intervalMs: 25,
    });
  }
  const views = await Promise.all(c.members.map((m) => served(m)));
  for (const v of views) expect(v).toEqual(views[0]);
  expect((views[0] as string[]).length).toBe(Number(target));
  for (const m of c.members) await stopMember(m);
  const disks = await Promise.all(c.members.map((m) => onDisk(m.dir)));
  for (const d of disks) expect(d).toEqual(disks[0]);
  // The files hold what was served, event by event, at the same positions.
  expect((disks[0] as string[]).map((l) => l.split('|')[0])).toEqual(
    (views[0] as string[]).map((l) => l.split('|')[0]),
  );
  return (views[0] as string[]).map((l) => l.split('|')[4] as string);
}

const codeOf = (e: unknown) => (e as { code?: string }).code;

let cluster: ProcCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
  // Any process left over (a test that failed or timed out while starting a cluster): by PID.
  await stopAll(spawned);
  spawned.clear();
});

describe.skipIf(!existsSync(MAIN))('chronacta serve --cluster processes: partitions (seed matrix)', () => {
  it('TestFollowerRejectsAppend', async () => {
    const c = (cluster = await startProcCluster());
    const leader = await c.leader();
    await leader.client.append('orders-1', [event('one')]);
    const status = await c.status(leader.id);
    for (const f of c.members.filter((m) => m !== leader)) {
      const fs = await until(
        async () => {
          const s = await c.status(f.id);
          return s.leaderId === String(leader.id) ? s : undefined;
        },
        { timeoutMs: 5000, what: `member ${f.id} to know the leader`, intervalMs: 25 },
      );
      expect(fs.role).toBe('follower');
      expect(fs.acceptingWrites).toBe(false);
      expect(fs.term).toBe(status.term);
      // Refused, with FAILED_PRECONDITION and the leader's address, and nothing written.
      const err = await f.client.append('orders-1', [event('refused')]).catch((e: unknown) => e);
      expect(err).toMatchObject({
        code: 'PLX_CHRONACTA_HA_NOT_LEADER',
        details: { leaderAddress: leader.address, grpcStatus: 9 },
      });
    }
    // A flaky link (leader -> one follower drops connections) loses nothing.
    const flaky = c.members.find((m) => m !== leader) as Member;
    c.mesh.link(leader.id - 1, flaky.id - 1).dropConnections(0.3);
    for (let i = 0; i < 10; i++) await leader.client.append('orders-1', [event(`flaky-${i}`)]);
    // Raft really went through the proxies: every directed link between the leader and a
    // follower carried bytes. (Two followers talk to each other only if one of them campaigned,
    // which depends on start-up timing: those links may have carried nothing.)
    const l = leader.id - 1;
    for (let j = 0; j < N; j++) {
      if (j === l) continue;
      expect(c.mesh.link(l, j).stats.bytesForwarded).toBeGreaterThan(0);
      expect(c.mesh.link(j, l).stats.bytesForwarded).toBeGreaterThan(0);
    }
    const data = await converged(c);
    expect(data).toEqual(['one', ...Array.from({ length: 10 }, (_, i) => `flaky-${i}`)]);
  }, 60_000);

  it('TestThreeNodeQuorumBlocksWhenOnlyLeader', async () => {
    const c = (cluster = await startProcCluster());
    const leader = await c.leader();
    await leader.client.append('orders-1', [event('before')]);
    c.mesh.isolate(leader.id - 1);
    // Alone, the leader cannot commit: the append is never acknowledged.
    // (The server holds an uncommitted append up to its commit timeout, 10 s; this client gives up at 1.5 s.)
    const impatient = new ChronactaClient(leader.address, { deadlineMs: 1500 });
    const err = await impatient
      .append('orders-1', [event('alone')])
      .catch((e: unknown) => e)
      .finally(() => impatient.close());
    expect(err).toBeInstanceOf(Error);
    expect([
      'PLX_RAFT_TIMEOUT',
      'PLX_RAFT_PROPOSAL_LOST',
      'PLX_CHRONACTA_HA_NOT_LEADER',
      'PLX_CHRONACTA_TIMEOUT',
    ]).toContain(codeOf(err));
    // Check-quorum: it steps down and refuses further writes.
    const down = await until(
      async () => {
        const s = await c.status(leader.id);
        return s.role !== 'leader' ? s : undefined;
      },
      { timeoutMs: 5000, what: 'the lone leader to step down', intervalMs: 25 },
    );
    expect(down.acceptingWrites).toBe(false);
    const again = await leader.client.append('orders-1', [event('alone-2')]).catch((e: unknown) => e);
    expect(codeOf(again)).toBe('PLX_CHRONACTA_HA_NOT_LEADER');
    expect((await c.status(leader.id)).lastPosition).toBe(1n);
    // The other two elect a leader of a later term and go on.
    const rest = c.members.filter((m) => m !== leader).map((m) => m.id);
    const second = await c.leader(rest);
    expect((await c.status(second.id)).term as bigint).toBeGreaterThan(down.term as bigint);
    const r = await second.client.append('orders-1', [event('after')]);
    expect(r.lastPosition).toBe(2n);
    const data = await converged(c);
    expect(data).toEqual(['before', 'after']);
  }, 60_000);

  it('TestIsolatedFollowerDoesNotSelfElect', async () => {
    const c = (cluster = await startProcCluster());
    const leader = await c.leader();
    const follower = c.members.find((m) => m !== leader) as Member;
    await leader.client.append('orders-1', [event('a')]);
    await until(async () => ((await c.status(follower.id)).lastPosition === 1n ? true : undefined), {
      timeoutMs: 5000,
      what: 'the follower to apply a',
      intervalMs: 25,
    });
    const term = (await c.status(leader.id)).term;
    c.mesh.isolate(follower.id - 1);
    // Many election timeouts (10..20 ticks of 20 ms each): pre-vote keeps it from campaigning.
    const roles = new Set<string>();
    const terms = new Set<bigint>();
    const end = Date.now() + 100 * TICK_MS;
    while (Date.now() < end) {
      const s = await c.status(follower.id);
      roles.add(s.role as string);
      terms.add(s.term as bigint);
      // The sampling period: the window (100 ticks under isolation) is the scenario.
      await pace(25);
    }
    const r = await leader.client.append('orders-1', [event('b')]);
    expect(r.lastPosition).toBe(2n);
    expect(roles.has('leader')).toBe(false);
    expect(roles.has('candidate')).toBe(false);
    expect([...terms]).toEqual([term]); // no term inflation
    expect((await c.status(follower.id)).lastPosition).toBe(1n); // cut off: b did not reach it
    c.mesh.heal();
    await until(async () => ((await c.status(follower.id)).lastPosition === 2n ? true : undefined), {
      timeoutMs: 10_000,
      what: 'the follower to catch up',
      intervalMs: 25,
    });
    // The healed follower did not disrupt the leader.
    const ls = await c.status(leader.id);
    expect(ls.role).toBe('leader');
    expect(ls.term).toBe(term);
    const data = await converged(c);
    expect(data).toEqual(['a', 'b']);
  }, 60_000);

  it('TestThreeNodeMajorityFailover', async () => {
    const c = (cluster = await startProcCluster());
    const first = await c.leader();
    const acked: string[] = [];
    for (let i = 0; i < 5; i++) {
      await first.client.append(`orders-${i}`, [event(`a${i}`), event(`a${i}'`)]);
      acked.push(`a${i}`, `a${i}'`);
    }
    const firstTerm = (await c.status(first.id)).term as bigint;
    c.mesh.isolate(first.id - 1);
    const rest = c.members.filter((m) => m !== first).map((m) => m.id);
    const second = await c.leader(rest);
    const st = await c.status(second.id);
    expect(st.term as bigint).toBeGreaterThan(firstTerm);
    // The new leader applied everything committed before it accepts writes.
    expect(st.lastPosition).toBe(10n);
    for (let i = 0; i < 5; i++) {
      const r = await second.client.append(`orders-${i}`, [event(`b${i}`)]);
      expect(r.lastPosition).toBe(BigInt(11 + i));
      acked.push(`b${i}`);
    }
    // The third member follows the new leader.
    const third = rest.find((id) => id !== second.id) as number;
    expect((await c.status(third)).leaderId).toBe(String(second.id));
    await until(async () => ((await c.status(first.id)).role !== 'leader' ? true : undefined), {
      timeoutMs: 5000,
      what: 'the isolated leader to step down',
      intervalMs: 25,
    });
    const data = await converged(c);
    expect(data).toEqual(acked);
  }, 60_000);

  it('TestLeaderKillCommittedEventsSurvive', async () => {
    const c = (cluster = await startProcCluster());
    const leader = await c.leader();
    // Every link slow and jittery while the writer runs.
    for (let i = 0; i < N; i++) for (let j = 0; j < N; j++) if (i !== j) c.mesh.link(i, j).delay(2, 6);
    const acked: { position: bigint; data: string }[] = [];
    let stop = false;
    const writer = (async () => {
      for (let i = 0; !stop; i++) {
        try {
          const r = await leader.client.append(`k-${i % 3}`, [event(`k${i}`)]);
          acked.push({ position: r.lastPosition, data: `k${i}` });
        } catch (e) {
          return codeOf(e);
        }
      }
      return 'stopped';
    })();
    await until(async () => (acked.length >= 30 ? true : undefined), {
      timeoutMs: 15_000,
      what: 'appends before the kill',
      intervalMs: 25,
    });
    await stopMember(leader, 'SIGKILL');
    stop = true;
    expect(running(leader)).toBe(false);
    expect(await writer).not.toBe('stopped'); // cut off by the kill, not by `stop`
    const rest = c.members.filter((m) => m !== leader);
    const second = await c.leader(rest.map((m) => m.id));
    const after = await second.client.append('k-after', [event('after-kill')]);
    // Every acknowledged append is on both survivors at the position it was acknowledged with.
    for (const m of rest) {
      await until(
        async () => ((await m.client.clusterStatus()).lastPosition === after.lastPosition ? true : undefined),
        { timeoutMs: 10_000, what: `member ${m.id} to apply the new leader's append`, intervalMs: 25 },
      );
    }
    const views = await Promise.all(rest.map((m) => served(m)));
    expect(views[1]).toEqual(views[0]);
    const byPos = new Map((views[0] as string[]).map((l) => [l.split('|')[0], l.split('|')[4]]));
    for (const a of acked) expect(byPos.get(String(a.position))).toBe(a.data);
    expect(byPos.get(String(after.lastPosition))).toBe('after-kill');
    const texts = (views[0] as string[]).map((l) => l.split('|')[4]);
    expect(new Set(texts).size).toBe(texts.length); // nothing twice
    // The killed member restarts on its files, behind the same proxies, and catches up as a follower.
    const back = await c.restart(leader.id);
    await until(
      async () => ((await back.client.clusterStatus()).lastPosition === after.lastPosition ? true : undefined),
      { timeoutMs: 15_000, what: 'the restarted member to catch up', intervalMs: 25 },
    );
    expect((await back.client.clusterStatus()).role).toBe('follower');
    const data = await converged(c);
    expect(data).toEqual(texts);
  }, 60_000);
});
