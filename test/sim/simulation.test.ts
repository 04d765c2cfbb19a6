/**
 * Thousands of seeded runs of 3- and 5-node Raft clusters under crashes, restarts,
 * partitions, loss, duplication and reordering; every history is checked for
 * linearizability and the invariants of ts/sim/invariants.ts. PLEXUS_SIM_SEEDS=N (or its older
 * name SIM_RUNS) runs N seeds per cluster size (default 1000); PLEXUS_SIM_FIRST_SEED (or
 * SIM_FIRST_SEED) moves the window. A failure prints the seed and
 * the command that replays it.
 */
import { describe, expect, it } from 'vitest';
import { replayHint, runSimulation } from '../../ts/sim/raft/cluster.js';

const RUNS = Number(process.env.PLEXUS_SIM_SEEDS ?? process.env.SIM_RUNS ?? 1000);
const FIRST = Number(process.env.PLEXUS_SIM_FIRST_SEED ?? process.env.SIM_FIRST_SEED ?? 1);

describe('deterministic simulation of raft', () => {
  for (const nodes of [3, 5]) {
    it(
      `${RUNS} seeded runs of ${nodes} nodes keep every invariant and stay linearizable`,
      () => {
        const failures: string[] = [];
        const total = {
          appendsOk: 0,
          readsOk: 0,
          crashes: 0,
          partitions: 0,
          snapshotsSent: 0,
          elections: 0,
          transfers: 0,
          confChanges: 0,
        };
        let undecided = 0;
        for (let seed = FIRST; seed < FIRST + RUNS; seed++) {
          const r = runSimulation({ seed, nodes });
          if (!r.ok) failures.push(replayHint(r, nodes));
          if (r.linearizability.result === 'unknown') undecided++;
          for (const k of Object.keys(total) as (keyof typeof total)[]) total[k] += r.stats[k];
        }
        expect(failures, failures.slice(0, 5).join('\n')).toEqual([]);
        // The runs did real work under real faults (not a vacuous pass).
        expect(total.appendsOk).toBeGreaterThan(RUNS * 10);
        expect(total.readsOk).toBeGreaterThan(RUNS * 3);
        expect(total.crashes).toBeGreaterThan(RUNS / 2);
        expect(total.partitions).toBeGreaterThan(RUNS / 2);
        expect(total.snapshotsSent).toBeGreaterThan(RUNS / 4);
        expect(total.transfers).toBeGreaterThan(RUNS / 10);
        if (nodes === 5) expect(total.confChanges).toBeGreaterThan(RUNS / 3); // learner added, promoted, a voter removed
        expect(undecided).toBeLessThan(Math.max(1, RUNS / 100));
      },
      Math.max(60_000, RUNS * 40),
    ); // long PLEXUS_SIM_SEEDS need more than the default timeout
  }
});
