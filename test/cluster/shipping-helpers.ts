/**
 * Shared by the journal-shipping tests (test/cluster/shipping*.test.ts): a source journal of
 * mixed epochs, reading a whole log, comparing two logs record by record, and a log with slow
 * appends (a slow disk).
 */
import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import { openLog } from '../../ts/storage/index.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from '../../ts/storage/types.js';

const KIB = 1024;

/** A journal of `count` records of `size` bytes in batches of 8: epochs 3, then none, then 4. */
export async function journal(dir: string, count: number, size: number): Promise<LogStorage> {
  const log = await openLog(dir, { fsync: 'batch' });
  for (let i = 0; i < count; i += 8) {
    const n = Math.min(8, count - i);
    const payloads = Array.from({ length: n }, (_, k) => randomBytes(size - ((i + k) % 7)));
    const third = Math.floor((i / count) * 3);
    await log.append(payloads, third === 0 ? { epoch: 3n } : third === 1 ? {} : { epoch: 4n });
  }
  return log;
}

/** Every record of `log`, page by page. */
export async function all(log: LogStorage): Promise<LogRecord[]> {
  const out: LogRecord[] = [];
  let p = log.first === 0n ? 1n : log.first;
  while (p <= log.last) {
    const page = await log.read(p, { maxBytes: 1024 * KIB });
    out.push(...page);
    p = (page[page.length - 1] as LogRecord).position + 1n;
  }
  return out;
}

/** The first `upTo` records of `a` and `b` are the same records: position, epoch, batch id, payload. */
export async function sameRecords(a: LogStorage, b: LogStorage, upTo: bigint): Promise<void> {
  const ra = (await all(a)).filter((r) => r.position <= upTo);
  const rb = await all(b);
  expect(rb.length).toBe(Number(upTo));
  for (let i = 0; i < rb.length; i++) {
    const x = ra[i] as LogRecord;
    const y = rb[i] as LogRecord;
    if (
      x.position !== y.position ||
      x.epoch !== y.epoch ||
      !Buffer.from(x.batchId).equals(y.batchId) ||
      !Buffer.from(x.payload).equals(y.payload)
    ) {
      throw new Error(`record ${i + 1} differs`);
    }
  }
}

/** A log whose appends wait `delayMs` first (a slow disk), calling `after` once each is durable. */
export class SlowLog implements LogStorage {
  constructor(
    readonly inner: LogStorage,
    private readonly delayMs: number,
    private readonly after: (log: LogStorage) => void = () => {},
  ) {}
  get first(): bigint {
    return this.inner.first;
  }
  get last(): bigint {
    return this.inner.last;
  }
  get highestEpoch(): bigint {
    return this.inner.highestEpoch;
  }
  async append(payloads: readonly Uint8Array[], opts?: AppendOptions): Promise<AppendResult> {
    await new Promise((r) => setTimeout(r, this.delayMs));
    const res = await this.inner.append(payloads, opts);
    this.after(this.inner);
    return res;
  }
  read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.inner.read(from, opts);
  }
  readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.inner.readBackward(from, opts);
  }
  compactBefore(position: bigint): Promise<void> {
    return this.inner.compactBefore(position);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}
