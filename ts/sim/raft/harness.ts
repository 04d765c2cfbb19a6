/**
 * What the two simulation harnesses share (the Raft cluster, cluster.ts here, and the
 * replicated-log cluster, ts/sim/replication/cluster.ts): one seed's generator, one
 * `ManualClock`, the faulty `SimNetwork` with the simulated Raft transport over it, the
 * generator of simulated disk latencies and the disks it drives, the history and the
 * invariants, the trace and the fingerprint of a run, and the checks that end it.
 *
 * The order of draws is part of a seed's meaning: the network's generator is forked first and
 * the disks' second, before anything of a subclass, so a seed replays the same run whichever
 * harness version wrote it down.
 */
import { ManualClock } from '../../core/clock.js';
import type { MemoryRaftStorage } from '../../raft/storage.js';
import type { HardState, Message } from '../../raft/types.js';
import { History } from '../history.js';
import { ReplicatedLogInvariants, type Violation } from '../invariants.js';
import { checkLinearizable, type LinearizabilityResult } from '../linearizability.js';
import { appendLogModel, type LogInput, type LogOutput } from '../log-model.js';
import { type NetworkOptions, SimNetwork } from '../network.js';
import { SimRandom } from '../rng.js';
import { SimDisk } from './disk.js';
import { SimRaftNetwork } from './transport.js';

/** What one run of a harness ends with. */
export interface SimOutcome {
  readonly ok: boolean;
  readonly violations: readonly Violation[];
  readonly linearizability: LinearizabilityResult<LogInput, LogOutput>;
  readonly history: History<LogInput, LogOutput>;
  /** A hash of every event of the run: equal for two runs of one seed. */
  readonly fingerprint: string;
  readonly trace: readonly string[];
}

/** The failures of a run, for the line that names its seed and the command replaying it. */
export function describeFailure(r: Pick<SimOutcome, 'violations' | 'linearizability'>): string {
  const what = r.violations.map((v) => `${v.rule}: ${v.message} (t=${v.time}ms)`);
  if (r.linearizability.result === 'violation') {
    what.push(`not linearizable: ${r.linearizability.unplaced.length} operation(s) cannot be placed`);
  }
  return what.join('; ');
}

export abstract class SimHarness {
  protected readonly rng: SimRandom;
  protected readonly clock = new ManualClock();
  protected readonly net: SimNetwork<Message>;
  protected readonly wire: SimRaftNetwork;
  protected readonly diskRng: SimRandom;
  protected readonly history = new History<LogInput, LogOutput>();
  protected readonly inv = new ReplicatedLogInvariants();
  protected readonly trace: string[] = [];
  private hash = 0x811c9dc5;

  constructor(
    seed: number,
    network: NetworkOptions,
    private readonly keepTrace: boolean,
  ) {
    this.rng = new SimRandom(seed);
    this.net = new SimNetwork<Message>(this.rng.fork(), network);
    this.wire = new SimRaftNetwork(this.net, this.clock, (m) => this.observe(m));
    this.diskRng = this.rng.fork();
  }

  /** Sees every Raft message an open endpoint sends (counting). */
  protected abstract observe(m: Message): void;

  /** Adds a line to the fingerprint (and the trace, when kept), stamped with the virtual time. */
  protected note(line: string): void {
    const s = `${this.clock.now()} ${line}`;
    for (let i = 0; i < s.length; i++) this.hash = Math.imul(this.hash ^ s.charCodeAt(i), 0x01000193) >>> 0;
    if (this.keepTrace) this.trace.push(s);
  }

  /** A simulated disk over `durable`, its syncs taking `latency()` ms of the disks' generator. */
  protected disk(durable: MemoryRaftStorage, latency: () => number, onSynced?: (hs: HardState) => void): SimDisk {
    return new SimDisk(durable, this.clock, latency, onSynced);
  }

  /** Checks the history against the log model and ends the run with what the invariants found. */
  protected outcome(): SimOutcome {
    const lin = checkLinearizable(this.history.operations(), appendLogModel(), 200_000);
    const violations = [...this.inv.violations];
    return {
      ok: violations.length === 0 && lin.result !== 'violation',
      violations,
      linearizability: lin,
      history: this.history,
      fingerprint: this.hash.toString(16).padStart(8, '0'),
      trace: this.trace,
    };
  }
}
