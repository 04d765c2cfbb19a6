/**
 * Leaving a cluster: the node drains first, in this order: it tells the authority it is
 * leaving (no new leases), refuses new activations, finishes running macrosteps, flushes its
 * outboxes, hands each held shard over (release: the next owner gets a greater epoch), and
 * only then leaves. The runtime supplies the hooks.
 */
import type { Membership } from './types.js';

export interface DrainHooks {
  refuseActivations(): void | Promise<void>;
  finishMacrosteps(): Promise<void>;
  flushOutboxes(): Promise<void>;
  /** Ships what the next owner lacks (nothing with a shared store) before the lease is released. */
  handOver(shard: number, epoch: bigint): Promise<void>;
}

export async function drainAndLeave(m: Membership, hooks: DrainHooks): Promise<void> {
  await m.drain();
  await hooks.refuseActivations();
  await hooks.finishMacrosteps();
  await hooks.flushOutboxes();
  for (const l of m.held()) {
    await hooks.handOver(l.shard, l.epoch);
    await m.release(l.shard, l.epoch);
  }
  await m.leave();
}
