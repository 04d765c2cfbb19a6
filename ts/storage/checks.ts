/**
 * Argument checks shared by every LogStorage implementation, so they refuse the same
 * input with the same code.
 */
import { getRandomValues } from 'node:crypto';
import { badInput, StorageCode, storageError } from './errors.js';
import {
  BATCH_ID_BYTES,
  MAX_BATCH_BYTES,
  MAX_BATCH_RECORDS,
  MAX_POSITION,
  MAX_RECORD_BYTES,
  RECORD_HEADER_BYTES,
} from './format.js';
import type { AppendOptions, ReadOptions } from './types.js';

const MAX_EPOCH = (1n << 64n) - 1n;
export const DEFAULT_MAX_READ_BYTES = 8 * 1024 * 1024;

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return `a ${(v as object).constructor?.name ?? 'object'}`;
  return `${typeof v} ${String(v)}`;
}

export interface CheckedAppend {
  readonly payloads: readonly Uint8Array[];
  readonly batchId: Uint8Array;
  readonly expectedLast: number | undefined;
  readonly epoch: bigint | undefined;
}

/** Checks an append's arguments; the batch id is copied (or made at random). */
export function checkAppend(payloads: unknown, opts: AppendOptions | undefined): CheckedAppend {
  if (!Array.isArray(payloads))
    throw badInput(`append takes an array of Uint8Array payloads, got ${describe(payloads)}`);
  if (payloads.length === 0) throw badInput('append needs at least one payload');
  if (payloads.length > MAX_BATCH_RECORDS) {
    throw storageError(
      StorageCode.TOO_LARGE,
      `a batch holds at most ${MAX_BATCH_RECORDS} records, got ${payloads.length}`,
      {
        records: payloads.length,
      },
    );
  }
  let total = 0;
  for (let i = 0; i < payloads.length; i++) {
    const p: unknown = payloads[i];
    if (!(p instanceof Uint8Array)) throw badInput(`payload ${i} is ${describe(p)}, not a Uint8Array`, { index: i });
    if (p.length > MAX_RECORD_BYTES) {
      throw storageError(
        StorageCode.TOO_LARGE,
        `payload ${i} is ${p.length} bytes; a record holds at most ${MAX_RECORD_BYTES}`,
        { index: i, bytes: p.length },
      );
    }
    total += RECORD_HEADER_BYTES + p.length;
  }
  if (total > MAX_BATCH_BYTES) {
    throw storageError(
      StorageCode.TOO_LARGE,
      `the batch takes ${total} bytes; a batch takes at most ${MAX_BATCH_BYTES}`,
      {
        bytes: total,
      },
    );
  }
  return { payloads, ...checkAppendOptions(opts) };
}

/** An append's options: the batch id copied (or made at random), the epoch and expectedLast checked. */
function checkAppendOptions(opts: AppendOptions | undefined): Omit<CheckedAppend, 'payloads'> {
  if (opts !== undefined && (typeof opts !== 'object' || opts === null)) {
    throw badInput(`append options must be an object, got ${describe(opts)}`);
  }
  const o = opts ?? {};
  let batchId: Uint8Array;
  if (o.batchId === undefined) {
    batchId = getRandomValues(new Uint8Array(BATCH_ID_BYTES));
  } else if (o.batchId instanceof Uint8Array && o.batchId.length === BATCH_ID_BYTES) {
    batchId = Uint8Array.from(o.batchId);
  } else {
    throw badInput(`batchId must be a Uint8Array of ${BATCH_ID_BYTES} bytes, got ${describe(o.batchId)}`);
  }
  let epoch: bigint | undefined;
  if (o.epoch !== undefined) {
    if (typeof o.epoch !== 'bigint' || o.epoch < 0n || o.epoch > MAX_EPOCH) {
      throw badInput(`epoch must be a bigint from 0 to 2^64 - 1, got ${describe(o.epoch)}`);
    }
    epoch = o.epoch;
  }
  const expectedLast = o.expectedLast === undefined ? undefined : checkPosition(o.expectedLast, 'expectedLast', 0);
  return { batchId, expectedLast, epoch };
}

/** A batch laid out for `appendFramed`, checked: its record count and total size. */
export interface CheckedFramed extends Omit<CheckedAppend, 'payloads'> {
  readonly bytes: Uint8Array;
  /** The caller's lengths when they came as a Uint32Array (read before the call returns), else a checked copy. */
  readonly lengths: readonly number[] | Uint32Array;
}

/**
 * Checks the arguments of `appendFramed`: `bytes` must hold exactly a 48-byte gap and then
 * `lengths[i]` payload bytes for each record, end to end, within the limits of `append`.
 */
export function checkFramed(batch: unknown, opts: AppendOptions | undefined): CheckedFramed {
  if (typeof batch !== 'object' || batch === null) {
    throw badInput(`appendFramed takes { bytes, lengths }, got ${describe(batch)}`);
  }
  const { bytes, lengths } = batch as { bytes?: unknown; lengths?: unknown };
  if (!(bytes instanceof Uint8Array)) throw badInput(`appendFramed: bytes is ${describe(bytes)}, not a Uint8Array`);
  if (!Array.isArray(lengths) && !(lengths instanceof Uint32Array)) {
    throw badInput(
      `appendFramed: lengths must be an array or a Uint32Array of payload lengths, got ${describe(lengths)}`,
    );
  }
  const n = lengths.length;
  if (n === 0) throw badInput('appendFramed needs at least one record');
  if (n > MAX_BATCH_RECORDS) {
    throw storageError(StorageCode.TOO_LARGE, `a batch holds at most ${MAX_BATCH_RECORDS} records, got ${n}`, {
      records: n,
    });
  }
  // A Uint32Array holds whole numbers from 0 only: nothing to check but their size.
  const typed = lengths instanceof Uint32Array;
  const out = typed ? lengths : new Array<number>(n);
  let total = 0;
  for (let i = 0; i < n; i++) {
    // Checked as unknown: an array from a caller may hold anything.
    const len = lengths[i] as number;
    if (!typed && (typeof len !== 'number' || !Number.isSafeInteger(len) || len < 0)) {
      throw badInput(`appendFramed: length ${i} is ${describe(len)}, not a whole number of bytes`, { index: i });
    }
    if (len > MAX_RECORD_BYTES) {
      throw storageError(
        StorageCode.TOO_LARGE,
        `payload ${i} is ${len} bytes; a record holds at most ${MAX_RECORD_BYTES}`,
        { index: i, bytes: len },
      );
    }
    if (!typed) out[i] = len;
    total += RECORD_HEADER_BYTES + len;
  }
  if (total > MAX_BATCH_BYTES) {
    throw storageError(
      StorageCode.TOO_LARGE,
      `the batch takes ${total} bytes; a batch takes at most ${MAX_BATCH_BYTES}`,
      {
        bytes: total,
      },
    );
  }
  if (total !== bytes.length) {
    throw badInput(
      `appendFramed: ${n} records of these lengths take ${total} bytes with their ${RECORD_HEADER_BYTES}-byte headers, but bytes holds ${bytes.length}`,
      { bytes: bytes.length, expected: total },
    );
  }
  return { bytes, lengths: out, ...checkAppendOptions(opts) };
}

/** A position argument as a number (a bigint from `min` to 2^53 - 1). */
export function checkPosition(p: unknown, what: string, min: number): number {
  if (typeof p !== 'bigint') throw badInput(`${what} must be a bigint position, got ${describe(p)}`);
  if (p < BigInt(min) || p > BigInt(MAX_POSITION)) {
    throw storageError(
      StorageCode.BAD_POSITION,
      `${what} ${p} is out of range: positions run from ${min} to 2^53 - 1${min === 1 ? ' (the first record is 1)' : ''}`,
      { position: p },
    );
  }
  return Number(p);
}

export function checkReadOptions(opts: ReadOptions | undefined): { maxCount: number; maxBytes: number } {
  if (opts !== undefined && (typeof opts !== 'object' || opts === null)) {
    throw badInput(`read options must be an object, got ${describe(opts)}`);
  }
  const maxCount = opts?.maxCount ?? Number.POSITIVE_INFINITY;
  const maxBytes = opts?.maxBytes ?? DEFAULT_MAX_READ_BYTES;
  if (!(maxCount === Number.POSITIVE_INFINITY || (Number.isSafeInteger(maxCount) && maxCount >= 1))) {
    throw badInput(`maxCount must be a whole number of at least 1, got ${describe(maxCount)}`);
  }
  if (!(maxBytes === Number.POSITIVE_INFINITY || (Number.isSafeInteger(maxBytes) && maxBytes >= 0))) {
    throw badInput(`maxBytes must be a whole number of at least 0, got ${describe(maxBytes)}`);
  }
  return { maxCount, maxBytes };
}

/**
 * How much a read may still return. The first record is always taken, whatever its size,
 * so that a reader always progresses.
 */
export class ReadBudget {
  count = 0;
  bytes = 0;

  constructor(
    readonly maxCount: number,
    readonly maxBytes: number,
  ) {}

  /** Whether a record of `bytes` payload bytes still fits (and takes it if so). */
  take(bytes: number): boolean {
    if (this.count > 0 && (this.count >= this.maxCount || this.bytes + bytes > this.maxBytes)) return false;
    this.count++;
    this.bytes += bytes;
    return true;
  }

  get full(): boolean {
    return this.count >= this.maxCount;
  }
}
