/**
 * The seed's partition matrix on the replicated log: three members in this process, on real
 * sockets and real files, every link through a fault-injecting proxy. This is the fast
 * stand-in; the same matrix against three real `plexus chronacta serve --cluster` processes,
 * all five tests including TestLeaderKillCommittedEventsSurvive, is
 * partitions-processes.test.ts (and processes.test.ts kills a replicated-log member process).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { ReplicatedLog } from '../../ts/chronacta/cluster-log.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { until } from '../helpers/until.js';
import { advertise, type Cluster, pace, snapshot, startCluster, TICK_MS, text } from './helpers.js';

let cluster: Cluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

function idOf(c: Cluster, log: ReplicatedLog): number {
  return [...c.logs].find(([, l]) => l === log)?.[0] as number;
}

async function converged(c: Cluster, ids = c.ids): Promise<string[]> {
  const leader = await c.waitLeader(ids);
  await until(() => ids.every((id) => c.logs.get(id)?.last === leader.last), {
    timeoutMs: 10_000,
    what: 'every member to apply the same log',
  });
  const snaps = await Promise.all(ids.map((id) => snapshot(c.logs.get(id) as ReplicatedLog)));
  for (const s of snaps) expect(s).toEqual(snaps[0]);
  return snaps[0] as string[];
}

describe('replicated log: partitions (seed matrix)', () => {
  it('TestFollowerRejectsAppend', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    const lid = idOf(c, leader);
    await leader.append([text('one')]);
    const followers = c.ids.filter((id) => id !== lid);
    for (const f of followers) {
      const log = c.logs.get(f) as ReplicatedLog;
      await until(() => log.status().leader === lid, { timeoutMs: 5000, what: 'the follower to know the leader' });
      const err = await log.append([text('refused')]).catch((e: unknown) => e);
      expect(isPlexusError(err, 'PLX_CHRONACTA_HA_NOT_LEADER')).toBe(true);
      expect((err as { details: Record<string, unknown> }).details.leader).toBe(lid);
      expect((err as { details: Record<string, unknown> }).details.leaderAddress).toBe(advertise(lid));
    }
    const all = await converged(c);
    expect(all.map((r) => r.split('|')[3])).toEqual(['one']);
  });

  it('TestThreeNodeQuorumBlocksWhenOnlyLeader', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    const lid = idOf(c, leader);
    await leader.append([text('before')]);
    c.mesh.isolate(lid - 1);
    // The leader alone cannot commit: the append fails (timeout, lost, or it stepped down) and is never acknowledged.
    const err = await leader.append([text('alone')]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(
      ['PLX_RAFT_TIMEOUT', 'PLX_RAFT_PROPOSAL_LOST', 'PLX_CHRONACTA_HA_NOT_LEADER'].includes(
        (err as { code: string }).code,
      ),
    ).toBe(true);
    // Check-quorum: it steps down and refuses further writes.
    await until(() => leader.status().role !== 'leader', { timeoutMs: 5000, what: 'the lone leader to step down' });
    const again = await leader.append([text('alone2')]).catch((e: unknown) => e);
    expect(isPlexusError(again, 'PLX_CHRONACTA_HA_NOT_LEADER')).toBe(true);
    expect(leader.last).toBe(1n);
    const rest = c.ids.filter((id) => id !== lid);
    const second = await c.waitLeader(rest);
    await second.append([text('after')]);
    c.mesh.heal();
    const all = await converged(c);
    expect(all.map((r) => r.split('|')[3])).toEqual(['before', 'after']);
  });

  it('TestIsolatedFollowerDoesNotSelfElect', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    const lid = idOf(c, leader);
    const fid = c.ids.find((id) => id !== lid) as number;
    const follower = c.logs.get(fid) as ReplicatedLog;
    await leader.append([text('a')]);
    const term = leader.status().term;
    c.mesh.isolate(fid - 1);
    // Several election timeouts (200..400 ms each: electionTick 10 x 20 ms).
    const roles = new Set<string>();
    const end = Date.now() + 100 * TICK_MS;
    while (Date.now() < end) {
      roles.add(follower.status().role);
      // The sampling period: the window (100 ticks under isolation) is the scenario.
      await pace(20);
    }
    await leader.append([text('b')]);
    expect(roles.has('leader')).toBe(false);
    expect(roles.has('candidate')).toBe(false);
    expect(follower.status().term).toBe(term); // pre-vote: no term inflation
    c.mesh.heal();
    await until(() => follower.last === 2n, { timeoutMs: 10_000, what: 'the follower to catch up' });
    // The healed follower did not disrupt the leader.
    expect(leader.status().role).toBe('leader');
    expect(leader.status().term).toBe(term);
    const all = await converged(c);
    expect(all.map((r) => r.split('|')[3])).toEqual(['a', 'b']);
  });

  it('TestThreeNodeMajorityFailover', async () => {
    const c = (cluster = await startCluster());
    const first = await c.waitLeader();
    const lid = idOf(c, first);
    const acked: string[] = [];
    for (let i = 0; i < 5; i++) {
      await first.append([text(`a${i}`), text(`a${i}'`)]);
      acked.push(`a${i}`, `a${i}'`);
    }
    c.mesh.isolate(lid - 1);
    const rest = c.ids.filter((id) => id !== lid);
    const second = await c.waitLeader(rest);
    expect(second.status().term).toBeGreaterThan(first.status().term);
    // The new leader applied everything committed before it accepts writes.
    expect(second.last).toBe(10n);
    for (let i = 0; i < 5; i++) {
      const r = await second.append([text(`b${i}`)]);
      expect(r.first).toBe(BigInt(11 + i));
      acked.push(`b${i}`);
    }
    await until(() => first.status().role !== 'leader', { timeoutMs: 5000, what: 'the isolated leader to step down' });
    c.mesh.heal();
    const all = await converged(c);
    expect(all.map((r) => r.split('|')[3])).toEqual(acked);
    // Epochs: records of the second leader carry its (higher) term.
    expect(Number(all[10]?.split('|')[2])).toBe(second.status().term);
  });
});
