/**
 * Runs a `Swim` on a clock: its `tick` at every `nextDeadline()`, one timer at a time, and its
 * `step` for every message the transport hands in. The same driver runs on `systemClock` /
 * `monotonicClock` and on a `ManualClock`; the simulator (test/cluster/gossip-sim.ts) steps
 * members itself to model paused processes.
 */
import type { GossipMessage } from '../../codec/gossip.js';
import type { ClockTimers, TimerHandle } from '../../core/clock.js';
import type { Swim } from './swim.js';

export interface SwimDriver {
  /** A message from the transport. Ignored once stopped. */
  deliver(message: GossipMessage): void;
  /** Re-arms the timer after the caller changed the member (join, leave). */
  poke(): void;
  /** Clears the timer; the member does nothing more. */
  stop(): void;
  readonly stopped: boolean;
}

export function driveSwim(swim: Swim, clock: ClockTimers): SwimDriver {
  let handle: TimerHandle | undefined;
  let due = Number.POSITIVE_INFINITY;
  let stopped = false;

  const arm = (): void => {
    if (stopped) return;
    const next = swim.nextDeadline();
    if (handle !== undefined && next === due) return;
    if (handle !== undefined) clock.clearTimeout(handle);
    handle = undefined;
    due = next;
    if (!Number.isFinite(next)) return;
    handle = clock.setTimeout(
      () => {
        handle = undefined;
        due = Number.POSITIVE_INFINITY;
        if (stopped) return;
        swim.tick(clock.now());
        arm();
      },
      Math.max(0, next - clock.now()),
    );
  };

  arm();
  return {
    deliver(message) {
      if (stopped) return;
      swim.step(message, clock.now());
      arm();
    },
    poke() {
      if (stopped) return;
      swim.tick(clock.now());
      arm();
    },
    stop() {
      stopped = true;
      if (handle !== undefined) clock.clearTimeout(handle);
      handle = undefined;
    },
    get stopped() {
      return stopped;
    },
  };
}
