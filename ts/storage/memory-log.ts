/**
 * The log in memory: the same positions, batches, compare-and-set, fencing, truncation and
 * refusals as FileLog, with nothing on disk. Its state lives in a `MemoryLogState` that
 * outlives the log, so closing a MemoryLog and making a new one on the same state is a
 * restart that kept everything (an appended record is "durable" as soon as the append
 * returns). Compaction drops exactly the records below the position.
 */
import { checkAppend, checkFramed, checkPosition, checkReadOptions, ReadBudget } from './checks.js';
import { closedError, compactedError, conflictError, fencedError } from './errors.js';
import { RECORD_HEADER_BYTES } from './format.js';
import type { AppendOptions, AppendResult, FramedBatch, LogRecord, ReadOptions, TruncatableLog } from './types.js';

interface Stored {
  readonly batchId: Uint8Array;
  readonly epoch: bigint;
  readonly payload: Uint8Array;
}

/** What a MemoryLog keeps across close and reopen. */
export class MemoryLogState {
  /** Records from position `start` on. */
  records: Stored[] = [];
  /** Position of `records[0]`; `last + 1` when there are none. */
  start = 1;
  highestEpoch = 0n;

  get last(): number {
    return this.start + this.records.length - 1;
  }
}

export class MemoryLog implements TruncatableLog {
  private closed = false;

  constructor(private readonly state: MemoryLogState = new MemoryLogState()) {}

  get first(): bigint {
    return this.state.records.length > 0 ? BigInt(this.state.start) : 0n;
  }

  get last(): bigint {
    return BigInt(this.state.last);
  }

  get highestEpoch(): bigint {
    return this.state.highestEpoch;
  }

  async append(payloads: readonly Uint8Array[], opts?: AppendOptions): Promise<AppendResult> {
    this.checkOpen();
    const a = checkAppend(payloads, opts);
    const s = this.state;
    if (a.epoch !== undefined && a.epoch < s.highestEpoch) throw fencedError(a.epoch, s.highestEpoch);
    if (a.expectedLast !== undefined && a.expectedLast !== s.last) {
      throw conflictError(BigInt(a.expectedLast), BigInt(s.last));
    }
    const first = s.last + 1;
    const epoch = a.epoch ?? 0n;
    for (const p of a.payloads) s.records.push({ batchId: a.batchId, epoch, payload: Uint8Array.from(p) });
    if (epoch > s.highestEpoch) s.highestEpoch = epoch;
    return { first: BigInt(first), last: BigInt(s.last), batchId: Uint8Array.from(a.batchId) };
  }

  /** `append` for a batch laid out in one buffer: its payloads are copied out of their places. */
  async appendFramed(batch: FramedBatch, opts?: AppendOptions): Promise<AppendResult> {
    this.checkOpen();
    const a = checkFramed(batch, opts);
    const payloads: Uint8Array[] = [];
    let off = 0;
    for (const len of a.lengths) {
      payloads.push(a.bytes.subarray(off + RECORD_HEADER_BYTES, off + RECORD_HEADER_BYTES + len));
      off += RECORD_HEADER_BYTES + len;
    }
    return this.append(payloads, opts);
  }

  async read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    this.checkOpen();
    const f = checkPosition(from, 'read from', 1);
    const { maxCount, maxBytes } = checkReadOptions(opts);
    const s = this.state;
    if (f > s.last) return [];
    if (f < s.start) throw compactedError(from, BigInt(s.start));
    const budget = new ReadBudget(maxCount, maxBytes);
    const out: LogRecord[] = [];
    for (let p = f; p <= s.last; p++) {
      const r = s.records[p - s.start] as Stored;
      if (!budget.take(r.payload.length)) break;
      out.push(this.record(p, r));
    }
    return out;
  }

  async readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    this.checkOpen();
    const f = Math.min(checkPosition(from, 'readBackward from', 1), this.state.last);
    const { maxCount, maxBytes } = checkReadOptions(opts);
    const s = this.state;
    if (f === 0) return [];
    if (f < s.start) throw compactedError(BigInt(f), BigInt(s.start));
    const budget = new ReadBudget(maxCount, maxBytes);
    const out: LogRecord[] = [];
    for (let p = f; p >= s.start; p--) {
      const r = s.records[p - s.start] as Stored;
      if (!budget.take(r.payload.length)) break;
      out.push(this.record(p, r));
    }
    return out;
  }

  async truncateAfter(position: bigint): Promise<void> {
    this.checkOpen();
    const p = checkPosition(position, 'truncateAfter', 0);
    const s = this.state;
    if (p >= s.last) return;
    if (p < s.start - 1) throw compactedError(position + 1n, BigInt(s.start));
    s.records.length = p - s.start + 1;
  }

  async compactBefore(position: bigint): Promise<void> {
    this.checkOpen();
    const p = checkPosition(position, 'compactBefore', 0);
    const s = this.state;
    const drop = Math.min(Math.max(p - s.start, 0), s.records.length);
    if (drop === 0) return;
    s.records.splice(0, drop);
    s.start += drop;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
  }

  private record(position: number, r: Stored): LogRecord {
    return {
      position: BigInt(position),
      batchId: Uint8Array.from(r.batchId),
      epoch: r.epoch,
      payload: Uint8Array.from(r.payload),
    };
  }

  private checkOpen(): void {
    if (this.closed) throw closedError('memory');
  }
}
