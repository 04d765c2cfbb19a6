/**
 * The checkers find bugs: a Raft that grants votes without the log up-to-date check (§5.4.1)
 * is caught by the simulation, by the invariants and, on its own, by the linearizability
 * checker; and the failing seed replays to the same failure.
 */
import { describe, expect, it } from 'vitest';
import { runSimulation } from '../../ts/sim/raft/cluster.js';

const broken = { raft: { unsafe: { skipLogUpToDateCheck: true } } } as const;

describe('a deliberately broken raft is caught', () => {
  it('votes without the up-to-date check: some seed in the first 60 fails, and replays identically', () => {
    let failing: number | undefined;
    for (let seed = 1; seed <= 60 && failing === undefined; seed++) {
      if (!runSimulation({ seed, nodes: 3, ...broken }).ok) failing = seed;
    }
    expect(failing).toBeDefined();
    const a = runSimulation({ seed: failing!, nodes: 3, ...broken });
    const b = runSimulation({ seed: failing!, nodes: 3, ...broken });
    expect(a.ok).toBe(false);
    expect(b.violations).toEqual(a.violations);
    expect(b.fingerprint).toBe(a.fingerprint);
    expect(JSON.stringify(b.history)).toBe(JSON.stringify(a.history));
    // The same seeds with the check in place pass.
    expect(runSimulation({ seed: failing!, nodes: 3 }).ok).toBe(true);
  });

  it('the linearizability checker alone catches it: clients see a lost acknowledged append', () => {
    let found = 0;
    for (let seed = 1; seed <= 150 && found === 0; seed++) {
      const r = runSimulation({ seed, nodes: 5, stopOnViolation: false, ...broken });
      if (r.linearizability.result === 'violation') {
        found = seed;
        expect(r.linearizability.unplaced.length).toBeGreaterThan(0);
      }
    }
    expect(found).toBeGreaterThan(0);
  });
});
