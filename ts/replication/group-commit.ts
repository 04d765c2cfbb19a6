/**
 * Group commit on the leader (docs/chronacta-ha.md, "Group commit"): the EVFR frames of the
 * appends that arrive while the driver writes a Ready (or in the same turn) are gathered into
 * one `FrameGroup` and proposed as one Raft entry when the driver next looks for a Ready
 * (`flush`, its `beforeReady`). Each append is answered when that entry is committed and applied.
 */
import { PlexusError } from '../core/errors.js';
import type { RaftNode } from '../raft/node.js';
import { concatFrames, type FrameGroup, SOLO_FRAME_BYTES } from './entries.js';
import type { ReplicaDriver } from './raft-edge.js';
import type { ReplicaState } from './replica-state.js';

export interface GroupCommitDeps {
  readonly state: ReplicaState;
  readonly node: Pick<RaftNode, 'term' | 'lastIndex'>;
  readonly driver: Pick<ReplicaDriver, 'wake' | 'propose'>;
  /** Bytes of frames one entry may gather (0: one append per entry, unless they arrive together). */
  readonly groupCommitBytes: number;
  /** This member leads and has applied every entry of earlier terms. */
  acceptingWrites(): boolean;
  notLeader(why: string): PlexusError;
}

export class GroupCommit {
  /** Frames gathered for the next Raft entry, in call order. */
  private group: FrameGroup | undefined;
  /** Entries proposed, and the appends they carried. */
  groupsProposed = 0;
  framesGrouped = 0;
  /**
   * The answer of the newest group gathered (it takes the highest positions counted in
   * `projectedLast`): groups commit in log order, so once it settles, every append counted
   * before it has committed and been applied here, or failed.
   */
  newest: Promise<number> | undefined;

  constructor(private readonly deps: GroupCommitDeps) {}

  /**
   * Adds an append's frame to the group proposed as one Raft entry when the driver next looks
   * for a Ready: appends that arrive while a Ready is written (or in the same turn) share an
   * entry, a journal record and a wire entry. Resolves once that entry is committed and applied.
   */
  gather(frame: Uint8Array, term: number, first: number, last: number, batchId: Uint8Array): Promise<number> {
    let g = this.group;
    const solo = frame.length >= SOLO_FRAME_BYTES;
    if (g && (solo || g.solo || g.term !== term || g.bytes + frame.length > this.deps.groupCommitBytes)) {
      this.flush();
      g = undefined;
      if (this.deps.state.projectedLast !== first - 1) {
        // The group before this append was refused (a leadership transfer in progress, a
        // change of term) and gave its positions back, but this append's positions were
        // counted after them: proposing it would leave a gap in the log. It is not proposed.
        return Promise.reject(
          this.deps.notLeader('the append before it was refused (a leadership transfer, or a new term); retry it'),
        );
      }
    }
    if (!g) {
      let resolve!: (index: number) => void;
      let reject!: (err: unknown) => void;
      const done = new Promise<number>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      g = { term, first, last, batchId, frames: [], bytes: 0, solo, done, resolve, reject };
      this.group = g;
      this.newest = done;
      if (!this.deps.driver.wake()) this.flush();
    }
    if (this.group === g) {
      g.frames.push(frame);
      g.bytes += frame.length;
      g.last = last;
      g.batchId = batchId;
      this.deps.state.projectedLast = last;
    }
    return g.done;
  }

  /** Proposes the gathered frames as one entry (the driver's `beforeReady`). Never throws. */
  flush(): void {
    const g = this.group;
    if (!g) return;
    this.group = undefined;
    const { state, node } = this.deps;
    if (g.frames.length === 0) {
      // Gathered on a stopped driver: nothing was added; fail like a proposal there.
      g.reject(new PlexusError('PLX_RAFT_PROPOSAL_LOST', 'the node is stopped'));
      return;
    }
    if (state.closed || state.failure) {
      g.reject(new PlexusError('PLX_RAFT_PROPOSAL_LOST', 'the member stopped before the append was proposed'));
      return;
    }
    if (node.term !== g.term || !this.deps.acceptingWrites()) {
      // Leadership changed since these appends passed their checks: their positions are void.
      if (node.term === g.term && state.projectedLast === g.last) state.projectedLast = g.first - 1;
      g.reject(this.deps.notLeader(`it stopped leading term ${g.term} before the append was proposed`));
      return;
    }
    const data = g.frames.length === 1 ? (g.frames[0] as Uint8Array) : concatFrames(g.frames, g.bytes);
    const before = node.lastIndex;
    const done = this.deps.driver.propose(data);
    const index = node.lastIndex;
    if (index > before) {
      // The entry is in this leader's log: its positions are taken until leadership changes.
      this.groupsProposed++;
      this.framesGrouped += g.frames.length;
      state.remember(index, g.last, g.batchId, BigInt(g.term));
    } else if (state.projectedLast === g.last) {
      // Refused (a leadership transfer in progress): the positions are free again.
      state.projectedLast = g.first - 1;
    }
    done.then(g.resolve, g.reject);
  }
}
