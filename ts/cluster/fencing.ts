/**
 * Fencing on the receive side. Frames carry the `(shard, epoch)` of the lease their sender
 * held; `EpochGate` knows the newest epoch of every shard (from membership views and from
 * frames it accepted) and calls a frame with a lower epoch stale. `DeadLetters` keeps such
 * frames in a log (the seed's dead-letter graph), queryable with `list()`.
 */

import { join } from 'node:path';
import type { ClusterFrame } from '../codec/cluster-frame.js';
import { openLog } from '../storage/index.js';
import type { LogStorage } from '../storage/types.js';
import type { View } from './types.js';

export class EpochGate {
  private readonly newest = new Map<number, bigint>();

  /** Takes every lease epoch of a view. */
  observe(view: View): void {
    for (const l of view.leases) this.raise(l.shard, l.epoch);
  }

  /** Records that `epoch` is current for `shard` (never lowers it). */
  raise(shard: number, epoch: bigint): void {
    const e = this.newest.get(shard);
    if (e === undefined || epoch > e) this.newest.set(shard, epoch);
  }

  /** The newest epoch known for `shard` (0 when none). */
  epochOf(shard: number): bigint {
    return this.newest.get(shard) ?? 0n;
  }

  /** Whether a frame of `(shard, epoch)` is current; accepting one raises the shard's epoch. */
  admit(shard: number, epoch: bigint): boolean {
    if (epoch < this.epochOf(shard)) return false;
    this.raise(shard, epoch);
    return true;
  }
}

/** One dead letter as stored. */
export interface DeadLetter {
  readonly reason: 'stale-epoch' | 'hop-limit' | 'refused';
  /** The node that sent the frame. */
  readonly from: string;
  readonly shard: number;
  readonly epoch: string;
  /** The newest epoch the receiver knew for the shard. */
  readonly current: string;
  /** Message id, hex. */
  readonly messageId: string;
  readonly sender: string;
  readonly target: string;
  readonly payloadBytes: number;
  /** Wall-clock time of the drop, ISO 8601. */
  readonly at: string;
}

/** The dead-letter log's directory inside a node's data directory. */
export const DEAD_LETTER_LOG = 'dead-letter';

const enc = new TextEncoder();
const dec = new TextDecoder();

/** The dead-letter log: one JSON record per dropped frame, in a LogStorage (FileLog or MemoryLog). */
export class DeadLetters {
  constructor(private readonly log: LogStorage) {}

  async record(
    reason: DeadLetter['reason'],
    from: string,
    frame: ClusterFrame,
    current: bigint,
    now = new Date(),
  ): Promise<DeadLetter> {
    const d: DeadLetter = {
      reason,
      from,
      shard: frame.shard,
      epoch: `${frame.epoch}`,
      current: `${current}`,
      messageId: Buffer.from(frame.messageId).toString('hex'),
      sender: frame.sender,
      target: frame.target,
      payloadBytes: frame.payload.length,
      at: now.toISOString(),
    };
    await this.log.append([enc.encode(JSON.stringify(d))]);
    return d;
  }

  /** Every dead letter from position `from` (default all). */
  async list(from = 1n): Promise<DeadLetter[]> {
    const out: DeadLetter[] = [];
    let at = from;
    for (;;) {
      const recs = await this.log.read(at, { maxCount: 1024 });
      if (recs.length === 0) return out;
      for (const r of recs) out.push(JSON.parse(dec.decode(r.payload)) as DeadLetter);
      at = recs[recs.length - 1]!.position + 1n;
    }
  }
}

/**
 * Every dead letter of the node whose data directory is `dataDir` (for a CLI listing; the
 * node must not be running, since the log is opened exclusively).
 */
export async function listDeadLetters(dataDir: string): Promise<DeadLetter[]> {
  const log = await openLog(join(dataDir, DEAD_LETTER_LOG));
  try {
    return await new DeadLetters(log).list();
  } finally {
    await log.close();
  }
}
