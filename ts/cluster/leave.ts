/**
 * Leaving a cluster with a running node: the runtime's side of `drainAndLeave`
 * (ts/cluster/drain.ts). In order: the authority is told (no new leases), the runtime
 * refuses new activations (a message for an actor not active here is held, then routed to
 * the shard's next owner), finishes the macrosteps in flight and deactivates its actors,
 * flushes its outboxes (every outbound frame acknowledged or failed), hands each shard over
 * and releases its lease (the next owner gets a greater epoch), waits for the held messages
 * to reach their new owners, and leaves. Every step is bounded; past the whole bound the
 * node stops anyway and its remaining leases simply expire.
 *
 * Hand-over is a seam (`ShardHandOver`): with a shared store there is nothing to ship (the
 * next owner reads the same journal); with per-node stores the shipping belongs to shard
 * replication, and until it exists a node whose store holds shard journals cannot leave
 * (with replication factor 1 no other node may take a shard whose journal it lacks).
 */
import { drainAndLeave } from './drain.js';
import { ClusterCode, clusterError } from './errors.js';
import type { Lease, Membership } from './types.js';

/** Ships what a shard's next owner lacks, before the lease is released. */
export interface ShardHandOver {
  /** `shared` or `per-node`: where the shard journals live. */
  readonly layout: 'shared' | 'per-node';
  /**
   * Refuses (throws a PlexusError) when this node cannot hand its shards over; called before
   * anything is drained, so that a refused leave changes nothing.
   */
  check(held: readonly Lease[]): void;
  /** Ships shard `shard` (held at `epoch`) to where its next owner reads it. */
  handOver(shard: number, epoch: bigint): Promise<void>;
}

/** A shared store: every node reads the same shard journals, so nothing is shipped. */
export const sharedStoreHandOver: ShardHandOver = Object.freeze({
  layout: 'shared' as const,
  check: () => {},
  handOver: async () => {},
});

/**
 * Per-node stores with replication factor 1: no journal can be shipped yet, so a node whose
 * store holds shard journals (`holds`) or that holds leases refuses to leave with
 * PLX_CLUSTER_REPLICATION_UNSUPPORTED. Shard replication replaces this with a hand-over
 * that ships the journal (or promotes a replica) before the release.
 */
export function perNodeHandOver(holds: (shard: number) => boolean, shardCount: number): ShardHandOver {
  return {
    layout: 'per-node',
    check(held) {
      const journals: number[] = [];
      for (let s = 0; s < shardCount; s++) if (holds(s)) journals.push(s);
      for (const l of held) if (!journals.includes(l.shard)) journals.push(l.shard);
      if (journals.length === 0) return;
      throw clusterError(
        ClusterCode.REPLICATION_UNSUPPORTED,
        `this node keeps the journals of ${journals.length} shard(s) in its own store and nothing replicates them yet ` +
          '(replication factor 1): no other node may take a shard with an empty journal, so it cannot leave; ' +
          'stop it instead (its shards wait for it) or use a shared store',
        { field: 'replicationFactor', supported: 1, reason: 'leave', shards: journals.slice(0, 16) },
      );
    },
    handOver: async (shard) => {
      throw clusterError(
        ClusterCode.REPLICATION_UNSUPPORTED,
        `shard ${shard}'s journal cannot be shipped: nothing replicates shard journals yet`,
        { field: 'replicationFactor', supported: 1, reason: 'leave', shard },
      );
    },
  };
}

/** What leaving needs of a running node's runtime (the runtime `Node`). */
export interface LeavingRuntime {
  refuseActivations(): void;
  finishMacrosteps(timeoutMs: number): Promise<boolean>;
  flushOutboxes(timeoutMs: number): Promise<boolean>;
  releaseHeldMessages(timeoutMs: number): Promise<boolean>;
  readonly heldCount: number;
}

/** One step of leaving, as reported to `onStep` (the node process prints them). */
export interface LeaveStep {
  readonly step:
    | 'drain'
    | 'refuse-activations'
    | 'finish-macrosteps'
    | 'flush-outboxes'
    | 'hand-over'
    | 'forward-held'
    | 'leave'
    | 'left'
    | 'bound';
  readonly ms: number;
  readonly shard?: number;
  readonly epoch?: bigint;
  /** Whether a bounded step finished before its bound (false: it was cut short). */
  readonly done?: boolean;
  readonly held?: number;
}

export interface LeaveOptions {
  /** The bound on the whole leave (ms, default 20 000); past it the node stops anyway. */
  readonly boundMs?: number;
  /** The bound on each runtime step (ms, default 5 000). */
  readonly stepMs?: number;
  readonly onStep?: (s: LeaveStep) => void;
  /** Monotonic time and timers of the bounds. */
  readonly clock: {
    now(): number;
    setTimeout(fn: () => void, ms: number): unknown;
    clearTimeout(t: unknown): void;
  };
}

export const DEFAULT_LEAVE_BOUND_MS = 20_000;
export const DEFAULT_LEAVE_STEP_MS = 5_000;

/**
 * Drains `runtime` and leaves `membership`, handing shards over with `handOver`. Refused
 * before anything changes when `handOver.check` refuses. Resolves `true` when the node left
 * within the bound, `false` when the bound cut it short (the caller stops the node anyway).
 */
export async function leaveCluster(
  membership: Membership,
  runtime: LeavingRuntime,
  handOver: ShardHandOver,
  opts: LeaveOptions,
): Promise<boolean> {
  handOver.check(membership.held());
  const clock = opts.clock;
  const t0 = clock.now();
  const stepMs = opts.stepMs ?? DEFAULT_LEAVE_STEP_MS;
  const report = (s: Omit<LeaveStep, 'ms'>) => opts.onStep?.({ ...s, ms: Math.round(clock.now() - t0) });
  const leaving = drainAndLeave(
    membership,
    {
      refuseActivations: () => {
        report({ step: 'refuse-activations' });
        runtime.refuseActivations();
      },
      finishMacrosteps: async () => {
        report({ step: 'finish-macrosteps' });
        const done = await runtime.finishMacrosteps(stepMs);
        if (!done) report({ step: 'finish-macrosteps', done });
      },
      flushOutboxes: async () => {
        report({ step: 'flush-outboxes' });
        const done = await runtime.flushOutboxes(stepMs);
        if (!done) report({ step: 'flush-outboxes', done });
      },
      handOver: async (shard, epoch) => {
        report({ step: 'hand-over', shard, epoch });
        await handOver.handOver(shard, epoch);
      },
      forwardHeld: async () => {
        report({ step: 'forward-held', held: runtime.heldCount });
        const done = await runtime.releaseHeldMessages(stepMs);
        if (!done) report({ step: 'forward-held', done, held: runtime.heldCount });
        report({ step: 'leave' });
      },
    },
    () => report({ step: 'drain' }),
  ).then(() => {
    report({ step: 'left' });
    return true;
  });
  let timer: unknown;
  const bound = new Promise<boolean>((resolve) => {
    timer = clock.setTimeout(() => resolve(false), opts.boundMs ?? DEFAULT_LEAVE_BOUND_MS);
  });
  try {
    const left = await Promise.race([leaving, bound]);
    if (!left) report({ step: 'bound', done: false });
    return left;
  } finally {
    clock.clearTimeout(timer);
    // A leave cut short by the bound may still fail later: nobody waits for it then.
    leaving.catch(() => {});
  }
}
