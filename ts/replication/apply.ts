/**
 * The apply path of a replica: committed Raft entries, in Raft order, into the local log.
 * EVFR frames that continue the local log are appended with their batch id and their epoch as
 * fencing epoch; a frame already there (a replay after a restart) is skipped; anything else
 * stops the member with PLX_REPLICATION_DIVERGED. Membership and compaction records go to
 * their owners. Moves the applied watermark (`ReplicaState.raftApplied`) once a batch of
 * entries is in the local log.
 */
import { decodeEvfr, type EvfrFrame } from '../codec/evfr.js';
import { isCompactMarker, isMeta } from '../codec/replication-entries.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import type { Entry } from '../raft/types.js';
import type { FileLog } from '../storage/file-log.js';
import type { HaMember } from './config.js';
import { decodeMeta, hex, sameBytes } from './entries.js';
import { ReplicationErrorCode, replicationError } from './errors.js';
import type { ReplicaSignals, ReplicaState } from './replica-state.js';
import { type AppliedBatch, FrameBatch } from './types.js';

export interface ApplyDeps extends ReplicaSignals {
  readonly state: ReplicaState;
  readonly local: Pick<FileLog, 'append' | 'read' | 'first'>;
  /** A snapshot install in progress: applying waits for it. */
  installing(): Promise<void> | undefined;
  /** A committed configuration change. */
  confChange(e: Entry): void;
  /** A committed membership record (the member's addresses). */
  memberRecord(m: HaMember): void;
  /** A committed compaction cutoff, higher than the one before. */
  compactionAgreed(below: bigint): void;
  /** A batch is in the local log: tell the listeners. */
  notify(batch: AppliedBatch): void;
  /** After each applied batch of entries (leadership readiness, snapshots). */
  applied(): void;
}

export class ApplyPath {
  /** Frames appended to the local log, and frames skipped as replays, since open. */
  appliedFrames = 0;
  duplicates = 0;
  /** Bytes of entries applied (all time). */
  appliedBytes = 0;

  constructor(private readonly deps: ApplyDeps) {}

  /**
   * Applies committed entries in order. The local appends of one call are issued without
   * waiting for each other (the log keeps call order and shares one fsync among them) and
   * awaited together before the driver acknowledges anything of this batch.
   */
  async apply(entries: readonly Entry[]): Promise<void> {
    const { state } = this.deps;
    const installing = this.deps.installing();
    if (installing) await installing;
    const pending: Promise<AppliedBatch>[] = [];
    const settle = async () => {
      const done = await Promise.all(pending.splice(0));
      for (const b of done) this.deps.notify(b);
    };
    try {
      for (const e of entries) {
        // A mark this member made for a proposal at e.index (as a leader whose entry a later
        // leader replaced) says nothing of the committed entry: it goes before e is applied.
        state.positions.forgetFrom(e.index);
        if (e.type === 'conf-change') this.deps.confChange(e);
        else if (e.data.length === 0) {
          // a new leader's first entry
        } else if (isCompactMarker(e.data)) {
          const below = Number(new DataView(e.data.buffer, e.data.byteOffset, 12).getBigUint64(4, true));
          if (Number.isSafeInteger(below) && below > state.compactBelow) {
            state.compactBelow = below;
            this.deps.compactionAgreed(BigInt(below));
          }
        } else if (isMeta(e.data)) {
          let m: HaMember;
          try {
            m = decodeMeta(e.data);
          } catch (err) {
            throw this.deps.fail(
              replicationError(
                ReplicationErrorCode.DIVERGED,
                `committed entry ${e.index} is a membership record that does not decode`,
                {
                  index: e.index,
                  reason: String(err),
                },
              ),
            );
          }
          this.deps.memberRecord(m);
        } else {
          for (const frame of this.decodeFrames(e)) {
            if (frame.first === state.localTail + 1) pending.push(this.appendLocal(e, frame));
            else {
              await settle();
              await this.skipDuplicate(e, frame);
            }
          }
        }
      }
      await settle();
    } catch (err) {
      // Let every issued append finish (or fail) before the driver stops the member.
      await Promise.allSettled(pending);
      throw err;
    }
    const lastEntry = entries[entries.length - 1];
    if (lastEntry) state.raftApplied = lastEntry.index;
    for (const e of entries) this.appliedBytes += e.data.length;
    this.deps.applied();
  }

  /** The EVFR frames of a committed entry (one per append it carries, laid end to end). */
  private decodeFrames(e: Entry): EvfrFrame[] {
    try {
      // The body checksums are not recomputed: an entry's bytes were checked on the way in,
      // by the Raft message's checksum (received) or the journal record's (read back from
      // disk), or this leader encoded them and still holds them. Headers are still checked.
      const frames: EvfrFrame[] = [];
      const data = e.data;
      let at = 0;
      while (at < data.length) {
        const d = decodeEvfr(at === 0 ? data : data.subarray(at), { bodyChecked: true });
        if (d.kind !== 'frame')
          throw new PlexusError('PLX_EVFR_BAD_FRAME', 'the frame is incomplete', { reason: 'length' });
        frames.push(d.frame);
        at += d.consumed;
      }
      return frames;
    } catch (err) {
      throw this.deps.fail(
        replicationError(
          ReplicationErrorCode.DIVERGED,
          `committed entry ${e.index} is not a valid EVFR frame: ${String(err)}`,
          {
            index: e.index,
          },
        ),
      );
    }
  }

  /** Appends a frame that continues the local log, with its batch id and its epoch as fencing epoch. */
  private appendLocal(e: Entry, frame: EvfrFrame): Promise<AppliedBatch> {
    const { state } = this.deps;
    const expectedLast = BigInt(state.localTail);
    state.localTail = frame.last;
    const p = this.deps.local.append(frame.records, { batchId: frame.batchId, expectedLast, epoch: frame.epoch }).then(
      (r): AppliedBatch => {
        this.appliedFrames++;
        state.framesSeen++;
        state.remember(e.index, frame.last, frame.batchId, frame.epoch);
        return new FrameBatch(e.index, r.first, r.last, frame.batchId, frame.epoch, frame.records);
      },
      (err: unknown) => {
        // A failed local write (disk full, I/O error, fencing): stop replicating here.
        const code = isPlexusError(err) ? err.code : String(err);
        throw this.deps.fail(
          replicationError(
            ReplicationErrorCode.STOPPED,
            `applying entry ${e.index} (positions ${frame.first}..${frame.last}) to the local log failed: ${code}; remove the cause and restart the member`,
            { index: e.index, cause: code },
            err,
          ),
        );
      },
    );
    p.catch(() => undefined); // observed by apply; never unhandled
    return p;
  }

  /** A frame that does not continue the local log: a replay of a batch already there, or a divergence. */
  private async skipDuplicate(e: Entry, frame: EvfrFrame): Promise<void> {
    const { state } = this.deps;
    const last = state.localTail;
    if (frame.last <= last && (await this.isDuplicate(frame))) {
      this.duplicates++;
      state.framesSeen++;
      state.remember(e.index, frame.last, frame.batchId, frame.epoch);
      return;
    }
    throw this.deps.fail(
      replicationError(
        ReplicationErrorCode.DIVERGED,
        `committed entry ${e.index} carries positions ${frame.first}..${frame.last} (batch ${hex(frame.batchId)}) but the local log ends at ${last}${frame.first > last + 1 ? ' (a gap)' : ' with other records there'}: the replicas diverged; the member stops`,
        { index: e.index, first: frame.first, last: frame.last, localLast: last, batchId: hex(frame.batchId) },
      ),
    );
  }

  /** The frame's batch is already in the local log at its positions (or compacted away below it). */
  private async isDuplicate(frame: EvfrFrame): Promise<boolean> {
    const local = this.deps.local;
    const localFirst = Number(local.first);
    if (localFirst === 0 || frame.last < localFirst) return true; // compacted: applied long ago
    for (const p of [frame.first, frame.last]) {
      if (p < localFirst) continue;
      const [rec] = await local.read(BigInt(p), { maxCount: 1, maxBytes: 1 });
      if (!rec || rec.position !== BigInt(p) || !sameBytes(rec.batchId, frame.batchId)) return false;
    }
    return true;
  }
}
