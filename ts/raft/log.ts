/**
 * The node's view of its log: what storage holds (stable) followed by what the core has
 * accepted but the driver has not yet persisted (unstable: entries, or a received snapshot).
 */
import { RaftErrorCode, raftError } from './errors.js';
import { limitSize, type RaftStorage } from './storage.js';
import type { Entry, Snapshot } from './types.js';

export class RaftLog {
  /** Unstable entries start at this index. */
  private offset: number;
  private unstableEnts: Entry[] = [];
  private unstableSnap: Snapshot | undefined;
  committed: number;
  applied: number;

  constructor(
    readonly storage: RaftStorage,
    private readonly maxCommittedSize: number,
  ) {
    const first = storage.firstIndex();
    this.offset = storage.lastIndex() + 1;
    this.committed = first - 1;
    this.applied = first - 1;
  }

  firstIndex(): number {
    return this.unstableSnap ? this.unstableSnap.metadata.index + 1 : this.storage.firstIndex();
  }

  lastIndex(): number {
    if (this.unstableEnts.length > 0) return this.offset + this.unstableEnts.length - 1;
    if (this.unstableSnap) return this.unstableSnap.metadata.index;
    return this.storage.lastIndex();
  }

  /** The term of entry i, or undefined when it is compacted or past the end. */
  term(i: number): number | undefined {
    if (i < this.firstIndex() - 1 || i > this.lastIndex()) return undefined;
    if (i >= this.offset && this.unstableEnts.length > 0) return this.unstableEnts[i - this.offset]!.term;
    if (this.unstableSnap && i === this.unstableSnap.metadata.index) return this.unstableSnap.metadata.term;
    if (this.unstableSnap) return undefined;
    try {
      return this.storage.term(i);
    } catch {
      return undefined;
    }
  }

  lastTerm(): number {
    return this.term(this.lastIndex()) ?? 0;
  }

  matchTerm(i: number, t: number): boolean {
    return this.term(i) === t;
  }

  /** §5.4.1: is a log ending at (lastIndex, lastTerm) at least as up-to-date as ours? */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    const ourTerm = this.lastTerm();
    return lastTerm > ourTerm || (lastTerm === ourTerm && lastIndex >= this.lastIndex());
  }

  /** Index of the first entry in `ents` that is not in the log, or 0 when all are. */
  private findConflict(ents: readonly Entry[]): number {
    for (const e of ents) if (!this.matchTerm(e.index, e.term)) return e.index;
    return 0;
  }

  /** The largest index <= `index` whose term is <= `term` (used to skip a whole term on rejection). */
  findConflictByTerm(index: number, term: number): number {
    for (let i = index; i >= 0; i--) {
      const t = this.term(i);
      if (t === undefined) return i;
      if (t <= term) return i;
    }
    return 0;
  }

  /**
   * The AppendEntries receiver: if our log has (index, logTerm), append the new entries
   * (dropping conflicting ones), advance commit, and return the last new index.
   */
  maybeAppend(index: number, logTerm: number, commit: number, ents: readonly Entry[]): number | undefined {
    if (!this.matchTerm(index, logTerm)) return undefined;
    const lastNew = index + ents.length;
    const ci = this.findConflict(ents);
    if (ci !== 0) {
      if (ci <= this.committed) {
        throw raftError(
          RaftErrorCode.BAD_MESSAGE,
          `an append whose entry ${ci} conflicts with the committed prefix (${this.committed})`,
          { reason: 'committed-conflict', index: ci, committed: this.committed },
        );
      }
      this.append(ents.slice(ci - (index + 1)));
    }
    this.commitTo(Math.min(commit, lastNew));
    return lastNew;
  }

  /** Appends to the unstable part, replacing entries from ents[0].index on. */
  append(ents: readonly Entry[]): number {
    if (ents.length === 0) return this.lastIndex();
    const after = ents[0]!.index;
    if (after - 1 < this.committed) {
      throw new Error(`raft invariant: append at ${after} would overwrite committed ${this.committed}`);
    }
    const end = this.offset + this.unstableEnts.length;
    if (after === end) {
      this.unstableEnts = this.unstableEnts.concat(ents);
    } else if (after <= this.offset) {
      this.offset = after;
      this.unstableEnts = [...ents];
    } else {
      this.unstableEnts = this.unstableEnts.slice(0, after - this.offset).concat(ents);
    }
    return this.lastIndex();
  }

  /** Entries [lo, hi) from storage and the unstable part; undefined when lo is compacted. */
  slice(lo: number, hi: number, maxBytes = Number.POSITIVE_INFINITY): Entry[] | undefined {
    if (lo < this.firstIndex()) return undefined;
    hi = Math.min(hi, this.lastIndex() + 1);
    if (lo >= hi) return [];
    let out: Entry[] = [];
    if (lo < this.offset) {
      try {
        out = this.storage.entries(lo, Math.min(hi, this.offset), maxBytes);
      } catch {
        return undefined;
      }
      if (out.length < Math.min(hi, this.offset) - lo) return out;
    }
    if (hi > this.offset) {
      const from = Math.max(lo, this.offset);
      out = out.concat(this.unstableEnts.slice(from - this.offset, hi - this.offset));
    }
    return limitSize(out, maxBytes);
  }

  entriesFrom(i: number, maxBytes: number): Entry[] | undefined {
    if (i > this.lastIndex()) return [];
    return this.slice(i, this.lastIndex() + 1, maxBytes);
  }

  commitTo(c: number): void {
    if (c > this.committed) {
      if (c > this.lastIndex()) throw new Error(`raft invariant: commit ${c} past last index ${this.lastIndex()}`);
      this.committed = c;
    }
  }

  /** Leader rule: commit `maxIndex` if it is in `term` (§5.4.2), unless the unsafe flag says otherwise. */
  maybeCommit(maxIndex: number, term: number, anyTerm = false): boolean {
    if (maxIndex > this.committed && (anyTerm || this.term(maxIndex) === term)) {
      this.commitTo(maxIndex);
      return true;
    }
    return false;
  }

  appliedTo(i: number): void {
    if (i === 0) return;
    if (i > this.committed || i < this.applied) {
      throw new Error(`raft invariant: applied ${i} outside [${this.applied}, ${this.committed}]`);
    }
    this.applied = i;
  }

  hasPendingSnapshot(): boolean {
    return this.unstableSnap !== undefined;
  }

  pendingSnapshot(): Snapshot | undefined {
    return this.unstableSnap;
  }

  unstableEntries(): Entry[] {
    return this.unstableEnts;
  }

  nextCommittedEntries(): Entry[] {
    if (this.unstableSnap) return [];
    const lo = Math.max(this.applied + 1, this.firstIndex());
    if (this.committed + 1 <= lo) return [];
    return this.slice(lo, this.committed + 1, this.maxCommittedSize) ?? [];
  }

  hasNextCommittedEntries(): boolean {
    if (this.unstableSnap) return false;
    return this.committed > Math.max(this.applied, this.firstIndex() - 1);
  }

  /** The driver persisted entries up to (i, t). */
  stableTo(i: number, t: number): void {
    const u = this.unstableEnts;
    if (u.length === 0 || i < this.offset) return;
    const e = u[i - this.offset];
    if (e === undefined || e.term !== t) return;
    this.unstableEnts = u.slice(i + 1 - this.offset);
    this.offset = i + 1;
  }

  stableSnapTo(i: number): void {
    if (this.unstableSnap && this.unstableSnap.metadata.index === i) this.unstableSnap = undefined;
  }

  /** Installs a received snapshot: the log becomes empty after it. */
  restore(s: Snapshot): void {
    this.committed = s.metadata.index;
    this.offset = s.metadata.index + 1;
    this.unstableEnts = [];
    this.unstableSnap = s;
  }

  /** The latest snapshot, received or stored. */
  snapshot(): Snapshot {
    return this.unstableSnap ?? this.storage.snapshot();
  }
}
