/**
 * Leaving a cluster: the node drains first, in this order: it tells the authority it is
 * leaving (no new leases), refuses new activations, finishes running macrosteps, flushes its
 * outboxes, hands each held shard over (release: the next owner gets a greater epoch), lets
 * the messages it held for those shards go to their next owners, and only then leaves. The
 * runtime supplies the hooks (ts/cluster/leave.ts for a running node).
 */
import type { Membership } from './types.js';

export interface DrainHooks {
  refuseActivations(): void | Promise<void>;
  finishMacrosteps(): Promise<void>;
  flushOutboxes(): Promise<void>;
  /** Ships what the next owner lacks (nothing with a shared store) before the lease is released. */
  handOver(shard: number, epoch: bigint): Promise<void>;
  /** After every release: waits for the messages held on this node to reach the shards' next owners. */
  forwardHeld?(): Promise<void>;
}

export async function drainAndLeave(m: Membership, hooks: DrainHooks, onDrain?: () => void): Promise<void> {
  onDrain?.();
  await m.drain();
  await hooks.refuseActivations();
  await hooks.finishMacrosteps();
  await hooks.flushOutboxes();
  for (const l of m.held()) {
    await hooks.handOver(l.shard, l.epoch);
    await m.release(l.shard, l.epoch);
  }
  await hooks.forwardHeld?.();
  await m.leave();
}
