/**
 * Rules of the Raft paper (Ongaro & Ousterhout, "In Search of an Understandable Consensus
 * Algorithm", extended version), each test quoting the sentence it checks.
 */
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { RaftNode } from '../../ts/raft/node.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import type { Entry, Message } from '../../ts/raft/types.js';
import { SimRandom } from '../../ts/sim/rng.js';
import { bytes, type NodeOptions, TestCluster } from './harness.js';

function cluster(n: number, opts: NodeOptions = {}): TestCluster {
  const c = new TestCluster(n, opts);
  c.trace = false;
  return c;
}

function elect(c: TestCluster, id: number): void {
  c.get(id).campaign();
  c.stabilize();
  expect(c.get(id).status().role).toBe('leader');
}

function msg(fields: Partial<Message> & Pick<Message, 'type' | 'from' | 'to' | 'term'>): Message {
  return { logTerm: 0, index: 0, entries: [], commit: 0, reject: false, rejectHint: 0, ...fields };
}

function ent(index: number, term: number, text = ''): Entry {
  return { index, term, type: 'normal', data: bytes(text) };
}

/** A lone node (not bootstrapped with peers) whose storage holds `terms` at indexes 2.. after the snapshot at 1/1. */
function follower(terms: number[], term: number, commit = 1): { node: RaftNode; storage: MemoryRaftStorage } {
  const storage = MemoryRaftStorage.bootstrap({ voters: [1, 2, 3], learners: [] });
  storage.append(terms.map((t, i) => ent(i + 2, t, `e${i + 2}`)));
  storage.setHardState({ term, vote: 0, commit });
  const rng = new SimRandom(7);
  return { node: new RaftNode({ id: 2, storage, random: (k) => rng.int(k) }), storage };
}

function drain(n: RaftNode): Message[] {
  const out: Message[] = [];
  while (n.hasReady()) {
    const rd = n.ready();
    out.push(...rd.messages);
    n.advance();
  }
  return out;
}

describe('Raft paper §5.1: terms', () => {
  it('"If a server receives a request with a stale term number, it rejects the request."', () => {
    const { node } = follower([2], 3);
    node.step(msg({ type: 'MsgApp', from: 1, to: 2, term: 2, index: 2, logTerm: 2, entries: [ent(3, 2, 'stale')] }));
    drain(node);
    expect(node.status().lastIndex).toBe(2);
    expect(node.status().term).toBe(3);
  });

  it('"If a candidate or leader discovers that its term is out of date, it immediately reverts to follower state."', () => {
    const c = cluster(3);
    elect(c, 1);
    c.get(1).step(msg({ type: 'MsgHeartbeat', from: 2, to: 1, term: 5 }));
    expect(c.get(1).status()).toMatchObject({ role: 'follower', term: 5, lead: 2 });
    const cand = cluster(3);
    cand.get(2).campaign();
    cand.processReady(2);
    cand.get(2).step(msg({ type: 'MsgApp', from: 3, to: 2, term: 9, index: 1, logTerm: 1 }));
    expect(cand.get(2).status()).toMatchObject({ role: 'follower', term: 9, lead: 3 });
  });
});

describe('Raft paper §5.2: leader election', () => {
  it('"Each server will vote for at most one candidate in a given term, on a first-come-first-served basis"', () => {
    const { node } = follower([], 1);
    node.step(msg({ type: 'MsgVote', from: 1, to: 2, term: 2, index: 1, logTerm: 1 }));
    node.step(msg({ type: 'MsgVote', from: 3, to: 2, term: 2, index: 1, logTerm: 1 }));
    const resp = drain(node).filter((m) => m.type === 'MsgVoteResp');
    expect(resp.map((m) => [m.to, m.reject])).toEqual([
      [1, false],
      [3, true],
    ]);
    expect(node.status().vote).toBe(1);
  });

  it('"A candidate wins an election if it receives votes from a majority of the servers in the full cluster for the same term."', () => {
    const c = cluster(5);
    c.get(1).campaign();
    c.processReady(1);
    // Only node 2 answers: 2 of 5 votes is no majority.
    c.queue = c.queue.filter((m) => m.to === 2);
    c.deliver();
    c.processReady(2);
    c.deliver(1);
    expect(c.get(1).status().role).toBe('candidate');
    // A third vote (node 3) makes a majority of five.
    c.get(3).step(msg({ type: 'MsgVote', from: 1, to: 3, term: 2, index: 1, logTerm: 1 }));
    c.processReady(3);
    c.deliver(1);
    expect(c.get(1).status().role).toBe('leader');
  });

  it('"Raft uses randomized election timeouts to ensure that split votes are rare and that they are resolved quickly."', () => {
    // Each node campaigns after a timeout drawn from [electionTick, 2 * electionTick).
    const seen = new Set<number>();
    for (let seed = 1; seed <= 40; seed++) {
      const storage = MemoryRaftStorage.bootstrap({ voters: [1, 2, 3], learners: [] });
      const rng = new SimRandom(seed);
      const n = new RaftNode({ id: 1, storage, random: (k) => rng.int(k), electionTick: 10 });
      let ticks = 0;
      while (n.status().role === 'follower') {
        n.tick();
        ticks++;
      }
      expect(ticks).toBeGreaterThanOrEqual(10);
      expect(ticks).toBeLessThan(20);
      seen.add(ticks);
    }
    expect(seen.size).toBeGreaterThan(3);
  });
});

describe('Raft paper §5.3: log replication', () => {
  it('"Reply false if log doesn\'t contain an entry at prevLogIndex whose term matches prevLogTerm (§5.3)"', () => {
    const { node } = follower([2, 2], 3);
    node.step(msg({ type: 'MsgApp', from: 1, to: 2, term: 3, index: 3, logTerm: 3, entries: [ent(4, 3)] }));
    const [resp] = drain(node).filter((m) => m.type === 'MsgAppResp');
    expect(resp).toMatchObject({ reject: true, index: 3 });
    expect(node.status().lastIndex).toBe(3);
  });

  it('"If an existing entry conflicts with a new one (same index but different terms), delete the existing entry and all that follow it (§5.3)"', () => {
    const { node, storage } = follower([2, 2, 2], 3);
    node.step(msg({ type: 'MsgApp', from: 1, to: 2, term: 3, index: 2, logTerm: 2, entries: [ent(3, 3, 'new')] }));
    const rd = node.ready();
    storage.append(rd.entries);
    node.advance();
    expect(storage.lastIndex()).toBe(3);
    expect(storage.term(3)).toBe(3);
  });

  it('"If leaderCommit > commitIndex, set commitIndex = min(leaderCommit, index of last new entry)"', () => {
    const { node } = follower([2], 2);
    node.step(msg({ type: 'MsgApp', from: 1, to: 2, term: 2, index: 2, logTerm: 2, entries: [ent(3, 2)], commit: 9 }));
    expect(node.status().commit).toBe(3);
  });

  it('"Log Matching: if two logs contain an entry with the same index and term, then the logs are identical in all entries up through the given index."', () => {
    const c = cluster(3);
    elect(c, 1);
    for (const v of ['a', 'b', 'c']) c.get(1).propose(bytes(v));
    c.stabilize();
    const logs = [1, 2, 3].map((id) => {
      const s = c.nodes.get(id)!.storage;
      return s.entries(s.firstIndex(), s.lastIndex() + 1).map((e) => `${e.term}/${e.index}`);
    });
    expect(logs[1]).toEqual(logs[0]);
    expect(logs[2]).toEqual(logs[0]);
  });

  it('"A log entry is committed once the leader that created the entry has replicated it on a majority of the servers"', () => {
    const c = cluster(5);
    elect(c, 1);
    c.cutLink(1, 4);
    c.cutLink(1, 5);
    const p = c.get(1).propose(bytes('m'));
    c.cutLink(1, 3);
    c.stabilize();
    expect(c.get(1).status().commit).toBe(p.index - 1); // leader + node 2: two of five
    c.heal();
    c.cutLink(1, 4);
    c.cutLink(1, 5);
    c.tick(1);
    c.stabilize();
    expect(c.get(1).status().commit).toBe(p.index); // leader + nodes 2 and 3: three of five
  });

  it('"Leader Append-Only: a leader never overwrites or deletes entries in its log; it only appends new entries."', () => {
    const c = cluster(3);
    elect(c, 1);
    c.get(1).propose(bytes('x'));
    c.stabilize();
    const before = c.nodes.get(1)!.storage.lastIndex();
    // A MsgApp from a stale leader claiming a different entry is ignored by the leader.
    c.get(1).step(msg({ type: 'MsgApp', from: 2, to: 1, term: 1, index: 1, logTerm: 1, entries: [ent(2, 1, 'y')] }));
    c.stabilize();
    const s = c.nodes.get(1)!.storage;
    expect(s.lastIndex()).toBe(before);
    expect(s.term(2)).toBe(2);
  });
});

describe('Raft paper §5.4: safety', () => {
  it('"the voter denies its vote if its own log is more up-to-date than that of the candidate."', () => {
    const { node } = follower([2, 3], 3);
    // Candidate's last entry 2/5: lower last term than ours (3) despite a longer log.
    node.step(msg({ type: 'MsgVote', from: 1, to: 2, term: 4, index: 5, logTerm: 2 }));
    // Candidate's last entry 3/2: same last term, shorter log.
    node.step(msg({ type: 'MsgVote', from: 3, to: 2, term: 5, index: 2, logTerm: 3 }));
    expect(drain(node).map((m) => m.reject)).toEqual([true, true]);
    const { node: n2 } = follower([2, 3], 3);
    n2.step(msg({ type: 'MsgVote', from: 1, to: 2, term: 4, index: 3, logTerm: 3 }));
    expect(drain(n2).map((m) => m.reject)).toEqual([false]);
  });

  /**
   * Figure 8: S1 leads term 2 and gets an entry onto S2 only; S5 leads term 3 with an entry of
   * its own; S1 leads term 4 and gets its term-2 entry onto S3 and S4 (a majority), one entry per
   * MsgApp. S5 could still be elected and overwrite it, so S1 must not count it as committed:
   * its commit index jumps straight to its term-4 entry. Returns S1's commit index after each
   * round of message delivery in term 4.
   */
  function figure8(unsafe: boolean): { commits: number[]; index: number } {
    const opts: NodeOptions = { maxSizePerMsg: 1 };
    const c = cluster(5, unsafe ? { ...opts, unsafe: { commitPreviousTermByCounting: true } } : opts);
    elect(c, 1);
    for (const other of [3, 4, 5]) c.cutLink(1, other);
    const p = c.get(1).propose(bytes('xx'));
    c.stabilize(); // the entry reaches S2 only
    c.crash(1);
    c.heal();
    c.cutLink(5, 2);
    c.get(5).campaign(); // term 3, votes of S3 and S4
    c.processReady(5);
    c.deliver();
    for (const id of [3, 4]) c.processReady(id);
    c.deliver(5);
    expect(c.get(5).status().role).toBe('leader');
    for (const other of [2, 3, 4]) c.cutLink(5, other); // its entries of term 3 stay on S5
    c.get(5).propose(bytes('yy'));
    c.stabilize();
    c.crash(5);
    c.heal();
    c.restart(1);
    c.cutLink(1, 2);
    // Term 3: S3 and S4 already voted for S5, so S1 loses; term 4: S1 wins with S3 and S4.
    for (let round = 0; round < 3 && c.get(1).status().role !== 'leader'; round++) {
      c.get(1).campaign();
      c.processReady(1);
      c.deliver();
      for (const id of [3, 4]) c.processReady(id);
      c.deliver(1);
      c.processReady(1);
    }
    expect(c.get(1).status()).toMatchObject({ role: 'leader', term: 4 });
    const commits: number[] = [];
    for (let round = 0; round < 10; round++) {
      for (const id of [1, 2, 3, 4]) c.processReady(id);
      c.deliver();
      commits.push(c.get(1).status().commit);
    }
    expect(c.nodes.get(3)!.storage.term(p.index)).toBe(2);
    return { commits, index: p.index };
  }

  it('"Raft never commits log entries from previous terms by counting replicas."', () => {
    const safe = figure8(false);
    expect(safe.commits).not.toContain(safe.index);
    expect(Math.max(...safe.commits)).toBe(safe.index + 1); // the term-4 entry, and everything before it
    // The deliberately broken variant commits the term-2 entry on its own: the bug the rule prevents.
    const broken = figure8(true);
    expect(broken.commits).toContain(broken.index);
  });
});

describe('Raft paper §7 and §8', () => {
  it('"The leader uses a new RPC called InstallSnapshot to send snapshots to followers that are too far behind"', () => {
    const c = cluster(3);
    elect(c, 1);
    c.crash(3);
    for (const v of ['a', 'b', 'c']) c.get(1).propose(bytes(v));
    c.stabilize();
    const applied = c.get(1).status().applied;
    c.nodes.get(1)!.storage.compact(c.get(1).compact(applied, bytes('state')));
    c.restart(3);
    c.tick(1);
    c.trace = true;
    c.stabilize();
    const out = c.takeOutput();
    expect(out.some((l) => l.includes('send 1->3 MsgSnap'))).toBe(true);
    expect(c.nodes.get(3)!.storage.snapshot().metadata.index).toBe(applied);
    expect(c.get(3).status().commit).toBe(applied);
  });

  it('"a leader must check whether it has been deposed before processing a read-only request"', () => {
    const c = cluster(3);
    elect(c, 1);
    c.isolate(1);
    elect(c, 2);
    c.get(1).readIndex(bytes('stale?'));
    c.trace = true;
    c.stabilize();
    expect(c.takeOutput().some((l) => l.includes('read-state'))).toBe(false);
    c.get(2).readIndex(bytes('fresh'));
    c.stabilize();
    expect(c.takeOutput().some((l) => l.includes('read-state index=') && l.includes('ctx=fresh'))).toBe(true);
  });

  it('clients of a node that is not the leader get PLX_RAFT_NOT_LEADER with the leader id', () => {
    const c = cluster(3);
    elect(c, 2);
    try {
      c.get(3).propose(bytes('x'));
      expect.unreachable();
    } catch (e) {
      expect(isPlexusError(e, 'PLX_RAFT_NOT_LEADER')).toBe(true);
      expect((e as { details: { leader: number } }).details.leader).toBe(2);
    }
  });
});
