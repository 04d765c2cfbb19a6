/**
 * Three EventStores in cluster mode in this process: real files, real Raft over TCP on
 * loopback. The leader's appends are acknowledged once committed and applied; followers
 * apply the same records through onApply and refuse writes with NOT_LEADER.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { HaMember } from '../../ts/chronacta/cluster-config.js';
import { EventStore } from '../../ts/chronacta/store.js';
import type { RecordedEvent } from '../../ts/chronacta/types.js';
import { freePort } from '../helpers/ports.js';
import { until } from '../helpers/until.js';

const quiet = { warn: () => undefined, error: () => undefined };

const ev = (n: number) => ({ type: 'T', data: new TextEncoder().encode(`e${n}`) });

interface Cluster {
  root: string;
  members: HaMember[];
  stores: Map<number, EventStore>;
  open(id: number): Promise<EventStore>;
  leader(): EventStore | undefined;
  close(): Promise<void>;
}

async function startCluster(n = 3): Promise<Cluster> {
  const root = mkdtempSync(join(tmpdir(), 'plexus-chronacta-cluster-'));
  const members: HaMember[] = [];
  for (let id = 1; id <= n; id++) {
    members.push({ id, raftAddress: `127.0.0.1:${await freePort()}`, advertise: `127.0.0.1:${7000 + id}` });
  }
  const stores = new Map<number, EventStore>();
  const open = async (id: number) => {
    const s = await EventStore.open({
      dataDir: join(root, `m${id}`),
      fsync: 'never',
      logger: quiet,
      replication: { id, members, tickMs: 20, timeoutMs: 2000, localFsync: 'never', logger: quiet },
    });
    stores.set(id, s);
    return s;
  };
  await Promise.all(members.map((m) => open(m.id)));
  const leader = () => {
    const ls = [...stores.values()].filter((s) => s.clusterStatus()?.acceptingWrites);
    return ls.length === 1 ? ls[0] : undefined;
  };
  return {
    root,
    members,
    stores,
    open,
    leader,
    async close() {
      for (const s of stores.values()) await s.close().catch(() => undefined);
      rmSync(root, { recursive: true, force: true });
    },
  };
}

let cluster: Cluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

describe('EventStore in cluster mode', () => {
  it('replicates acknowledged appends to every member at the same positions; followers refuse writes', async () => {
    const c = await startCluster(3);
    cluster = c;
    await until(() => c.leader() !== undefined, { timeoutMs: 10_000, what: 'a leader' });
    const leader = c.leader() as EventStore;
    const followers = [...c.stores.values()].filter((s) => s !== leader);
    const seen: RecordedEvent[] = [];
    (followers[0] as EventStore).onCommit((e) => seen.push(e));
    const acks = [];
    for (let i = 0; i < 20; i++) {
      acks.push(leader.append(`s-${i % 3}`, [ev(i), ev(i + 100)], { idempotencyKey: `k${i}` }));
    }
    const results = await Promise.all(acks);
    expect(results.map((r) => r.lastPosition)).toEqual(Array.from({ length: 20 }, (_, i) => BigInt(2 * i + 2)));
    // The leader applied each batch once: 40 positions, no more.
    expect(leader.lastPosition).toBe(40n);
    const want = await leader.readAll({ maxCount: 100 });
    expect(want.events.length).toBe(40);
    for (const f of followers) {
      await until(() => f.lastPosition === 40n, { timeoutMs: 5000, what: 'a follower catching up' });
      const got = await f.readAll({ maxCount: 100 });
      expect(got.events.map((e) => [e.position, e.stream, e.version, e.id])).toEqual(
        want.events.map((e) => [e.position, e.stream, e.version, e.id]),
      );
      expect(f.streamInfo('s-0').lastVersion).toBe(leader.streamInfo('s-0').lastVersion);
      await expect(f.append('s-0', [ev(1)])).rejects.toMatchObject({
        code: 'PLX_CHRONACTA_HA_NOT_LEADER',
        details: { leaderAddress: expect.stringMatching(/^127\.0\.0\.1:700\d$/) },
      });
      await expect(f.deleteStream('s-1')).rejects.toMatchObject({ code: 'PLX_CHRONACTA_HA_NOT_LEADER' });
      expect(() => f.compact()).toThrow(expect.objectContaining({ code: 'PLX_CHRONACTA_HA_NOT_LEADER' }));
    }
    await until(() => seen.length === 40, { timeoutMs: 5000, what: 'follower subscription' });
    expect(seen.map((e) => e.position)).toEqual(Array.from({ length: 40 }, (_, i) => BigInt(i + 1)));
    // An idempotent retry on the leader is a duplicate, and a wrong expected version is refused.
    const again = await leader.append('s-0', [ev(0), ev(100)], { idempotencyKey: 'k0' });
    expect(again.duplicate).toBe(true);
    await expect(leader.append('s-0', [ev(1)], { expectedVersion: 0n })).rejects.toMatchObject({
      code: 'PLX_CHRONACTA_WRONG_EXPECTED_VERSION',
    });
  }, 30_000);

  it('a new leader takes appends after the old one closes; no acknowledged event is lost; restart catches up', async () => {
    const c = await startCluster(3);
    cluster = c;
    await until(() => c.leader() !== undefined, { timeoutMs: 10_000, what: 'a leader' });
    const old = c.leader() as EventStore;
    const oldId = old.clusterStatus()?.id as number;
    for (let i = 0; i < 10; i++) await old.append('a', [ev(i)]);
    await old.close();
    c.stores.delete(oldId);
    const t0 = performance.now();
    await until(() => c.leader() !== undefined, { timeoutMs: 10_000, what: 'a new leader' });
    const next = c.leader() as EventStore;
    const r = await next.append('a', [ev(10)], { expectedVersion: 9n });
    console.log(`in-process failover (close to first acknowledged append): ${(performance.now() - t0).toFixed(0)} ms`);
    expect(r.firstPosition).toBe(11n);
    const back = await c.open(oldId);
    await until(() => back.lastPosition === 11n, { timeoutMs: 10_000, what: 'the old leader catching up' });
    const got = await back.readStream('a', { maxCount: 100 });
    expect(got.events.map((e) => e.version)).toEqual(Array.from({ length: 11 }, (_, i) => BigInt(i)));
  }, 30_000);
});
