/**
 * The receive path of a cluster node below the runtime: a frame of a stale `(shard, epoch)`
 * goes to the dead-letter log and is answered `stale`; any other is put into its target's
 * mailbox and answered `stored` once the mailbox took it (which may wait: backpressure).
 */
import type { ClusterFrame } from '../codec/cluster-frame.js';
import type { FrameHandler } from '../net/types.js';
import type { DeadLetters, EpochGate } from './fencing.js';

export function fencedReceiver(
  gate: EpochGate,
  deadLetters: DeadLetters,
  deliver: (from: string, frame: ClusterFrame) => Promise<void>,
): FrameHandler {
  return async (from, frame) => {
    if (!gate.admit(frame.shard, frame.epoch)) {
      await deadLetters.record('stale-epoch', from, frame, gate.epochOf(frame.shard));
      return 'stale';
    }
    await deliver(from, frame);
    return 'stored';
  };
}
