/**
 * The RaftStorage seam: what the core reads of the persisted log, hard state and snapshot.
 * Reads are synchronous (the core never waits); the driver writes to storage while handling a
 * `Ready` (persist first) and tells the core with `advance()`. `MemoryRaftStorage` is the
 * in-memory implementation; every implementation passes test/compliance/raft-storage.suite.ts.
 *
 * The log holds entries `firstIndex() .. lastIndex()`; the entry at `firstIndex() - 1` is the
 * last one covered by the snapshot, whose term `term()` still answers.
 */
import { RaftErrorCode, raftError } from './errors.js';
import type { ConfState, Entry, HardState, Snapshot } from './types.js';

export interface RaftInitialState {
  readonly hardState: HardState;
  readonly confState: ConfState;
}

export interface RaftStorage {
  initialState(): RaftInitialState;
  /** Entries in [lo, hi), stopping before the entry that would take the data bytes above `maxBytes` (one entry at least). */
  entries(lo: number, hi: number, maxBytes?: number): Entry[];
  /** The term of entry `i`, for i in [firstIndex() - 1, lastIndex()]; throws PLX_RAFT_COMPACTED / PLX_RAFT_UNAVAILABLE outside. */
  term(i: number): number;
  firstIndex(): number;
  lastIndex(): number;
  /** The latest snapshot. */
  snapshot(): Snapshot;
}

/** The writes a driver makes while handling a Ready (and for compaction). */
export interface RaftStorageWriter {
  /** Appends entries, replacing stored entries from `entries[0].index` on; entries below firstIndex are skipped. */
  append(entries: readonly Entry[]): void;
  setHardState(hs: HardState): void;
  /** Replaces the whole log by a received snapshot. */
  applySnapshot(snap: Snapshot): void;
  /** Stores a snapshot the application made (RaftNode.compact) and drops the entries it covers. */
  compact(snap: Snapshot): void;
}

const EMPTY_CONF: ConfState = { voters: [], learners: [] };

export function entrySize(e: Entry): number {
  return e.data.length;
}

/** Cuts `ents` so their data stays within maxBytes, keeping at least one entry. */
export function limitSize(ents: Entry[], maxBytes: number): Entry[] {
  if (ents.length === 0) return ents;
  let size = entrySize(ents[0]!);
  let n = 1;
  for (; n < ents.length; n++) {
    size += entrySize(ents[n]!);
    if (size > maxBytes) break;
  }
  return n === ents.length ? ents : ents.slice(0, n);
}

export class MemoryRaftStorage implements RaftStorage, RaftStorageWriter {
  private hard: HardState = { term: 0, vote: 0, commit: 0 };
  private snap: Snapshot = { metadata: { index: 0, term: 0, confState: EMPTY_CONF }, data: new Uint8Array(0) };
  /** ents[0] is a dummy holding the snapshot's index and term. */
  private ents: Entry[] = [{ index: 0, term: 0, type: 'normal', data: new Uint8Array(0) }];

  /**
   * A storage for a founding member of a new cluster: a snapshot at index 1, term 1 with the
   * founding configuration and the application's initial state. Every founding member starts
   * from the same one; nodes added later start from an empty storage and receive a snapshot.
   */
  static bootstrap(confState: ConfState, data: Uint8Array = new Uint8Array(0)): MemoryRaftStorage {
    const s = new MemoryRaftStorage();
    s.applySnapshot({ metadata: { index: 1, term: 1, confState }, data });
    s.setHardState({ term: 1, vote: 0, commit: 1 });
    return s;
  }

  initialState(): RaftInitialState {
    return { hardState: this.hard, confState: this.snap.metadata.confState };
  }

  firstIndex(): number {
    return this.ents[0]!.index + 1;
  }

  lastIndex(): number {
    return this.ents[0]!.index + this.ents.length - 1;
  }

  term(i: number): number {
    const offset = this.ents[0]!.index;
    if (i < offset) {
      throw raftError(RaftErrorCode.COMPACTED, `entry ${i} is compacted (first is ${offset + 1})`, { index: i });
    }
    const e = this.ents[i - offset];
    if (e === undefined) {
      throw raftError(RaftErrorCode.UNAVAILABLE, `entry ${i} is past the last index ${this.lastIndex()}`, { index: i });
    }
    return e.term;
  }

  entries(lo: number, hi: number, maxBytes = Number.POSITIVE_INFINITY): Entry[] {
    const offset = this.ents[0]!.index;
    if (lo <= offset) {
      throw raftError(RaftErrorCode.COMPACTED, `entry ${lo} is compacted (first is ${offset + 1})`, { index: lo });
    }
    if (hi > this.lastIndex() + 1 || lo > hi) {
      throw raftError(RaftErrorCode.UNAVAILABLE, `entries [${lo}, ${hi}) are past the last index ${this.lastIndex()}`, {
        lo,
        hi,
      });
    }
    return limitSize(this.ents.slice(lo - offset, hi - offset), maxBytes);
  }

  snapshot(): Snapshot {
    return this.snap;
  }

  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    const first = this.firstIndex();
    const last = entries[entries.length - 1]!.index;
    if (last < first) return;
    const fresh = entries[0]!.index < first ? entries.slice(first - entries[0]!.index) : entries;
    const at = fresh[0]!.index;
    if (at > this.lastIndex() + 1) {
      throw raftError(RaftErrorCode.UNAVAILABLE, `append at ${at} leaves a gap after ${this.lastIndex()}`, {
        index: at,
      });
    }
    const offset = this.ents[0]!.index;
    this.ents = this.ents.slice(0, at - offset).concat(fresh);
  }

  setHardState(hs: HardState): void {
    this.hard = hs;
  }

  applySnapshot(snap: Snapshot): void {
    if (snap.metadata.index < this.snap.metadata.index) {
      throw raftError(
        RaftErrorCode.SNAPSHOT_OUT_OF_DATE,
        `snapshot at ${snap.metadata.index} is older than the stored one at ${this.snap.metadata.index}`,
      );
    }
    this.snap = snap;
    this.ents = [{ index: snap.metadata.index, term: snap.metadata.term, type: 'normal', data: new Uint8Array(0) }];
  }

  /** Sets the snapshot and drops every entry, whatever the stored snapshot was (journal replay). */
  reset(snap: Snapshot): void {
    this.snap = snap;
    this.ents = [{ index: snap.metadata.index, term: snap.metadata.term, type: 'normal', data: new Uint8Array(0) }];
  }

  compact(snap: Snapshot): void {
    const i = snap.metadata.index;
    if (i <= this.ents[0]!.index) {
      throw raftError(RaftErrorCode.SNAPSHOT_OUT_OF_DATE, `entry ${i} is already compacted`, { index: i });
    }
    if (i > this.lastIndex()) {
      throw raftError(RaftErrorCode.UNAVAILABLE, `cannot compact to ${i}: last index is ${this.lastIndex()}`, {
        index: i,
      });
    }
    const offset = this.ents[0]!.index;
    const rest = this.ents.slice(i - offset + 1);
    this.snap = snap;
    this.ents = [{ index: i, term: snap.metadata.term, type: 'normal', data: new Uint8Array(0) }, ...rest];
  }
}
