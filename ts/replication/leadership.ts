/**
 * Leadership readiness of a replica (docs/replication.md, "Inside"): when a member that won an
 * election may serve. A leader of a new term takes appends only once it has applied its whole
 * log as of winning (the entries of earlier terms commit with its first entry of the term);
 * then its projected last position is exact and group commit starts from it. Appends pass
 * that check one at a time, in call order (`admit`), and whatever waits on this leadership
 * (pending appends, read barriers) fails at once when the member steps down (`untilStepDown`).
 * No I/O and no timers of its own: the replica calls `observe` after each applied batch and
 * `roleChanged` on every change of the Raft soft state.
 */
import type { ClockTimers } from '../core/clock.js';
import type { PlexusError } from '../core/errors.js';
import { Condition, type WaitOptions } from '../core/watermark.js';
import type { RaftNode } from '../raft/node.js';
import { type ReplicationCode, ReplicationErrorCode, replicationError } from './errors.js';
import type { ReplicaState } from './replica-state.js';

export interface LeadershipDeps {
  readonly state: ReplicaState;
  readonly node: Pick<RaftNode, 'status' | 'role' | 'term'>;
  readonly clock: Pick<ClockTimers, 'now'>;
  /** How long `whenAcceptingWrites` waits by default (the replica's `timeoutMs`). */
  readonly timeoutMs: number;
  /** The local log's last position: where a ready leader's projected positions start. */
  localLast(): bigint;
  /** Throws STOPPED when the member stopped or closed. */
  checkOpen(): void;
  notLeader(why: string): PlexusError;
}

export class Leadership {
  /** The term in which this leader has applied every earlier entry. */
  private readyTerm = 0;
  /** The term whose log end this leader waits to apply, and that end. */
  private barrierTerm = 0;
  private barrierIndex = 0;
  /** Notified whenever `acceptingWrites` may have changed (role, readiness, failure, close). */
  private readonly readiness = new Condition();
  /** What waits on this member's leadership (pending appends, read barriers): each one's abort, run when it steps down. */
  private readonly onStepDown = new Set<(why: string) => void>();
  private admission: Promise<void> = Promise.resolve();
  /** Appends waiting in `admission` (an append may skip the queue only when none waits). */
  private admitting = 0;

  constructor(private readonly deps: LeadershipDeps) {}

  /** This member leads and accepts appends now. */
  get acceptingWrites(): boolean {
    const { node, state } = this.deps;
    return node.role === 'leader' && this.readyTerm === node.term && !state.failure && !state.closed;
  }

  /**
   * Resolves at the next change that may flip `acceptingWrites`: `true`, or `false` once
   * `timeoutMs` passed first; rejects when `signal` aborts. Callers re-test what they wait for.
   */
  changed(opts: WaitOptions): Promise<boolean> {
    return this.readiness.wait(opts);
  }

  /** Wakes the waiters of `changed` (the member failed or closed). */
  notify(): void {
    this.readiness.notify();
  }

  /** Resolves once this member is a leader that has applied every entry of earlier terms. */
  async whenAcceptingWrites(end = this.deps.clock.now() + this.deps.timeoutMs): Promise<void> {
    if (this.acceptingWrites) return;
    const { node, state, clock } = this.deps;
    for (;;) {
      this.deps.checkOpen();
      const s = node.status();
      if (s.role !== 'leader') throw this.deps.notLeader(`it is a ${s.role}`);
      if (this.readyTerm === s.term) return;
      this.observe();
      if (this.readyTerm === s.term) return;
      if (clock.now() > end) {
        throw replicationError(
          ReplicationErrorCode.NOT_READY,
          `leader ${s.id} has not applied the entries of earlier terms yet (applied ${state.raftApplied}, needs ${this.barrierIndex}); retry`,
          { applied: state.raftApplied, needs: this.barrierIndex },
        );
      }
      await this.readiness.wait({ timeoutMs: end - clock.now() + 1 });
    }
  }

  /**
   * Appends pass the leadership check one at a time, in call order, so positions follow call
   * order. With none waiting and this member accepting writes, the check passes at once.
   */
  async admit(deadline: number): Promise<void> {
    if (this.admitting === 0 && this.acceptingWrites) return;
    this.admitting++;
    const turn = this.admission.then(() => this.whenAcceptingWrites(deadline));
    this.admission = turn.then(
      () => {
        this.admitting--;
      },
      () => {
        this.admitting--;
      },
    );
    // `admission` (and the counter) settles before this continuation, and this continuation
    // (the proposal) runs before the next waiting append's check.
    await turn;
  }

  /**
   * A leader of a new term waits until it has applied its whole log as of winning the
   * election; then its projected positions start at the local log's end (group commit starts).
   */
  observe(): void {
    const s = this.deps.node.status();
    if (s.role !== 'leader') return;
    if (this.barrierTerm !== s.term) {
      this.barrierTerm = s.term;
      this.barrierIndex = s.lastIndex;
    }
    if (this.readyTerm !== s.term && this.deps.state.raftApplied >= this.barrierIndex) {
      this.readyTerm = s.term;
      this.deps.state.projectedLast = Number(this.deps.localLast());
      this.readiness.notify();
    }
  }

  /** The Raft role may have changed: a leader checks its readiness, any other role aborts what waits on leadership. */
  roleChanged(role: string): void {
    this.readiness.notify();
    if (role === 'leader') {
      this.observe();
      return;
    }
    this.readyTerm = 0;
    if (this.onStepDown.size > 0) {
      const why = `it stepped down in term ${this.deps.node.term} (it lost its majority, or a newer term began)`;
      for (const abort of [...this.onStepDown]) abort(why);
      this.onStepDown.clear();
    }
  }

  /**
   * Settles with `p`, or rejects with PLX_REPLICATION_NOT_LEADER (`message(why)`) as soon as
   * this member stops leading, whichever comes first.
   */
  untilStepDown<T>(p: Promise<T>, message: (why: string) => string, details: Record<string, unknown> = {}): Promise<T> {
    // Callers check leadership just before, with no await since: a step-down after that
    // reaches roleChanged (and the abort below) with the Ready that reports it.
    const refuse = (why: string) => {
      const e = this.deps.notLeader(message(why));
      return replicationError(e.code as ReplicationCode, e.message, { ...e.details, ...details });
    };
    return new Promise<T>((resolve, reject) => {
      const abort = (why: string) => reject(refuse(why));
      this.onStepDown.add(abort);
      p.then(
        (v) => {
          this.onStepDown.delete(abort);
          resolve(v);
        },
        (e: unknown) => {
          this.onStepDown.delete(abort);
          reject(e);
        },
      );
    });
  }
}
