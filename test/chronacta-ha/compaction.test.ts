/**
 * Compaction in cluster mode (docs/chronacta-ha.md, "Snapshots and catch-up"): the leader
 * agrees a cutoff with every member through Raft, then every member compacts its own local log
 * and archive up to it, under load (appends and reads go on, nothing acknowledged is lost, every
 * member answers the same). A member that is down holds the cutoff back and catches up after
 * it returns; a member added after the others compacted is stopped with a seeding instruction,
 * and seeded from a copy of a member's local log it joins.
 */
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { HaMember } from '../../ts/chronacta/cluster-config.js';
import { openClusterLog, type ReplicatedLog } from '../../ts/chronacta/cluster-log.js';
import { EventStore } from '../../ts/chronacta/store.js';
import type { RecordedEvent } from '../../ts/chronacta/types.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { freePort } from '../helpers/ports.js';
import { until } from '../helpers/until.js';
import { pace, quiet, startCluster, TICK_MS, text } from './helpers.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ev = (s: string) => ({ type: 'T', data: text(s) });

function replicaOf(s: EventStore): ReplicatedLog {
  return (s as unknown as { replicated: ReplicatedLog }).replicated;
}

/** Three stores in cluster mode; each compacts its own files when a cutoff is agreed. */
async function storeCluster() {
  const root = mkdtempSync(join(tmpdir(), 'plexus-ha-compact-'));
  const members: HaMember[] = [];
  for (let id = 1; id <= 3; id++) {
    members.push({ id, raftAddress: `127.0.0.1:${await freePort()}`, advertise: `127.0.0.1:${7000 + id}` });
  }
  const stores = new Map<number, EventStore>();
  const reports = new Map<number, bigint[]>();
  const open = async (id: number) => {
    const s = await EventStore.open({
      dataDir: join(root, `m${id}`),
      fsync: 'never',
      segmentBytes: 8 * 1024,
      logger: quiet,
      replication: {
        id,
        members,
        tickMs: TICK_MS,
        timeoutMs: 3000,
        localFsync: 'never',
        snapshotEvery: 30,
        snapshotRetain: 5,
        logger: quiet,
      },
    });
    stores.set(id, s);
    // The wiring a member needs: compact its own files once a cutoff is agreed.
    replicaOf(s).onCompactionAgreed(() => {
      void s.compactToAgreed().then(
        (r) => reports.set(id, [...(reports.get(id) ?? []), r.cutoff]),
        () => undefined,
      );
    });
    return s;
  };
  await Promise.all(members.map((m) => open(m.id)));
  const leader = () => {
    const ls = [...stores.values()].filter((s) => s.clusterStatus()?.acceptingWrites);
    return ls.length === 1 ? ls[0] : undefined;
  };
  cleanups.push(async () => {
    for (const s of stores.values()) await s.close().catch(() => undefined);
    rmSync(root, { recursive: true, force: true });
  });
  await until(() => leader() !== undefined, { timeoutMs: 10_000, what: 'a leader' });
  return { stores, reports, open, leader: () => leader() as EventStore };
}

async function everything(s: EventStore): Promise<string[]> {
  const out: string[] = [];
  let from = 1n;
  for (;;) {
    const r = await s.readAll({ fromPosition: from, maxCount: 1000 });
    out.push(...r.events.map((e: RecordedEvent) => `${e.position}|${e.stream}|${e.version}|${e.id}`));
    if (r.end) return out;
    from = r.nextPosition;
  }
}

describe('compaction in cluster mode', () => {
  it('compacts every member up to an agreed cutoff under load; appends and reads go on, nothing is lost', async () => {
    const c = await storeCluster();
    const leader = c.leader();
    const acked: string[] = [];
    let stop = false;
    let reads = 0;
    const writer = (async () => {
      for (let i = 0; !stop; i++) {
        const r = await leader.append(`s-${i % 4}`, [ev(`e${i}-${'x'.repeat(200)}`), ev(`f${i}`)]);
        acked.push(`s-${i % 4}@${r.lastPosition}`);
        if (i === 40) await leader.truncateStream('s-1', { maxCount: 2 });
        if (i === 60) await leader.deleteStream('s-2');
      }
    })();
    const reader = (async () => {
      const followers = [...c.stores.values()].filter((s) => s !== leader);
      while (!stop) {
        for (const f of followers) await f.readAll({ maxCount: 50 });
        reads++;
        // Loop pacing: the follower reader goes on until the test ends; it waits for nothing.
        await pace(5);
      }
    })();
    await until(() => acked.length >= 100, { timeoutMs: 20_000, what: 'load' });
    const first = await leader.compact();
    await until(() => acked.length >= 160, { timeoutMs: 20_000, what: 'more load' });
    const second = await leader.compact();
    stop = true;
    await Promise.all([writer, reader]);
    expect(reads).toBeGreaterThan(0);
    expect(first.cutoff).toBeGreaterThan(1n);
    expect(second.cutoff).toBeGreaterThanOrEqual(first.cutoff);
    expect(first.dropped + second.dropped).toBeGreaterThan(0);
    const top = leader.lastPosition;
    await until(() => [...c.stores.values()].every((s) => s.lastPosition === top), {
      timeoutMs: 10_000,
      what: 'convergence',
    });
    // Every member compacted its own files up to a cutoff agreed through Raft.
    await until(() => [1, 2, 3].every((id) => (c.reports.get(id) ?? []).length > 0), {
      timeoutMs: 10_000,
      what: 'compaction everywhere',
    });
    for (const s of c.stores.values()) {
      const r = replicaOf(s);
      expect(r.compactionLimit).toBeGreaterThan(1n);
      expect(r.first).toBeGreaterThan(1n);
      expect(r.first).toBeLessThanOrEqual(r.compactionLimit);
    }
    // Every member answers the same, and every acknowledged append of a live stream is there.
    const views = await Promise.all([...c.stores.values()].map(everything));
    for (const v of views) expect(v).toEqual(views[0]);
    const positions = new Set((views[0] as string[]).map((l) => l.split('|')[0]));
    for (const a of acked) {
      const [stream, last] = a.split('@') as [string, string];
      if (stream === 's-1' || stream === 's-2') continue;
      expect(positions.has(last)).toBe(true);
    }
    expect((await leader.readStream('s-1')).events.length).toBeLessThanOrEqual(
      acked.filter((a) => a.startsWith('s-1@')).length * 2,
    );
  });

  it('a member that is down holds the agreed cutoff back, and catches up when it returns', async () => {
    const c = await storeCluster();
    let leader = c.leader();
    for (let i = 0; i < 30; i++) await leader.append(`a-${i % 3}`, [ev(`a${i}-${'y'.repeat(300)}`)]);
    const down = [...c.stores].find(([, s]) => s !== leader)?.[0] as number;
    await until(() => c.stores.get(down)?.lastPosition === leader.lastPosition, {
      timeoutMs: 5000,
      what: 'the follower',
    });
    const downAt = (c.stores.get(down) as EventStore).lastPosition;
    await (c.stores.get(down) as EventStore).close();
    for (let i = 0; i < 60; i++) await leader.append(`b-${i % 3}`, [ev(`b${i}-${'y'.repeat(300)}`)]);
    const r = await leader.compact();
    // Records the stopped member lacks stay on every member that is up.
    expect(r.cutoff).toBeLessThanOrEqual(downAt + 1n);
    expect(replicaOf(leader).compactionLimit).toBeLessThanOrEqual(downAt + 1n);
    const back = await c.open(down);
    leader = c.leader();
    await leader.append('c', [ev('after')]);
    await until(() => back.lastPosition === leader.lastPosition, {
      timeoutMs: 15_000,
      what: 'the returning member',
    }).catch((e) => {
      const st = replicaOf(back).status();
      throw new Error(
        `${e}: ${JSON.stringify({ ...st, members: 0 }, (_k, v) => (typeof v === 'bigint' ? String(v) : v))} store ${back.lastPosition} leader ${leader.lastPosition} ${JSON.stringify(replicaOf(leader).status(), (_k, v) => (typeof v === 'bigint' ? String(v) : v))}`,
      );
    });
    expect(await everything(back)).toEqual(await everything(leader));
    // With everyone up again, the cutoff moves past what the member lacked.
    for (let i = 0; i < 30; i++) await leader.append(`d-${i % 3}`, [ev(`d${i}-${'y'.repeat(300)}`)]);
    await until(() => back.lastPosition === leader.lastPosition, {
      timeoutMs: 10_000,
      what: 'the returned member to follow',
    });
    const again = await leader.compact();
    expect(again.cutoff).toBeGreaterThan(downAt + 1n);
  });

  it('the cutoff stays at what every other member holds on disk, not at its Raft match index', async () => {
    // No background write-back and no Raft snapshots: a follower's local log is on disk only as
    // far as it was when the member opened, or when it closed, while its Raft match index moves
    // on with every append.
    const c = await startCluster(3, { localWritebackMs: 3_600_000, snapshotEvery: 0, segmentBytes: 4096 });
    cleanups.push(() => c.close());
    let leader = await c.waitLeader();
    for (let i = 0; i < 60; i++) await leader.append([text(`r${i}-${'q'.repeat(400)}`)]);
    await until(() => c.ids.every((id) => c.logs.get(id)?.last === 60n), { timeoutMs: 5000, what: 'replication' });
    const followers = () => c.ids.filter((id) => c.logs.get(id) !== leader);
    for (const id of followers()) expect((c.logs.get(id) as ReplicatedLog).durableLocalLast).toBe(0n);
    // Each follower answers the leader's QUERY with 0 on disk: nothing may go.
    expect(await leader.agreeCompaction(60n)).toBe(1n);
    // A clean close and an open put each follower's records on disk: now the cutoff moves.
    for (const id of followers()) {
      await c.stop(id);
      await c.restart(id);
    }
    leader = await c.waitLeader();
    for (const id of followers()) expect((c.logs.get(id) as ReplicatedLog).durableLocalLast).toBe(60n);
    const agreed = await leader.agreeCompaction(60n);
    expect(agreed).toBeGreaterThan(1n);
    expect(agreed).toBeLessThanOrEqual(61n);
    // A follower that cannot be asked holds the cutoff at its last answer.
    const cut = followers()[0] as number;
    c.mesh.isolate(cut - 1);
    for (let i = 0; i < 60; i++) await leader.append([text(`s${i}-${'q'.repeat(400)}`)]);
    const other = followers().find((id) => id !== cut) as number;
    await c.stop(other);
    await c.restart(other);
    leader = await c.waitLeader(c.ids.filter((id) => id !== cut));
    expect(await leader.agreeCompaction(leader.last)).toBeLessThanOrEqual(61n);
    c.mesh.heal();
  });

  it('a single member compacts on its own: no other member holds the cutoff back', async () => {
    const c = await startCluster(1, { localWritebackMs: 3_600_000, snapshotEvery: 0, segmentBytes: 4096 });
    cleanups.push(() => c.close());
    const only = await c.waitLeader();
    for (let i = 0; i < 60; i++) await only.append([text(`o${i}-${'q'.repeat(400)}`)]);
    const agreed = await only.agreeCompaction(40n);
    expect(agreed).toBeGreaterThan(1n);
    expect(agreed).toBeLessThanOrEqual(40n);
  });

  it('a member added after the others compacted stops with a seeding instruction, and joins once seeded', async () => {
    const c = await startCluster(3, { snapshotEvery: 30, snapshotRetain: 5 });
    cleanups.push(() => c.close());
    const leader = await c.waitLeader();
    for (let i = 0; i < 200; i++) await leader.append([text(`r${i}-${'z'.repeat(500)}`)]);
    await until(() => c.ids.every((id) => c.logs.get(id)?.last === 200n), { timeoutMs: 5000, what: 'replication' });
    const below = await leader.agreeCompaction(150n);
    expect(below).toBe(150n);
    for (const id of c.ids) {
      const l = c.logs.get(id) as ReplicatedLog;
      await until(() => l.compactionLimit === 150n, { timeoutMs: 5000, what: 'the agreed cutoff everywhere' });
      await l.compactBefore(1_000n); // asks for more: stops at the agreed cutoff
      expect(l.first).toBeGreaterThan(1n);
      expect(l.first).toBeLessThanOrEqual(150n);
    }
    const members = leader.status().members;
    const dial = new Map(c.ids.map((id) => [id, `127.0.0.1:${c.ports.get(id)}`]));
    const opts = (dir: string) => ({
      id: 4,
      dir,
      join: true,
      members: [...members, { id: 4, raftAddress: '127.0.0.1:0', advertise: '127.0.0.1:9004' }],
      dial,
      listen: { host: '127.0.0.1', port: 0 },
      tickMs: TICK_MS,
      timeoutMs: 2000,
      localFsync: 'never' as const,
      segmentBytes: 64 * 1024,
      logger: quiet,
    });
    const dir = mkdtempSync(join(tmpdir(), 'plexus-ha-compact-join-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const fresh = await openClusterLog(opts(dir));
    cleanups.push(() => fresh.close());
    await leader.addMember(
      { id: 4, raftAddress: `127.0.0.1:${fresh.raftPort}`, advertise: '127.0.0.1:9004' },
      { voter: false },
    );
    await until(() => fresh.status().failure !== undefined, { timeoutMs: 10_000, what: 'the refusal' });
    expect(fresh.status().failure).toMatch(/compacted away.*copy log\//);
    expect(fresh.last).toBe(0n);
    await fresh.close();
    await leader.removeMember(4);

    // Seeded: the local log of a stopped member, an empty raft/ directory.
    const source = c.ids.find((id) => c.logs.get(id) !== leader) as number;
    await c.stop(source);
    const seeded = mkdtempSync(join(tmpdir(), 'plexus-ha-compact-seed-'));
    cleanups.push(() => rmSync(seeded, { recursive: true, force: true }));
    cpSync(join(c.dirs.get(source) as string, 'log'), join(seeded, 'log'), { recursive: true });
    await c.restart(source);
    const joined = await openClusterLog({
      ...opts(seeded),
      id: 5,
      members: [...members, { id: 5, raftAddress: '127.0.0.1:0', advertise: '127.0.0.1:9005' }],
    });
    cleanups.push(() => joined.close());
    const now = await c.waitLeader();
    await now.addMember({ id: 5, raftAddress: `127.0.0.1:${joined.raftPort}`, advertise: '127.0.0.1:9005' });
    await now.append([text('after seeding')]);
    await until(() => joined.last === now.last, { timeoutMs: 10_000, what: 'the seeded member' });
    expect(joined.status().failure).toBeUndefined();
    const from = async (l: ReplicatedLog) =>
      (await l.read(joined.first, { maxCount: 1000 })).map((r) => `${r.position}|${Buffer.from(r.payload).toString()}`);
    const a = await from(joined);
    const b = await from(now);
    expect(a.length).toBeGreaterThan(50);
    expect(a).toEqual(b);
    expect(a[a.length - 1]).toMatch(/after seeding$/);
  });
});

// A refusal on a follower stays: only the leader takes compact().
describe('compaction refusals', () => {
  it('a follower refuses compact() with NOT_LEADER and names the leader', async () => {
    const c = await storeCluster();
    const f = [...c.stores.values()].find((s) => s !== c.leader()) as EventStore;
    let err: unknown;
    try {
      await f.compact();
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_CHRONACTA_HA_NOT_LEADER')).toBe(true);
  });
});
