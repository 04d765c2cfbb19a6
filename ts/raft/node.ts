/**
 * RaftNode: the application's handle on one Raft member. Feed it time (`tick`), messages
 * from peers (`step`) and requests (`propose`, `proposeConfChange`, `readIndex`,
 * `transferLeader`); then, while `hasReady()`, take `ready()`, do what it says in order
 * (persist, send, apply) and call `advance()`. See docs/raft.md.
 */
import { type ConfChange, encodeConfChange } from '../codec/raft-confchange.js';
import { notLeader, RaftErrorCode, raftError } from './errors.js';
import { message, Raft } from './raft.js';
import type {
  ConfState,
  Entry,
  EntryType,
  HardState,
  Message,
  ProgressStatus,
  RaftOptions,
  Ready,
  Snapshot,
  SoftState,
  Status,
} from './types.js';

const LOCAL_TYPES = new Set(['MsgHup', 'MsgBeat', 'MsgProp']);

function sameHard(a: HardState, b: HardState): boolean {
  return a.term === b.term && a.vote === b.vote && a.commit === b.commit;
}

export interface Proposed {
  /** Where the entry went in the leader's log; it is committed once an entry with this index and term is. */
  readonly index: number;
  readonly term: number;
}

export class RaftNode {
  private readonly raft: Raft;
  private prevHard: HardState;
  private prevSoft: SoftState;
  private pending: Ready | undefined;

  constructor(opts: RaftOptions) {
    this.raft = new Raft(opts);
    this.prevHard = this.hardState();
    this.prevSoft = { lead: this.raft.lead, role: this.raft.role };
  }

  get id(): number {
    return this.raft.id;
  }

  /** The current term, role, known leader and last log index: `status()` without building it. */
  get term(): number {
    return this.raft.term;
  }
  get role(): SoftState['role'] {
    return this.raft.role;
  }
  get lead(): number {
    return this.raft.lead;
  }
  get lastIndex(): number {
    return this.raft.log.lastIndex();
  }

  private hardState(): HardState {
    return { term: this.raft.term, vote: this.raft.vote, commit: this.raft.log.committed };
  }

  /** One unit of logical time (the driver decides how long: e.g. 100 ms). */
  tick(): void {
    this.raft.tick();
  }

  /** Starts an election now (tests and tools; normally the election timeout does this). */
  campaign(): void {
    this.raft.step(message('MsgHup', { from: this.id, to: this.id }));
  }

  /** A message from a peer. Local message types and messages for another node are refused. */
  step(m: Message): void {
    if (LOCAL_TYPES.has(m.type)) {
      throw raftError(RaftErrorCode.BAD_MESSAGE, `${m.type} is a local message and cannot come from a peer`);
    }
    if (m.to !== this.id) {
      throw raftError(RaftErrorCode.BAD_MESSAGE, `message for node ${m.to} delivered to node ${this.id}`, {
        to: m.to,
      });
    }
    this.raft.step(m);
  }

  private proposeEntry(type: EntryType, data: Uint8Array): Proposed {
    if (this.raft.role !== 'leader') throw notLeader(this.id, this.raft.lead, 'proposal');
    const e: Entry = { index: 0, term: 0, type, data };
    this.raft.step(message('MsgProp', { from: this.id, to: this.id, entries: [e] }));
    return { index: this.raft.log.lastIndex(), term: this.raft.term };
  }

  /**
   * Appends an opaque payload to the leader's log. Throws PLX_RAFT_NOT_LEADER (with
   * `details.leader`) on any other node: proposals are not forwarded.
   */
  propose(data: Uint8Array): Proposed {
    return this.proposeEntry('normal', data);
  }

  /** Adds or removes one node; refused with PLX_RAFT_CONF_CHANGE_PENDING while another is uncommitted. */
  proposeConfChange(cc: ConfChange): Proposed {
    return this.proposeEntry('conf-change', encodeConfChange(cc));
  }

  /** Asks the leader to hand leadership to `to` (it must be a voter); forwarded when called on a follower. */
  transferLeader(to: number): void {
    if (!Number.isSafeInteger(to) || to <= 0) throw raftError(RaftErrorCode.BAD_CONFIG, `bad transferee ${to}`);
    this.raft.transferLeader(to);
  }

  /**
   * Requests a linearizable read. When the leader has confirmed it still leads, a ReadState
   * with this context and a read index appears in a Ready; serve the read once the state
   * machine has applied that index. Forwarded to the leader when called on a follower; throws
   * PLX_RAFT_NOT_LEADER when no leader is known.
   */
  readIndex(context: Uint8Array): void {
    this.raft.step(message('MsgReadIndex', { from: this.id, to: this.id, context }));
  }

  /**
   * Makes a snapshot of the application state `data` as of applied entry `index`. Store it
   * with `RaftStorageWriter.compact`, which drops the entries it covers.
   */
  compact(index: number, data: Uint8Array): Snapshot {
    const log = this.raft.log;
    if (!Number.isSafeInteger(index) || index > log.applied) {
      throw raftError(
        RaftErrorCode.SNAPSHOT_OUT_OF_DATE,
        `cannot snapshot at ${index}: only entries up to ${log.applied} are applied`,
        { index, applied: log.applied },
      );
    }
    const term = log.term(index);
    if (term === undefined || index < log.firstIndex()) {
      throw raftError(RaftErrorCode.SNAPSHOT_OUT_OF_DATE, `entry ${index} is already compacted`, { index });
    }
    return { metadata: { index, term, confState: this.raft.confStateAt(index) }, data };
  }

  hasReady(): boolean {
    const r = this.raft;
    if (r.appendsDue || r.msgs.length > 0 || r.readStates.length > 0) return true;
    if (r.log.unstableEntries().length > 0 || r.log.hasPendingSnapshot()) return true;
    if (r.log.hasNextCommittedEntries()) return true;
    if (!sameHard(this.hardState(), this.prevHard)) return true;
    if (r.lead !== this.prevSoft.lead || r.role !== this.prevSoft.role) return true;
    return false;
  }

  /** What to persist, send and apply now. Call `advance()` when done, before the next `ready()`. */
  ready(): Ready {
    if (this.pending !== undefined) {
      throw raftError(RaftErrorCode.READY_ORDER, 'ready() called again before advance()');
    }
    const r = this.raft;
    r.flushAppends();
    const hs = this.hardState();
    const soft: SoftState = { lead: r.lead, role: r.role };
    const softChanged = soft.lead !== this.prevSoft.lead || soft.role !== this.prevSoft.role;
    const rd: Ready = {
      softState: softChanged ? soft : undefined,
      hardState: sameHard(hs, this.prevHard) ? undefined : hs,
      entries: r.log.unstableEntries().slice(),
      snapshot: r.log.pendingSnapshot(),
      messages: r.msgs,
      committedEntries: r.log.nextCommittedEntries(),
      readStates: r.readStates,
    };
    r.msgs = [];
    r.readStates = [];
    this.prevSoft = soft;
    this.pending = rd;
    return rd;
  }

  /** The driver has persisted, sent and applied everything of the last `ready()`. */
  advance(): void {
    const rd = this.pending;
    if (rd === undefined) throw raftError(RaftErrorCode.READY_ORDER, 'advance() called without a ready() before it');
    this.pending = undefined;
    const log = this.raft.log;
    if (rd.hardState) this.prevHard = rd.hardState;
    if (rd.snapshot) {
      log.stableSnapTo(rd.snapshot.metadata.index);
      if (rd.snapshot.metadata.index > log.applied) log.applied = rd.snapshot.metadata.index;
    }
    const last = rd.entries[rd.entries.length - 1];
    if (last) log.stableTo(last.index, last.term);
    const applied = rd.committedEntries[rd.committedEntries.length - 1];
    if (applied) log.appliedTo(applied.index);
  }

  status(): Status {
    const r = this.raft;
    let progress: Map<number, ProgressStatus> | undefined;
    if (r.role === 'leader') {
      progress = new Map();
      for (const [id, p] of r.progress) {
        progress.set(id, { match: p.match, next: p.next, state: p.state, learner: p.learner });
      }
    }
    return {
      id: r.id,
      term: r.term,
      vote: r.vote,
      commit: r.log.committed,
      applied: r.log.applied,
      lead: r.lead,
      role: r.role,
      leadTransferee: r.leadTransferee,
      confState: r.confState() as ConfState,
      lastIndex: r.log.lastIndex(),
      ...(progress ? { progress } : {}),
    };
  }
}
