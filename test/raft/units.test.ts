/**
 * The pieces of the core: quorum arithmetic against a brute-force reference, the flow-control
 * window, the conf-change codec, and the RaftNode API's refusals.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeConfChange, encodeConfChange } from '../../ts/codec/raft-confchange.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { applyToConfState } from '../../ts/raft/confchange.js';
import { RaftNode } from '../../ts/raft/node.js';
import { Inflights, Progress } from '../../ts/raft/progress.js';
import { majorityCommitted, voteResult } from '../../ts/raft/quorum.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import { SimRandom } from '../../ts/sim/rng.js';

function code(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (isPlexusError(e)) return e.code;
    throw e;
  }
  return 'none';
}

/** Brute force: the largest index i such that more than half of the voters have match >= i. */
function committedReference(matches: number[]): number {
  let best = 0;
  for (const candidate of [0, ...matches]) {
    const n = matches.filter((m) => m >= candidate).length;
    if (n * 2 > matches.length && candidate > best) best = candidate;
  }
  return best;
}

describe('quorum', () => {
  it('majorityCommitted equals the brute-force reference', () => {
    fc.assert(
      fc.property(fc.array(fc.nat(50), { minLength: 1, maxLength: 9 }), (matches) => {
        const voters = new Set(matches.map((_, i) => i + 1));
        expect(majorityCommitted(voters, (id) => matches[id - 1]!)).toBe(committedReference(matches));
      }),
    );
  });

  it('voteResult: won with a majority, lost when a majority is out of reach, pending otherwise', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(true, false, undefined), { minLength: 1, maxLength: 9 }), (votes) => {
        const voters = new Set(votes.map((_, i) => i + 1));
        const m = new Map<number, boolean>();
        for (const [i, v] of votes.entries()) if (v !== undefined) m.set(i + 1, v);
        const yes = votes.filter((v) => v === true).length;
        const no = votes.filter((v) => v === false).length;
        const q = Math.floor(votes.length / 2) + 1;
        const want = yes >= q ? 'won' : votes.length - no < q ? 'lost' : 'pending';
        expect(voteResult(voters, m)).toBe(want);
      }),
    );
  });
});

describe('flow control', () => {
  it('Inflights holds at most `size` batches and frees them by index', () => {
    const w = new Inflights(3);
    w.add(5);
    w.add(7);
    w.add(9);
    expect(w.full()).toBe(true);
    w.freeLE(7);
    expect(w.count).toBe(1);
    expect(w.full()).toBe(false);
  });

  it('Progress: probe sends one MsgApp at a time, replicate pipelines up to maxInflight', () => {
    const p = new Progress(6, 2, false);
    expect(p.isPaused()).toBe(false);
    p.sentEntries(1, 6);
    expect(p.isPaused()).toBe(true); // probe: wait for an answer
    p.maybeUpdate(6);
    p.becomeReplicate();
    expect(p.next).toBe(7);
    p.sentEntries(1, 7);
    p.sentEntries(1, 8);
    expect(p.isPaused()).toBe(true); // two batches in flight
    p.inflights.freeLE(7);
    expect(p.isPaused()).toBe(false);
    // A rejection in replicate goes back to probing from match + 1.
    expect(p.maybeDecrTo(8, 6)).toBe(true);
    expect(p.next).toBe(7);
    // A stale rejection (at or below match) is ignored.
    expect(p.maybeDecrTo(5, 0)).toBe(false);
  });
});

describe('conf changes', () => {
  it('round-trip and refuse damaged bytes', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('add-voter', 'add-learner', 'remove-node' as const),
        fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
        (type, nodeId) => {
          expect(decodeConfChange(encodeConfChange({ type, nodeId }))).toEqual({ type, nodeId });
        },
      ),
    );
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 20 }), (bytes) => {
        try {
          const cc = decodeConfChange(bytes);
          // Version 2 (10 bytes after the 0x82 marker) or the older 9-byte form (test/codec/raft-confchange.test.ts).
          expect(bytes.length).toBe(bytes[0] === 0x82 ? 10 : 9);
          expect(cc.nodeId).toBeGreaterThan(0);
        } catch (e) {
          expect(isPlexusError(e, 'PLX_RAFT_BAD_CONF_CHANGE')).toBe(true);
        }
      }),
    );
  });

  it('one node at a time; removing the last voter is refused', () => {
    const cs = applyToConfState({ voters: [1, 2], learners: [] }, { type: 'add-learner', nodeId: 3 });
    expect(cs).toEqual({ voters: [1, 2], learners: [3] });
    expect(applyToConfState(cs, { type: 'add-voter', nodeId: 3 })).toEqual({ voters: [1, 2, 3], learners: [] });
    expect(code(() => applyToConfState({ voters: [1], learners: [] }, { type: 'remove-node', nodeId: 1 }))).toBe(
      'PLX_RAFT_BAD_CONF_CHANGE',
    );
  });
});

describe('RaftNode API refusals', () => {
  const rng = new SimRandom(1);
  const mk = (over: Record<string, unknown> = {}) =>
    new RaftNode({
      id: 1,
      storage: MemoryRaftStorage.bootstrap({ voters: [1], learners: [] }),
      random: (n) => rng.int(n),
      ...over,
    });

  it('bad options', () => {
    expect(code(() => mk({ id: 0 }))).toBe('PLX_RAFT_BAD_CONFIG');
    expect(code(() => mk({ electionTick: 1, heartbeatTick: 1 }))).toBe('PLX_RAFT_BAD_CONFIG');
    expect(code(() => mk({ maxInflight: 0 }))).toBe('PLX_RAFT_BAD_CONFIG');
  });

  it('ready/advance order and messages that cannot come from a peer', () => {
    const n = mk();
    expect(code(() => n.advance())).toBe('PLX_RAFT_READY_ORDER');
    n.campaign();
    n.ready();
    expect(code(() => n.ready())).toBe('PLX_RAFT_READY_ORDER');
    n.advance();
    const base = {
      from: 2,
      to: 1,
      term: 1,
      logTerm: 0,
      index: 0,
      entries: [],
      commit: 0,
      reject: false,
      rejectHint: 0,
    };
    expect(code(() => n.step({ ...base, type: 'MsgHup' }))).toBe('PLX_RAFT_BAD_MESSAGE');
    expect(code(() => n.step({ ...base, type: 'MsgApp', to: 9 }))).toBe('PLX_RAFT_BAD_MESSAGE');
  });

  it('a single voter elects itself, commits alone and answers reads at once', () => {
    const n = mk();
    n.campaign();
    const p = n.propose(new TextEncoder().encode('solo'));
    n.readIndex(new TextEncoder().encode('r'));
    const rd = n.ready();
    expect(rd.committedEntries.map((e) => e.index)).toContain(p.index);
    expect(rd.readStates.length).toBe(1);
    n.advance();
    expect(code(() => n.compact(99, new Uint8Array()))).toBe('PLX_RAFT_SNAPSHOT_OUT_OF_DATE');
  });
});
