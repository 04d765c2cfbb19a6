/**
 * The Raft state machine (Ongaro & Ousterhout, extended version; section numbers below refer
 * to it). It takes messages in `step`, time in `tick`, and collects what to send in `msgs`;
 * RaftNode (ts/raft/node.ts) turns that into a Ready. No clock, socket, disk or Math.random:
 * the only randomness is the injected `random`.
 */
import { type ConfChange, decodeConfChange } from '../codec/raft-confchange.js';
import { applyToConfState } from './confchange.js';
import { notLeader, RaftErrorCode, raftError } from './errors.js';
import { RaftLog } from './log.js';
import { Progress } from './progress.js';
import { hasQuorum, majorityCommitted, voteResult } from './quorum.js';
import type {
  ConfState,
  Entry,
  EntryType,
  Message,
  MessageType,
  RaftOptions,
  ReadState,
  Role,
  Snapshot,
} from './types.js';

const EMPTY = new Uint8Array(0);

/** A ReadIndex request waiting for a quorum of heartbeat acknowledgements. */
interface PendingRead {
  readonly index: number;
  readonly from: number;
  readonly context: Uint8Array;
  readonly key: string;
  readonly acks: Set<number>;
}

function ctxKey(c: Uint8Array): string {
  let s = '';
  for (const b of c) s += b.toString(16).padStart(2, '0');
  return s;
}

export function message(type: MessageType, fields: Partial<Message> & { from: number; to: number }): Message {
  return {
    type,
    term: 0,
    logTerm: 0,
    index: 0,
    entries: [],
    commit: 0,
    reject: false,
    rejectHint: 0,
    ...fields,
  };
}

export class Raft {
  readonly id: number;
  term = 0;
  vote = 0;
  lead = 0;
  role: Role = 'follower';
  readonly log: RaftLog;
  msgs: Message[] = [];
  readStates: ReadState[] = [];
  /**
   * A leader owes its followers appends (new entries, or a commit index that moved): sent by
   * `flushAppends`, which RaftNode calls when it builds a Ready. So every proposal and every
   * acknowledgement stepped between two Readies leaves as one MsgApp per follower, not one each.
   */
  appendsDue = false;

  voters = new Set<number>();
  learners = new Set<number>();
  progress = new Map<number, Progress>();
  private votes = new Map<number, boolean>();

  leadTransferee = 0;
  /** Index of the latest conf-change entry appended by this leader; another waits until it commits. */
  pendingConfIndex = 0;
  /** Index of the last conf-change entry taken into the configuration. */
  confIndex = 0;
  /** Configuration as of each applied conf-change index, for snapshots made at older indexes. */
  private confHistory: { index: number; conf: ConfState }[] = [];

  private pendingReads: PendingRead[] = [];
  /** Reads that arrived before this leader committed an entry of its term. */
  private deferredReads: Message[] = [];

  private electionElapsed = 0;
  private heartbeatElapsed = 0;
  private randomizedElectionTimeout = 0;

  readonly electionTick: number;
  readonly heartbeatTick: number;
  private readonly maxSizePerMsg: number;
  private readonly maxInflight: number;
  readonly preVote: boolean;
  readonly checkQuorum: boolean;
  private readonly random: (n: number) => number;
  private readonly unsafe: NonNullable<RaftOptions['unsafe']>;

  constructor(opts: RaftOptions) {
    const bad = (m: string) => raftError(RaftErrorCode.BAD_CONFIG, m);
    if (!Number.isSafeInteger(opts.id) || opts.id <= 0) throw bad(`id ${opts.id} must be a positive safe integer`);
    this.id = opts.id;
    this.electionTick = opts.electionTick ?? 10;
    this.heartbeatTick = opts.heartbeatTick ?? 1;
    if (!Number.isInteger(this.heartbeatTick) || this.heartbeatTick < 1) throw bad('heartbeatTick must be at least 1');
    if (!Number.isInteger(this.electionTick) || this.electionTick <= this.heartbeatTick) {
      throw bad(`electionTick (${this.electionTick}) must be an integer above heartbeatTick (${this.heartbeatTick})`);
    }
    this.maxSizePerMsg = opts.maxSizePerMsg ?? 1024 * 1024;
    this.maxInflight = opts.maxInflight ?? 256;
    if (!(this.maxSizePerMsg > 0)) throw bad('maxSizePerMsg must be positive');
    if (!Number.isInteger(this.maxInflight) || this.maxInflight < 1) throw bad('maxInflight must be at least 1');
    this.preVote = opts.preVote ?? false;
    this.checkQuorum = opts.checkQuorum ?? false;
    this.random = opts.random;
    this.unsafe = opts.unsafe ?? {};
    this.log = new RaftLog(opts.storage, opts.maxCommittedSizePerReady ?? 64 * 1024 * 1024);

    const { hardState, confState } = opts.storage.initialState();
    const snapIndex = opts.storage.snapshot().metadata.index;
    this.setConf(confState);
    this.confIndex = snapIndex;
    this.confHistory = [{ index: snapIndex, conf: confState }];
    if (hardState.commit < this.log.committed || hardState.commit > this.log.lastIndex()) {
      throw bad(`stored commit ${hardState.commit} is outside [${this.log.committed}, ${this.log.lastIndex()}]`);
    }
    this.term = hardState.term;
    this.vote = hardState.vote;
    this.log.commitTo(hardState.commit);
    this.takeCommittedConfChanges();
    const applied = opts.applied ?? snapIndex;
    if (applied > this.log.committed) throw bad(`applied ${applied} is above the stored commit ${this.log.committed}`);
    if (applied > this.log.applied) this.log.appliedTo(applied);
    this.becomeFollower(this.term, 0);
  }

  // ---- configuration ----

  private setConf(cs: ConfState): void {
    this.voters = new Set(cs.voters);
    this.learners = new Set(cs.learners);
  }

  confState(): ConfState {
    return {
      voters: [...this.voters].sort((a, b) => a - b),
      learners: [...this.learners].sort((a, b) => a - b),
    };
  }

  /** The configuration in force at `index` (for a snapshot made there). */
  confStateAt(index: number): ConfState {
    let cs = this.confHistory[0]!.conf;
    for (const h of this.confHistory) if (h.index <= index) cs = h.conf;
    return cs;
  }

  promotable(): boolean {
    return this.voters.has(this.id);
  }

  /** Conf changes take effect once committed, one at a time (a leader refuses a second before the first commits). */
  private takeCommittedConfChanges(): void {
    if (this.log.committed <= this.confIndex) return;
    const ents = this.log.slice(Math.max(this.confIndex + 1, this.log.firstIndex()), this.log.committed + 1);
    for (const e of ents ?? []) if (e.type === 'conf-change') this.applyConfEntry(e);
    this.confIndex = this.log.committed;
  }

  private applyConfEntry(e: Entry): void {
    let cc: ConfChange;
    let next: ConfState;
    try {
      cc = decodeConfChange(e.data);
      next = applyToConfState(this.confState(), cc);
    } catch {
      return; // a refused change is a no-op on every node alike
    }
    this.setConf(next);
    this.confHistory.push({ index: e.index, conf: next });
    if (this.confHistory.length > 64) this.confHistory.splice(1, 1);
    if (this.role !== 'leader') return;
    for (const id of [...this.voters, ...this.learners]) {
      if (!this.progress.has(id)) {
        this.progress.set(id, new Progress(this.log.lastIndex() + 1, this.maxInflight, false));
      }
      this.progress.get(id)!.learner = this.learners.has(id);
    }
    for (const id of [...this.progress.keys()]) {
      if (!this.voters.has(id) && !this.learners.has(id)) this.progress.delete(id);
    }
    if (cc.nodeId === this.leadTransferee && !this.voters.has(cc.nodeId)) this.leadTransferee = 0;
    if (!this.voters.has(this.id)) {
      this.becomeFollower(this.term, 0);
      return;
    }
    if (this.maybeCommit()) this.bcastAppend();
  }

  // ---- role changes ----

  private resetElectionTimeout(): void {
    this.randomizedElectionTimeout = this.electionTick + this.random(this.electionTick);
  }

  private reset(term: number): void {
    if (this.term !== term) {
      this.term = term;
      this.vote = 0;
    }
    this.lead = 0;
    this.appendsDue = false;
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.resetElectionTimeout();
    this.leadTransferee = 0;
    this.votes = new Map();
    this.pendingReads = [];
    this.deferredReads = [];
    this.progress = new Map();
  }

  becomeFollower(term: number, lead: number): void {
    this.reset(term);
    this.lead = lead;
    this.role = 'follower';
  }

  private becomePreCandidate(): void {
    // Neither the term nor the vote changes (§9.6 of the dissertation: pre-vote).
    this.votes = new Map();
    this.lead = 0;
    this.role = 'pre-candidate';
  }

  private becomeCandidate(): void {
    this.reset(this.term + 1);
    this.vote = this.id;
    this.role = 'candidate';
  }

  private becomeLeader(): void {
    this.reset(this.term);
    this.lead = this.id;
    this.role = 'leader';
    const last = this.log.lastIndex();
    for (const id of [...this.voters, ...this.learners]) {
      const p = new Progress(last + 1, this.maxInflight, this.learners.has(id));
      if (id === this.id) {
        p.match = last;
        p.becomeReplicate();
      }
      this.progress.set(id, p);
    }
    // A conf change waits until this leader has committed an entry of its own term.
    this.pendingConfIndex = last;
    this.appendEntries([{ type: 'normal', data: EMPTY }]);
  }

  // ---- time ----

  tick(): void {
    if (this.role === 'leader') this.tickHeartbeat();
    else this.tickElection();
  }

  private tickElection(): void {
    this.electionElapsed++;
    if (this.promotable() && this.electionElapsed >= this.randomizedElectionTimeout) {
      this.electionElapsed = 0;
      this.step(message('MsgHup', { from: this.id, to: this.id }));
    }
  }

  private tickHeartbeat(): void {
    this.heartbeatElapsed++;
    this.electionElapsed++;
    if (this.electionElapsed >= this.electionTick) {
      this.electionElapsed = 0;
      if (this.checkQuorum) {
        const active = new Set<number>([this.id]);
        for (const [id, p] of this.progress) if (p.recentActive) active.add(id);
        for (const [id, p] of this.progress) if (id !== this.id) p.recentActive = false;
        if (!hasQuorum(this.voters, active)) {
          this.becomeFollower(this.term, 0);
          return;
        }
      }
      if (this.leadTransferee !== 0) this.leadTransferee = 0; // the transfer took too long: abort it
    }
    if (this.heartbeatElapsed >= this.heartbeatTick) {
      this.heartbeatElapsed = 0;
      this.bcastHeartbeat();
    }
  }

  // ---- sending ----

  private send(m: Message): void {
    this.msgs.push(m);
  }

  private reply(type: MessageType, to: number, fields: Partial<Message> = {}): void {
    this.send(message(type, { from: this.id, to, term: this.term, ...fields }));
  }

  /** Sends entries (or a snapshot) to `to`; false when nothing was sent. */
  private sendAppend(to: number, sendIfEmpty = true): boolean {
    const pr = this.progress.get(to);
    if (pr === undefined || pr.isPaused()) return false;
    const prevIndex = pr.next - 1;
    const prevTerm = this.log.term(prevIndex);
    const ents = prevTerm === undefined ? undefined : this.log.entriesFrom(pr.next, this.maxSizePerMsg);
    if (prevTerm === undefined || ents === undefined) {
      if (!pr.recentActive) return false;
      const snap = this.log.snapshot();
      pr.becomeSnapshot(snap.metadata.index);
      this.reply('MsgSnap', to, { snapshot: snap });
      return true;
    }
    if (ents.length === 0 && !sendIfEmpty) return false;
    this.reply('MsgApp', to, { index: prevIndex, logTerm: prevTerm, entries: ents, commit: this.log.committed });
    if (this.log.committed > pr.sentCommit) pr.sentCommit = this.log.committed;
    pr.sentEntries(ents.length, ents.length > 0 ? ents[ents.length - 1]!.index : prevIndex);
    return true;
  }

  private bcastAppend(): void {
    this.appendsDue = false;
    for (const id of this.progress.keys()) if (id !== this.id) this.sendAppend(id);
  }

  /**
   * Sends the appends a leader owes (see `appendsDue`): to each follower the entries not sent
   * yet, whose MsgApp carries the commit index, or, when there are none, an empty MsgApp if
   * the commit index moved past the one it was last sent. Proposals and acknowledgements
   * stepped between two Readies so leave as one MsgApp per follower, and a new commit index
   * rides along with new entries when there are any.
   */
  flushAppends(): void {
    if (!this.appendsDue) return;
    this.appendsDue = false;
    if (this.role !== 'leader') return;
    const committed = this.log.committed;
    for (const [id, pr] of this.progress) {
      if (id === this.id || !this.sendAppend(id, pr.sentCommit < committed)) continue;
      while (this.role === 'leader' && pr.state === 'replicate' && this.sendAppend(id, false)) {
        // fill the pipeline up to the in-flight limit when one message cannot carry them all
      }
    }
  }

  private bcastHeartbeat(context?: Uint8Array): void {
    const ctx = context ?? this.pendingReads[this.pendingReads.length - 1]?.context;
    for (const [id, pr] of this.progress) {
      if (id === this.id) continue;
      const commit = Math.min(pr.match, this.log.committed);
      this.reply('MsgHeartbeat', id, ctx ? { commit, context: ctx } : { commit });
    }
  }

  private sendTimeoutNow(to: number): void {
    this.reply('MsgTimeoutNow', to);
  }

  // ---- log ----

  private appendEntries(es: { type: EntryType; data: Uint8Array }[]): number {
    let index = this.log.lastIndex();
    const ents: Entry[] = es.map((e) => ({ index: ++index, term: this.term, type: e.type, data: e.data }));
    this.log.append(ents);
    this.progress.get(this.id)?.maybeUpdate(index);
    this.maybeCommit();
    return index;
  }

  private maybeCommit(): boolean {
    const mci = majorityCommitted(this.voters, (id) => this.progress.get(id)?.match ?? 0);
    const committed = this.log.maybeCommit(mci, this.term, this.unsafe.commitPreviousTermByCounting === true);
    if (committed) this.afterCommit();
    return committed;
  }

  private committedInTerm(): boolean {
    return this.log.term(this.log.committed) === this.term;
  }

  private afterCommit(): void {
    this.takeCommittedConfChanges();
    if (this.role === 'leader' && this.committedInTerm() && this.deferredReads.length > 0) {
      const reads = this.deferredReads;
      this.deferredReads = [];
      for (const m of reads) this.handleReadIndex(m);
    }
  }

  // ---- the step function ----

  step(m: Message): void {
    // §3.10 of the dissertation: only the current leader hands leadership over. A TimeoutNow
    // of another term, or from anyone else, would start an election that nobody asked for.
    if (m.type === 'MsgTimeoutNow' && (m.term !== this.term || m.from !== this.lead || this.lead === this.id)) return;
    if (m.term === 0) {
      // local message
    } else if (m.term > this.term) {
      if (m.type === 'MsgVote' || m.type === 'MsgPreVote') {
        const inLease = this.checkQuorum && this.lead !== 0 && this.electionElapsed < this.electionTick;
        // §6 (dissertation 4.2.3): a node that hears from a current leader ignores RequestVote.
        if (inLease && !m.transfer) return;
      }
      if (m.type === 'MsgPreVote') {
        // a pre-vote never changes our term
      } else if (m.type === 'MsgPreVoteResp' && !m.reject) {
        // our own pre-vote was granted at the future term; the term moves when we campaign
      } else if (m.type === 'MsgApp' || m.type === 'MsgHeartbeat' || m.type === 'MsgSnap') {
        this.becomeFollower(m.term, m.from);
      } else {
        this.becomeFollower(m.term, 0);
      }
    } else if (m.term < this.term) {
      if ((this.checkQuorum || this.preVote) && (m.type === 'MsgHeartbeat' || m.type === 'MsgApp')) {
        // Tell a stale leader the current term so it steps down.
        this.reply('MsgAppResp', m.from);
      } else if (m.type === 'MsgPreVote') {
        this.reply('MsgPreVoteResp', m.from, { reject: true });
      }
      return;
    }

    switch (m.type) {
      case 'MsgHup':
        this.hup(false);
        return;
      case 'MsgVote':
      case 'MsgPreVote':
        this.handleVote(m);
        return;
    }
    switch (this.role) {
      case 'leader':
        this.stepLeader(m);
        return;
      case 'candidate':
      case 'pre-candidate':
        this.stepCandidate(m);
        return;
      case 'follower':
        this.stepFollower(m);
        return;
    }
  }

  private hup(transfer: boolean): void {
    if (this.role === 'leader' || !this.promotable()) return;
    if (this.log.hasPendingSnapshot()) return;
    if (this.preVote && !transfer) this.campaign('pre');
    else this.campaign('real', transfer);
  }

  private campaign(kind: 'pre' | 'real', transfer = false): void {
    let term: number;
    let type: MessageType;
    if (kind === 'pre') {
      this.becomePreCandidate();
      term = this.term + 1;
      type = 'MsgPreVote';
    } else {
      this.becomeCandidate();
      term = this.term;
      type = 'MsgVote';
    }
    this.votes.set(this.id, true);
    if (voteResult(this.voters, this.votes) === 'won') {
      if (kind === 'pre') this.campaign('real', transfer);
      else this.becomeLeader();
      return;
    }
    for (const id of [...this.voters].sort((a, b) => a - b)) {
      if (id === this.id) continue;
      this.send(
        message(type, {
          from: this.id,
          to: id,
          term,
          index: this.log.lastIndex(),
          logTerm: this.log.lastTerm(),
          ...(transfer ? { transfer: true } : {}),
        }),
      );
    }
  }

  private handleVote(m: Message): void {
    const resp: MessageType = m.type === 'MsgVote' ? 'MsgVoteResp' : 'MsgPreVoteResp';
    // §5.2: "Each server will vote for at most one candidate in a given term, on a first-come-first-served basis."
    const canVote =
      this.vote === m.from || (this.vote === 0 && this.lead === 0) || (m.type === 'MsgPreVote' && m.term > this.term);
    const upToDate = this.unsafe.skipLogUpToDateCheck === true || this.log.isUpToDate(m.index, m.logTerm);
    if (canVote && upToDate) {
      // A granted pre-vote answers with the term it was asked for, so the candidate counts it.
      this.send(message(resp, { from: this.id, to: m.from, term: m.term }));
      if (m.type === 'MsgVote') {
        this.electionElapsed = 0;
        this.vote = m.from;
      }
    } else {
      this.reply(resp, m.from, { reject: true });
    }
  }

  private stepLeader(m: Message): void {
    switch (m.type) {
      case 'MsgBeat':
        this.bcastHeartbeat();
        return;
      case 'MsgProp': {
        if (!this.progress.has(this.id)) throw notLeader(this.id, 0, 'proposal');
        if (this.leadTransferee !== 0) {
          throw raftError(
            RaftErrorCode.TRANSFER_IN_PROGRESS,
            `node ${this.id} is handing leadership to node ${this.leadTransferee}; retry there`,
            { leader: this.id, transferee: this.leadTransferee },
          );
        }
        const es = m.entries.map((e) => ({ type: e.type, data: e.data }));
        for (let i = 0; i < es.length; i++) {
          if (es[i]!.type !== 'conf-change') continue;
          if (this.pendingConfIndex > this.log.committed) {
            throw raftError(
              RaftErrorCode.CONF_CHANGE_PENDING,
              `a conf change at ${this.pendingConfIndex} is not committed yet (commit ${this.log.committed}); retry after it commits`,
              { pending: this.pendingConfIndex },
            );
          }
          this.pendingConfIndex = this.log.lastIndex() + i + 1;
        }
        this.appendEntries(es);
        this.appendsDue = true;
        return;
      }
      case 'MsgReadIndex':
        this.handleReadIndex(m);
        return;
      case 'MsgAppResp':
        this.handleAppResp(m);
        return;
      case 'MsgHeartbeatResp':
        this.handleHeartbeatResp(m);
        return;
      case 'MsgTransferLeader':
        this.handleTransferLeader(m);
        return;
    }
  }

  private handleReadIndex(m: Message): void {
    const ctx = m.context ?? EMPTY;
    if (this.voters.size === 1 && this.voters.has(this.id)) {
      this.answerRead(m.from, this.log.committed, ctx);
      return;
    }
    // Dissertation §6.4: the leader must have committed an entry of its term first.
    if (!this.committedInTerm()) {
      this.deferredReads.push(m);
      return;
    }
    const read: PendingRead = {
      index: this.log.committed,
      from: m.from,
      context: ctx,
      key: ctxKey(ctx),
      acks: new Set([this.id]),
    };
    this.pendingReads.push(read);
    this.bcastHeartbeat(ctx);
  }

  private answerRead(from: number, index: number, context: Uint8Array): void {
    if (from === 0 || from === this.id) this.readStates.push({ index, context });
    else this.reply('MsgReadIndexResp', from, { index, context });
  }

  private handleAppResp(m: Message): void {
    const pr = this.progress.get(m.from);
    if (pr === undefined) return;
    pr.recentActive = true;
    if (m.reject) {
      let hint = m.rejectHint;
      if (m.logTerm > 0) hint = this.log.findConflictByTerm(m.rejectHint, m.logTerm);
      if (pr.maybeDecrTo(m.index, hint)) {
        if (pr.state === 'replicate') pr.becomeProbe();
        this.sendAppend(m.from);
      }
      return;
    }
    const wasPaused = pr.isPaused();
    if (pr.maybeUpdate(m.index)) {
      if (pr.state === 'probe') pr.becomeReplicate();
      else if (pr.state === 'snapshot' && pr.match >= pr.pendingSnapshot) {
        pr.becomeProbe();
        pr.becomeReplicate();
      } else if (pr.state === 'replicate') pr.inflights.freeLE(m.index);
      if (this.maybeCommit()) {
        this.appendsDue = true;
      } else if (wasPaused) {
        this.sendAppend(m.from);
      }
      while (this.role === 'leader' && this.sendAppend(m.from, false)) {
        // keep the pipeline full
      }
      if (m.from === this.leadTransferee && pr.match === this.log.lastIndex()) this.sendTimeoutNow(m.from);
    }
  }

  private handleHeartbeatResp(m: Message): void {
    const pr = this.progress.get(m.from);
    if (pr === undefined) return;
    pr.recentActive = true;
    pr.probeSent = false;
    if (pr.state === 'replicate' && pr.inflights.full()) pr.inflights.freeFirst();
    if (pr.state === 'snapshot') pr.becomeProbe(); // the snapshot may have been lost: probe again
    if (pr.match < this.log.lastIndex()) this.sendAppend(m.from);
    if (m.context === undefined || this.pendingReads.length === 0) return;
    const key = ctxKey(m.context);
    const at = this.pendingReads.findIndex((r) => r.key === key);
    if (at < 0) return;
    const read = this.pendingReads[at]!;
    read.acks.add(m.from);
    if (!hasQuorum(this.voters, read.acks)) return;
    // A quorum acknowledged this leadership after every earlier request too.
    const done = this.pendingReads.splice(0, at + 1);
    for (const r of done) this.answerRead(r.from, r.index, r.context);
  }

  private handleTransferLeader(m: Message): void {
    const target = m.from;
    const pr = this.progress.get(target);
    if (pr === undefined || pr.learner) return;
    if (this.leadTransferee === target) return;
    if (target === this.id) return;
    this.leadTransferee = target;
    this.electionElapsed = 0;
    if (pr.match === this.log.lastIndex()) this.sendTimeoutNow(target);
    else this.sendAppend(target);
  }

  private stepCandidate(m: Message): void {
    switch (m.type) {
      case 'MsgProp':
        throw notLeader(this.id, 0, 'proposal');
      case 'MsgApp':
        this.becomeFollower(m.term, m.from);
        this.handleAppend(m);
        return;
      case 'MsgHeartbeat':
        this.becomeFollower(m.term, m.from);
        this.handleHeartbeat(m);
        return;
      case 'MsgSnap':
        this.becomeFollower(m.term, m.from);
        this.handleSnapshot(m);
        return;
      case 'MsgVoteResp':
      case 'MsgPreVoteResp': {
        const mine = this.role === 'candidate' ? 'MsgVoteResp' : 'MsgPreVoteResp';
        if (m.type !== mine) return;
        if (!this.votes.has(m.from)) this.votes.set(m.from, !m.reject);
        const r = voteResult(this.voters, this.votes);
        if (r === 'won') {
          if (this.role === 'pre-candidate') this.campaign('real');
          else {
            this.becomeLeader();
            this.bcastAppend();
          }
        } else if (r === 'lost') {
          this.becomeFollower(this.term, 0);
        }
        return;
      }
    }
  }

  private stepFollower(m: Message): void {
    switch (m.type) {
      case 'MsgProp':
        if (m.from === 0 || m.from === this.id) throw notLeader(this.id, this.lead, 'proposal');
        return; // proposals are never forwarded
      case 'MsgApp':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleAppend(m);
        return;
      case 'MsgHeartbeat':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleHeartbeat(m);
        return;
      case 'MsgSnap':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleSnapshot(m);
        return;
      case 'MsgTransferLeader':
        if (this.lead !== 0) this.send({ ...m, to: this.lead });
        return;
      case 'MsgTimeoutNow':
        // §3.10 of the dissertation: the target starts an election at once, skipping pre-vote.
        this.hup(true);
        return;
      case 'MsgReadIndex':
        if (this.lead === 0) {
          if (m.from === 0 || m.from === this.id) throw notLeader(this.id, 0, 'read');
          return;
        }
        this.send({ ...m, from: this.id, to: this.lead });
        return;
      case 'MsgReadIndexResp':
        this.readStates.push({ index: m.index, context: m.context ?? EMPTY });
        return;
    }
  }

  private handleAppend(m: Message): void {
    if (m.index < this.log.committed) {
      this.reply('MsgAppResp', m.from, { index: this.log.committed });
      return;
    }
    const before = this.log.committed;
    const lastNew = this.log.maybeAppend(m.index, m.logTerm, m.commit, m.entries);
    if (lastNew !== undefined) {
      if (this.log.committed > before) this.afterCommit();
      this.reply('MsgAppResp', m.from, { index: lastNew });
      return;
    }
    const hintIndex = this.log.findConflictByTerm(Math.min(m.index, this.log.lastIndex()), m.logTerm);
    this.reply('MsgAppResp', m.from, {
      index: m.index,
      reject: true,
      rejectHint: hintIndex,
      logTerm: this.log.term(hintIndex) ?? 0,
    });
  }

  private handleHeartbeat(m: Message): void {
    const before = this.log.committed;
    this.log.commitTo(Math.min(m.commit, this.log.lastIndex()));
    if (this.log.committed > before) this.afterCommit();
    this.reply('MsgHeartbeatResp', m.from, m.context ? { context: m.context } : {});
  }

  private handleSnapshot(m: Message): void {
    const s = m.snapshot;
    if (s === undefined) return;
    if (this.restore(s)) this.reply('MsgAppResp', m.from, { index: this.log.lastIndex() });
    else this.reply('MsgAppResp', m.from, { index: this.log.committed });
  }

  private restore(s: Snapshot): boolean {
    const { index, term } = s.metadata;
    if (index <= this.log.committed) return false;
    if (this.log.matchTerm(index, term)) {
      // We already have the entries: fast-forward the commit instead.
      this.log.commitTo(index);
      this.afterCommit();
      return false;
    }
    this.log.restore(s);
    this.setConf(s.metadata.confState);
    this.confIndex = index;
    this.confHistory = [{ index, conf: s.metadata.confState }];
    return true;
  }

  // ---- calls from RaftNode ----

  transferLeader(to: number): void {
    this.step(message('MsgTransferLeader', { from: to, to: this.id }));
  }
}
