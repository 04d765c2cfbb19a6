/**
 * Walks one segment file record by record, checking every CRC and the rules that tie
 * records together (positions one apart, batches whole and in order), and builds the
 * segment's offset index on the way. It stops at the first record it cannot accept and
 * says why; whether that is a torn tail or damage is decided by the caller
 * (ts/storage/recovery.ts), with `findRecordAfter` telling whether an intact record follows.
 */
import type { FileHandle } from 'node:fs/promises';
import { readAt, WindowReader } from './files.js';
import {
  decodeRecordHeader,
  decodeSegmentHeader,
  FLAG_BATCH_END,
  KNOWN_FLAGS,
  MAX_RECORD_BYTES,
  RECORD_HEADER_BYTES,
  readU64,
  recordCrc,
  SEGMENT_HEADER_BYTES,
} from './format.js';
import { Segment } from './segment.js';

/**
 * Why a record was not accepted. `cut`, `bad-length` and `bad-crc` are what an interrupted
 * write leaves (they can be a torn tail); the others are records whose CRC is right but
 * whose content breaks the log's rules, which only damage or a foreign file explains.
 */
export type StopReason = 'cut' | 'bad-length' | 'bad-crc' | 'bad-position' | 'bad-flags' | 'bad-batch' | 'bad-epoch';

export const TEARABLE: ReadonlySet<StopReason> = new Set(['cut', 'bad-length', 'bad-crc']);

/**
 * Whether the first record not accepted at the end of the last segment, with no intact
 * record after it, is a torn tail: a write the process or the machine did not finish, so a
 * write that was never acknowledged. That is a record cut short by the end of the file (a
 * header cut, or a length that runs past the end) or a header of zeros (bytes the file was
 * extended by but never written). A record that lies whole in the file but fails its CRC
 * is not: a group is acknowledged only once its write returned durable, so such a record
 * can be an acknowledged one, damaged since (docs/storage.md, "Recovery").
 */
export function isTornTail(stop: NonNullable<SegmentScan['stop']>, size: number): boolean {
  if (stop.reason === 'cut') return true;
  if (stop.reason === 'bad-length') return stop.end === undefined || stop.end > size;
  return stop.reason === 'bad-crc' && stop.zeroed === true;
}

export interface ScannedRecord {
  readonly offset: number;
  readonly position: number;
  readonly flags: number;
  readonly crc: number;
}

export interface SegmentScan {
  readonly segment: Segment;
  readonly size: number;
  /** The first record not accepted, if any; everything from `offset` on is not part of the log. */
  readonly stop?: {
    readonly offset: number;
    readonly reason: StopReason;
    readonly detail: string;
    /** Where the record would end by its header's length (`bad-length`, `bad-crc`); absent when the header is cut. */
    readonly end?: number;
    /** `bad-crc` on a header of 48 zero bytes: no record was ever written there. */
    readonly zeroed?: boolean;
  };
  /** The last accepted record. */
  readonly lastRecord?: ScannedRecord;
  /** The first record of the batch `lastRecord` belongs to, and the record count before it. */
  readonly lastBatchStart?: { readonly offset: number; readonly count: number };
}

export type HeaderCheck = { base: number } | { reason: string };

export async function readSegmentHeader(fh: FileHandle): Promise<HeaderCheck> {
  return decodeSegmentHeader(await readAt(fh, 0, SEGMENT_HEADER_BYTES));
}

/** Scans the records of a segment whose header has been checked. */
export async function scanSegment(
  fh: FileHandle,
  size: number,
  base: number,
  indexEvery: number,
): Promise<SegmentScan> {
  const segment = new Segment(base, indexEvery);
  const reader = new WindowReader(fh, size, 1 << 20);
  let off = SEGMENT_HEADER_BYTES;
  let last: ScannedRecord | undefined;
  let lastBatchStart: { offset: number; count: number } | undefined;
  let prevBatchId: Buffer | undefined;
  let prevIndex = 0;
  let prevEpoch = 0n;
  const stopAt = (reason: StopReason, detail: string, end?: number, zeroed?: boolean): SegmentScan => ({
    segment,
    size,
    stop: { offset: off, reason, detail, ...(end === undefined ? {} : { end }), ...(zeroed ? { zeroed } : {}) },
    ...(last ? { lastRecord: last } : {}),
    ...(lastBatchStart ? { lastBatchStart } : {}),
  });

  while (off < size) {
    const head = await reader.get(off, RECORD_HEADER_BYTES);
    if (!head) return stopAt('cut', `only ${size - off} bytes left, less than a record header`);
    const h = decodeRecordHeader(head.buf, head.at);
    const end = off + RECORD_HEADER_BYTES + h.length;
    if (h.length > MAX_RECORD_BYTES) return stopAt('bad-length', `length ${h.length} is above the largest record`, end);
    const whole = await reader.get(off, RECORD_HEADER_BYTES + h.length);
    if (!whole) return stopAt('cut', `the record of ${h.length} payload bytes runs past the end of the file`);
    if (recordCrc(whole.buf, whole.at, h.length) !== h.crc) {
      // A zeroed header is no record: bytes the file was extended by but never written.
      const zeroed = whole.buf.subarray(whole.at, whole.at + RECORD_HEADER_BYTES).every((b) => b === 0);
      return stopAt('bad-crc', zeroed ? 'a record header of zeros' : 'the CRC-32C does not match', end, zeroed);
    }
    const expected = base + segment.count;
    if (h.position !== expected) {
      return stopAt('bad-position', `position ${h.position < 0 ? 'above 2^53' : h.position}, expected ${expected}`);
    }
    if ((h.flags & ~KNOWN_FLAGS) !== 0 || h.reserved !== 0) {
      return stopAt('bad-flags', `unknown flags 0x${h.flags.toString(16)} or reserved bits set`);
    }
    const batchId = whole.buf.subarray(whole.at + 24, whole.at + 40);
    if (h.index === 0) {
      lastBatchStart = { offset: off, count: segment.count };
    } else {
      // A record inside a batch follows the record before it in the same batch.
      const follows =
        last !== undefined &&
        (last.flags & FLAG_BATCH_END) === 0 &&
        prevIndex + 1 === h.index &&
        prevBatchId?.equals(batchId) === true;
      if (!follows) return stopAt('bad-batch', `record ${h.index} of a batch does not follow record ${h.index - 1}`);
      if (h.epoch !== prevEpoch) return stopAt('bad-epoch', 'the epoch changes inside a batch');
    }
    segment.push(off, RECORD_HEADER_BYTES + h.length, h.epoch);
    last = { offset: off, position: h.position, flags: h.flags, crc: h.crc };
    prevBatchId = Buffer.from(batchId);
    prevIndex = h.index;
    prevEpoch = h.epoch;
    off += RECORD_HEADER_BYTES + h.length;
  }
  return {
    segment,
    size,
    ...(last ? { lastRecord: last } : {}),
    ...(lastBatchStart ? { lastBatchStart } : {}),
  };
}

/**
 * Whether an intact record (right CRC, a position at or after `fromPosition`) starts
 * anywhere in `(after, size)`. After a record that cannot be read, this is what tells a
 * torn tail (nothing intact follows) from damage in the middle of the log.
 */
export async function findRecordAfter(
  fh: FileHandle,
  size: number,
  after: number,
  fromPosition: number,
): Promise<number | undefined> {
  const maxPosition = fromPosition + Math.ceil((size - after) / RECORD_HEADER_BYTES);
  const chunk = 1 << 20;
  for (let start = after + 1; start + RECORD_HEADER_BYTES <= size; start += chunk) {
    const buf = await readAt(fh, start, Math.min(chunk + RECORD_HEADER_BYTES, size - start));
    const limit = Math.min(chunk, buf.length - RECORD_HEADER_BYTES + 1);
    for (let i = 0; i < limit; i++) {
      const pos = readU64(buf, i + 8);
      if (pos < fromPosition || pos > maxPosition) continue;
      const length = buf.readUInt32LE(i);
      const at = start + i;
      if (length > MAX_RECORD_BYTES || at + RECORD_HEADER_BYTES + length > size) continue;
      const rec = await readAt(fh, at, RECORD_HEADER_BYTES + length);
      if (recordCrc(rec, 0, length) === rec.readUInt32LE(4)) return at;
    }
  }
  return undefined;
}
