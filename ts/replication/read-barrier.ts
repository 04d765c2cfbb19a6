/**
 * Linearizable reads on the leader (ReadIndex, docs/chronacta-ha.md "Linearizable leader
 * reads"): a read waits until a majority has confirmed this member still leads, then reads at
 * the local log's last position. Reads that arrive while a round is in flight join the next
 * round, so one round serves them all and at most two are outstanding.
 */
import type { PlexusError } from '../core/errors.js';

export interface ReadBarrierDeps {
  /** Throws (STOPPED, NOT_LEADER) unless this member is open and leads. */
  checkLeader(): void;
  /** Resolves once a majority confirmed this leadership; rejects (NOT_LEADER) when it steps down first. */
  confirmLeadership(): Promise<unknown>;
  /** What a read must see once confirmed: the local log's last position. */
  lastPosition(): bigint;
}

const noop = () => undefined;

export class ReadBarrier {
  /** The round in flight, and the one gathering the reads that arrive meanwhile. */
  private running: Promise<bigint> | undefined;
  private queued: Promise<bigint> | undefined;
  private roundsRun = 0;

  constructor(private readonly deps: ReadBarrierDeps) {}

  /** The position a linearizable read must see, once this member's leadership is confirmed. */
  wait(): Promise<bigint> {
    try {
      this.deps.checkLeader();
    } catch (e) {
      return Promise.reject(e as PlexusError);
    }
    if (this.queued) return this.queued;
    const before = this.running;
    const round: Promise<bigint> = (before ? before.then(noop, noop) : Promise.resolve())
      .then(() => {
        if (this.queued === round) this.queued = undefined;
        this.running = round;
        return this.round();
      })
      .finally(() => {
        if (this.running === round) this.running = undefined;
      });
    this.queued = round;
    return round;
  }

  /** Rounds run so far (each one serves every read that joined it). */
  get rounds(): number {
    return this.roundsRun;
  }

  private async round(): Promise<bigint> {
    this.deps.checkLeader();
    this.roundsRun++;
    await this.deps.confirmLeadership();
    return this.deps.lastPosition();
  }
}
