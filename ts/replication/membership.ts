/**
 * Membership changes of the replicated log (leader only): adding a member as a learner and
 * making it a voter once it has caught up, promoting a learner, removing a member, handing
 * leadership over; and what a committed configuration change does here. A member's addresses
 * travel in a membership record (`PXHM`, entries.ts) committed before its configuration change.
 */

import { decodeConfChange } from '../codec/raft-confchange.js';
import { encodeMeta } from '../codec/replication-entries.js';
import type { ClockTimers } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import type { RaftNode } from '../raft/node.js';
import type { Entry } from '../raft/types.js';
import { checkMember, type HaMember } from './config.js';
import { ReplicationErrorCode, replicationError } from './errors.js';

export interface MembershipDeps {
  readonly clock: ClockTimers;
  readonly node: () => Pick<RaftNode, 'status' | 'proposeConfChange' | 'transferLeader'>;
  /** Proposes an entry (the membership record) and resolves once it is applied. */
  propose(data: Uint8Array): Promise<unknown>;
  /** Resolves when this member leads and accepts writes; refuses (NOT_LEADER, NOT_READY, STOPPED) otherwise. */
  whenAcceptingWrites(): Promise<void>;
  /** Throws STOPPED when the member stopped or closed. */
  checkOpen(): void;
  notLeader(why: string): PlexusError;
  /** How long a configuration change may take to commit. */
  readonly timeoutMs: number;
  /** How the refusal of a learner that did not catch up says to promote it. */
  promoteHint(id: number): string;
  /** A committed change removed member `id`. */
  removed(id: number): void;
  /** A committed change added member `id` (as a learner or a voter). */
  added(id: number): void;
}

type Waiter = { term: number; resolve(): void; reject(e: unknown): void };

export class MembershipChanges {
  /** Configuration changes proposed here, by Raft index, until they commit. */
  private readonly waiters = new Map<number, Waiter>();

  constructor(private readonly deps: MembershipDeps) {}

  /**
   * Adds a member (leader only): replicates its addresses, adds it as a learner, waits until
   * it has caught up, then makes it a voter. Start the new member with `join: true` first.
   */
  async add(member: HaMember, opts: { voter?: boolean; catchUpMs?: number } = {}): Promise<void> {
    const m = checkMember(member);
    await this.deps.whenAcceptingWrites();
    const conf = this.deps.node().status().confState;
    if (conf.voters.includes(m.id) || conf.learners.includes(m.id)) {
      throw replicationError(ReplicationErrorCode.MEMBERSHIP, `member ${m.id} is already in the cluster`, { id: m.id });
    }
    await this.deps.propose(encodeMeta(m));
    await this.confChange({ type: 'add-learner', nodeId: m.id });
    if (opts.voter === false) return;
    const end = this.deps.clock.now() + (opts.catchUpMs ?? 10_000);
    for (;;) {
      const s = this.deps.node().status();
      const p = s.progress?.get(m.id);
      if (s.role !== 'leader') throw this.deps.notLeader('leadership changed while adding a member');
      if (p && p.match >= s.commit) break;
      if (this.deps.clock.now() > end) {
        throw replicationError(
          ReplicationErrorCode.MEMBERSHIP,
          `member ${m.id} did not catch up in time; it stays a learner: once it has caught up (start it if it is down), ${this.deps.promoteHint(m.id)}`,
          { id: m.id, reason: 'behind', match: p?.match ?? 0, commit: s.commit },
        );
      }
      await this.sleep(10);
    }
    await this.confChange({ type: 'add-voter', nodeId: m.id });
  }

  /** Removes a member (leader only); a leader removing itself steps down once the change commits. */
  async remove(id: number): Promise<void> {
    await this.deps.whenAcceptingWrites();
    const conf = this.deps.node().status().confState;
    if (!conf.voters.includes(id) && !conf.learners.includes(id)) {
      throw replicationError(ReplicationErrorCode.MEMBERSHIP, `member ${id} is not in the cluster`, { id });
    }
    if (conf.voters.length === 1 && conf.voters[0] === id) {
      throw replicationError(ReplicationErrorCode.MEMBERSHIP, `member ${id} is the last voter and cannot be removed`, {
        id,
      });
    }
    await this.confChange({ type: 'remove-node', nodeId: id });
  }

  /** Hands leadership to `to` (rolling upgrades: move it off a member before stopping it). Resolves once `to` leads. */
  async transfer(to: number, waitMs = 10_000): Promise<void> {
    this.deps.checkOpen();
    const node = this.deps.node();
    const s = node.status();
    if (s.role !== 'leader') throw this.deps.notLeader('only the leader can hand over leadership');
    if (!s.confState.voters.includes(to)) {
      throw replicationError(ReplicationErrorCode.MEMBERSHIP, `member ${to} is not a voter`, { id: to });
    }
    if (to === s.id) return;
    node.transferLeader(to);
    const end = this.deps.clock.now() + waitMs;
    while (node.status().lead !== to || node.status().term === s.term) {
      if (this.deps.clock.now() > end) {
        throw new PlexusError('PLX_RAFT_TIMEOUT', `leadership did not move to ${to} within ${waitMs} ms`, { to });
      }
      await this.sleep(10);
    }
  }

  /**
   * Makes learner `id` a voter (leader only), once it has every committed entry: waits up to
   * `catchUpMs` (default 10,000) for that, then refuses with PLX_REPLICATION_MEMBERSHIP
   * (`details.reason` `behind`). An id that is a voter (`details.reason` `voter`) or not a
   * member (`unknown`) is refused at once.
   */
  async promote(id: number, opts: { catchUpMs?: number } = {}): Promise<void> {
    await this.deps.whenAcceptingWrites();
    const conf = this.deps.node().status().confState;
    if (conf.voters.includes(id)) {
      throw replicationError(ReplicationErrorCode.MEMBERSHIP, `member ${id} is already a voter`, {
        id,
        reason: 'voter',
      });
    }
    if (!conf.learners.includes(id)) {
      throw replicationError(ReplicationErrorCode.MEMBERSHIP, `member ${id} is not in the cluster`, {
        id,
        reason: 'unknown',
      });
    }
    const end = this.deps.clock.now() + (opts.catchUpMs ?? 10_000);
    for (;;) {
      const s = this.deps.node().status();
      const p = s.progress?.get(id);
      if (s.role !== 'leader') throw this.deps.notLeader('leadership changed while promoting a member');
      if (p && p.match >= s.commit) break;
      if (this.deps.clock.now() > end) {
        throw replicationError(
          ReplicationErrorCode.MEMBERSHIP,
          `learner ${id} has not caught up (it has entries up to ${p?.match ?? 0}, the commit index is ${s.commit}); start it if it is down, wait, and promote it again`,
          { id, reason: 'behind', match: p?.match ?? 0, commit: s.commit },
        );
      }
      await this.sleep(10);
    }
    await this.confChange({ type: 'add-voter', nodeId: id });
  }

  /** A committed configuration change entry, applied here: peers follow, and its proposer hears. */
  applied(e: Entry): void {
    const cc = decodeConfChange(e.data);
    if (cc.type === 'remove-node') this.deps.removed(cc.nodeId);
    else this.deps.added(cc.nodeId);
    const w = this.waiters.get(e.index);
    if (w) {
      this.waiters.delete(e.index);
      if (w.term === e.term) w.resolve();
      else
        w.reject(
          new PlexusError('PLX_RAFT_PROPOSAL_LOST', 'leadership changed before the membership change committed'),
        );
    }
  }

  /** The member closes: changes still waiting to commit are refused (STOPPED). */
  close(): void {
    for (const w of this.waiters.values())
      w.reject(replicationError(ReplicationErrorCode.STOPPED, 'the member closed'));
    this.waiters.clear();
  }

  private confChange(cc: Parameters<RaftNode['proposeConfChange']>[0]): Promise<void> {
    const { index, term } = this.deps.node().proposeConfChange(cc);
    const ms = this.deps.timeoutMs;
    return new Promise<void>((resolve, reject) => {
      const timer = this.deps.clock.setTimeout(() => {
        this.waiters.delete(index);
        reject(
          new PlexusError(
            'PLX_RAFT_TIMEOUT',
            `membership change ${cc.type} ${cc.nodeId} not committed within ${ms} ms`,
          ),
        );
      }, ms);
      this.waiters.set(index, {
        term,
        resolve: () => {
          this.deps.clock.clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          this.deps.clock.clearTimeout(timer);
          reject(err);
        },
      });
    });
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((r) => this.deps.clock.setTimeout(r, ms));
  }
}
