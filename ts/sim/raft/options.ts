/** Options of a simulated Raft cluster run (ts/sim/raft/cluster.ts). */

import type { RaftOptions } from '../../raft/types.js';
import type { NetworkOptions } from '../network.js';

export interface SimRunOptions {
  readonly seed: number;
  /** Founding voters (ids 1..nodes). Default 3. */
  readonly nodes?: number;
  /** Virtual milliseconds the run lasts. Default 1500. */
  readonly durationMs?: number;
  /** Milliseconds per Raft tick. Default 10. */
  readonly tickMs?: number;
  readonly clients?: number;
  /** A client gives up on an operation after this long (its outcome becomes unknown). Default 300. */
  readonly opTimeoutMs?: number;
  /** Snapshot and compact after this many applied entries. Default 12. */
  readonly compactEvery?: number;
  /** Crashes, partitions, network changes, leadership transfers, membership changes. Default true. */
  readonly faults?: boolean;
  /** Add a spare node as learner, promote it, remove an old voter (runs with 5 nodes only). Default true. */
  readonly membership?: boolean;
  readonly network?: Partial<NetworkOptions>;
  /** Milliseconds a disk sync takes, drawn from [minLatency, maxLatency] per sync. Default 0 to 3. */
  readonly disk?: Partial<{ readonly minLatency: number; readonly maxLatency: number }>;
  readonly raft?: Partial<
    Pick<
      RaftOptions,
      'electionTick' | 'heartbeatTick' | 'maxInflight' | 'maxSizePerMsg' | 'preVote' | 'checkQuorum' | 'unsafe'
    >
  >;
  /** Stop at the first invariant violation (default true); false lets the linearizability checker judge the rest. */
  readonly stopOnViolation?: boolean;
  /** Keep a readable trace of the run's events. Default false. */
  readonly trace?: boolean;
}

export const SIM_DEFAULTS = {
  nodes: 3,
  durationMs: 1500,
  tickMs: 10,
  clients: 3,
  opTimeoutMs: 300,
  compactEvery: 12,
  network: { minDelay: 1, maxDelay: 25, dropRate: 0.03, duplicateRate: 0.03 },
  disk: { minLatency: 0, maxLatency: 3 },
  raft: { electionTick: 10, heartbeatTick: 2, maxInflight: 4, maxSizePerMsg: 64, preVote: true, checkQuorum: true },
} as const;
