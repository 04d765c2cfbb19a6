/**
 * The seed's partition matrix (docs/raft.md), checked on the Raft core with pre-vote and
 * check-quorum on, driven by ticks. The same names are used by the Chronacta cluster tests.
 */
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { bytes, TestCluster } from './harness.js';

function cluster(): TestCluster {
  const c = new TestCluster(3, { preVote: true, checkQuorum: true }, 11);
  c.trace = false;
  return c;
}

/** Ticks every live node `n` times, letting messages flow after each tick. */
function run(c: TestCluster, n: number): void {
  for (let i = 0; i < n; i++) {
    for (const t of c.nodes.values()) t.node?.tick();
    c.stabilize();
  }
}

function leaderAfterElection(c: TestCluster): number {
  run(c, 40);
  const l = c.leader();
  expect(l).toBeGreaterThan(0);
  return l;
}

describe('partition matrix (raft core)', () => {
  it('TestFollowerRejectsAppend', () => {
    const c = cluster();
    const leader = leaderAfterElection(c);
    const follower = [1, 2, 3].find((id) => id !== leader)!;
    try {
      c.get(follower).propose(bytes('write'));
      expect.unreachable();
    } catch (e) {
      expect(isPlexusError(e, 'PLX_RAFT_NOT_LEADER')).toBe(true);
      expect((e as { details: { leader: number } }).details.leader).toBe(leader);
    }
  });

  it('TestThreeNodeQuorumBlocksWhenOnlyLeader', () => {
    const c = cluster();
    const leader = leaderAfterElection(c);
    c.isolate(leader);
    const p = c.get(leader).propose(bytes('unacknowledged'));
    run(c, 5);
    expect(c.get(leader).status().commit).toBeLessThan(p.index);
    run(c, 40);
    // Never committed on the old leader, which stepped down (check-quorum); the entry is gone
    // from every other node's committed log.
    expect(c.appliedText(leader)).not.toContain('unacknowledged');
    for (const id of [1, 2, 3].filter((x) => x !== leader)) expect(c.appliedText(id)).not.toContain('unacknowledged');
  });

  it('TestIsolatedFollowerDoesNotSelfElect', () => {
    const c = cluster();
    const leader = leaderAfterElection(c);
    const follower = [1, 2, 3].find((id) => id !== leader)!;
    const term = c.get(leader).status().term;
    c.isolate(follower);
    run(c, 200);
    expect(c.get(follower).status().role).not.toBe('leader');
    expect(c.get(follower).status().term).toBe(term); // pre-vote never raised it
    c.heal();
    run(c, 40);
    expect(c.leader()).toBe(leader); // the rejoining node did not disrupt the leader
    expect(c.get(leader).status().term).toBe(term);
  });

  it('TestThreeNodeMajorityFailover', () => {
    const c = cluster();
    const old = leaderAfterElection(c);
    c.isolate(old);
    run(c, 60);
    const now = [1, 2, 3].filter((id) => id !== old).find((id) => c.get(id).status().role === 'leader');
    expect(now).toBeDefined();
    const p = c.get(now!).propose(bytes('after-failover'));
    run(c, 3);
    expect(c.get(now!).status().commit).toBeGreaterThanOrEqual(p.index);
    expect(c.get(old).status().role).not.toBe('leader'); // check-quorum deposed it
    expect(c.get(old).status().term).toBeLessThan(c.get(now!).status().term);
  });

  it('TestLeaderKillCommittedEventsSurvive', () => {
    const c = cluster();
    const old = leaderAfterElection(c);
    for (const v of ['e1', 'e2', 'e3']) c.get(old).propose(bytes(v));
    run(c, 2);
    expect(c.appliedText(old)).toEqual(['e1', 'e2', 'e3']);
    c.crash(old);
    run(c, 60);
    const now = [1, 2, 3].find((id) => id !== old && c.get(id).status().role === 'leader');
    expect(now).toBeDefined();
    c.get(now!).propose(bytes('e4'));
    run(c, 3);
    expect(c.appliedText(now!)).toEqual(['e1', 'e2', 'e3', 'e4']);
    c.restart(old);
    run(c, 20);
    expect(c.appliedText(old)).toEqual(['e1', 'e2', 'e3', 'e4']);
  });
});
