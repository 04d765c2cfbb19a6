/**
 * What the units of a replica (replica.ts: lifecycle and wiring; group-commit.ts, apply.ts,
 * snapshots.ts) share: one `ReplicaState` object, passed to each of them, and the window of
 * marks that maps Raft indexes to local positions (lag, snapshot points, compaction cutoffs).
 * Plain data and lookups; no I/O, no timers.
 */
import type { PlexusError } from '../core/errors.js';
import type { HaMember } from './config.js';
import type { Mark } from './entries.js';

const POSITION_WINDOW = 65_536;

/** (raft index, last position, batch id, epoch, frames seen) of recent frames, ascending. */
export class PositionWindow {
  private readonly marks: Mark[] = [];

  /** Forgets everything (an installed snapshot starts the window over). */
  clear(): void {
    this.marks.length = 0;
  }

  remember(index: number, lastPosition: number, batchId: Uint8Array, epoch: bigint, framesSeen: number): void {
    this.forgetFrom(index);
    const p = this.marks;
    p.push([index, lastPosition, batchId, epoch, framesSeen]);
    // Trimmed in steps of 4,096, not one mark per entry (a shift of the whole window each time).
    if (p.length > POSITION_WINDOW + 4096) p.splice(0, p.length - POSITION_WINDOW);
  }

  /**
   * Forgets every mark at Raft index `index` or above. The apply path calls it for each
   * committed entry before it remembers anything of it: a leader remembers its proposals
   * when it makes them, and one that a later leader's entries replaced must not outlive the
   * committed entry at its index (docs/replication.md, "Marks and snapshot points").
   */
  forgetFrom(index: number): void {
    const p = this.marks;
    while (p.length > 0 && (p[p.length - 1] as Mark)[0] >= index) p.pop();
  }

  /** The last frame at or below Raft index `index`, when the window still holds one. */
  markAt(index: number): Mark | undefined {
    return this.lastMarkWith(0, index);
  }

  /** The newest mark with at most `frames` frames counted up to it, when the window still holds one. */
  markByFrames(frames: number): Mark | undefined {
    return this.lastMarkWith(4, frames);
  }

  /** The last position of the frames up to Raft index `index` (as far as the window knows). */
  positionAt(index: number): number {
    const m = this.markAt(index);
    if (m) return m[1];
    const oldest = this.marks[0];
    return oldest ? oldest[1] - 1 : 0;
  }

  /** The newest mark whose field `field` (ascending along the window) is at most `bound`. */
  private lastMarkWith(field: 0 | 4, bound: number): Mark | undefined {
    const p = this.marks;
    let lo = 0;
    let hi = p.length - 1;
    let best = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (((p[mid] as Mark)[field] as number) <= bound) {
        best = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return best >= 0 ? p[best] : undefined;
  }
}

/** The state one member's units read and move forward. */
export class ReplicaState {
  /** The members known here, by id (configuration, membership records, snapshots). */
  readonly members = new Map<number, HaMember>();
  readonly positions = new PositionWindow();
  /** The last Raft index applied here (the applied watermark). */
  raftApplied = 0;
  /** The last position counting this leader's proposals not applied yet (compare-and-set). */
  projectedLast = 0;
  /** The local log's last position counting appends issued by the apply path and not yet acknowledged. */
  localTail = 0;
  /** Frames applied or skipped as duplicates since open: what snapshots are counted in. */
  framesSeen = 0;
  /** Positions below this one may be dropped from local logs: agreed through Raft (compaction records). */
  compactBelow = 1;
  /** The last position of the newest Raft snapshot. */
  snapshotPosition = 0;
  /**
   * While a snapshot is installed and the local log lacks records below it, the member sends
   * no Raft message: to the others it looks down, so it neither acknowledges the snapshot nor
   * votes nor leads before it holds every record, and the leader does not count it as having
   * those records when it agrees a compaction cutoff.
   */
  gated = false;
  /** Why the member stopped, once it did. */
  failure: PlexusError | undefined;
  closed = false;

  /** Remembers a frame at Raft index `index`, counted with the frames seen so far. */
  remember(index: number, lastPosition: number, batchId: Uint8Array, epoch: bigint): void {
    this.positions.remember(index, lastPosition, batchId, epoch, this.framesSeen);
  }

  /** The member stopped or closed: nothing new may start. */
  get stopped(): boolean {
    return this.closed || this.failure !== undefined;
  }
}

/** How the units of a replica stop it and tell its listeners (replica.ts implements them). */
export interface ReplicaSignals {
  /** Records the member's first failure (it stops) and returns `err`. */
  fail(err: PlexusError): PlexusError;
  /** Throws STOPPED when the member stopped or closed. */
  checkOpen(): void;
}
