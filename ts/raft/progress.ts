/**
 * The leader's view of one follower: how far its log matches, where the next MsgApp starts,
 * and the flow-control state (probe: one MsgApp at a time until a match is found; replicate:
 * pipelined, at most `maxInflight` batches unacknowledged; snapshot: waiting for a snapshot).
 */
import type { ProgressState } from './types.js';

/** A bounded FIFO of the last indexes of unacknowledged MsgApp batches. */
export class Inflights {
  private buf: number[] = [];
  constructor(readonly size: number) {}
  add(last: number): void {
    this.buf.push(last);
  }
  /** Acknowledges every batch ending at or below `to`. */
  freeLE(to: number): void {
    let n = 0;
    while (n < this.buf.length && this.buf[n]! <= to) n++;
    if (n > 0) this.buf = this.buf.slice(n);
  }
  freeFirst(): void {
    this.buf.shift();
  }
  full(): boolean {
    return this.buf.length >= this.size;
  }
  get count(): number {
    return this.buf.length;
  }
  reset(): void {
    this.buf = [];
  }
}

export class Progress {
  match = 0;
  next: number;
  state: ProgressState = 'probe';
  pendingSnapshot = 0;
  /** Heard from since the last check-quorum round. */
  recentActive = true;
  /** In probe: a MsgApp was sent and no answer came yet. */
  probeSent = false;
  /** The highest commit index sent to this follower in a MsgApp. */
  sentCommit = 0;
  readonly inflights: Inflights;

  constructor(
    next: number,
    maxInflight: number,
    public learner: boolean,
  ) {
    this.next = next;
    this.inflights = new Inflights(maxInflight);
  }

  private reset(state: ProgressState): void {
    this.state = state;
    this.probeSent = false;
    this.pendingSnapshot = 0;
    this.inflights.reset();
  }

  becomeProbe(): void {
    if (this.state === 'snapshot') {
      const pending = this.pendingSnapshot;
      this.reset('probe');
      this.next = Math.max(this.match + 1, pending + 1);
    } else {
      this.reset('probe');
      this.next = this.match + 1;
    }
  }

  becomeReplicate(): void {
    this.reset('replicate');
    this.next = this.match + 1;
  }

  becomeSnapshot(index: number): void {
    this.reset('snapshot');
    this.pendingSnapshot = index;
  }

  /** An acknowledgement up to n; true when it moved `match`. */
  maybeUpdate(n: number): boolean {
    let updated = false;
    if (this.match < n) {
      this.match = n;
      updated = true;
      this.probeSent = false;
    }
    this.next = Math.max(this.next, n + 1);
    return updated;
  }

  /**
   * A rejection of the MsgApp after `rejected`; `hint` is where the follower's log may match.
   * False when the rejection is stale (an answer to an older MsgApp).
   */
  maybeDecrTo(rejected: number, hint: number): boolean {
    if (this.state === 'replicate') {
      if (rejected <= this.match) return false;
      this.next = this.match + 1;
      return true;
    }
    if (this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, hint + 1), this.match + 1, 1);
    this.probeSent = false;
    return true;
  }

  /** Records a sent MsgApp carrying entries up to `last` (`count` of them). */
  sentEntries(count: number, last: number): void {
    if (this.state === 'replicate') {
      if (count > 0) {
        this.next = last + 1;
        this.inflights.add(last);
      }
    } else if (this.state === 'probe') {
      this.probeSent = true;
    }
  }

  isPaused(): boolean {
    switch (this.state) {
      case 'probe':
        return this.probeSent;
      case 'replicate':
        return this.inflights.full();
      case 'snapshot':
        return true;
    }
  }
}
