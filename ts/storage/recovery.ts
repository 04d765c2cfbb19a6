/**
 * Reads a log directory and decides what it holds: the segments and their indexes, the
 * meta file, and every problem, each either repairable (a torn tail, an incomplete last
 * batch, a torn new segment, a missing or stale index) or fatal (damage before the tail).
 * `openLog` applies the repairs and refuses at the first fatal problem; `verifyLog` only
 * reports. The rules are in docs/storage.md, "Recovery".
 */
import { type FileHandle, open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { corruptError } from './errors.js';
import { readAt, readIfExists } from './files.js';
import {
  decodeIndex,
  decodeMeta,
  decodeRecordHeader,
  EMPTY_META,
  FLAG_BATCH_END,
  indexName,
  MAX_RECORD_BYTES,
  META_FILE,
  type Meta,
  parseIndexName,
  parseSegmentName,
  RECORD_HEADER_BYTES,
  recordCrc,
  SEGMENT_HEADER_BYTES,
  type SegmentSummary,
  segmentName,
} from './format.js';
import { findRecordAfter, isTornTail, readSegmentHeader, type SegmentScan, scanSegment, TEARABLE } from './scan.js';
import { Segment } from './segment.js';
import type { VerifyProblem } from './types.js';

export type Repair =
  | { readonly kind: 'truncate'; readonly file: string; readonly size: number }
  | { readonly kind: 'delete'; readonly file: string }
  | { readonly kind: 'write-index'; readonly segment: Segment }
  | { readonly kind: 'delete-index'; readonly file: string };

export interface Inspection {
  /** The segments as they are once the repairs are applied, in position order. */
  readonly segments: Segment[];
  readonly meta: Meta;
  readonly highestEpoch: bigint;
  /** Base of the segment to create when none is left. */
  readonly nextBase: number;
  readonly bytes: number;
  readonly problems: VerifyProblem[];
  readonly repairs: Repair[];
}

export interface InspectOptions {
  readonly indexEvery: number;
  /**
   * `open`: trust a closed segment's index file when it matches the segment, and throw
   * PLX_STORAGE_CORRUPT at the first fatal problem. `verify`: scan every segment, compare
   * every index file with what the scan found, and collect every problem.
   */
  readonly mode: 'open' | 'verify';
  /** In `open` mode, scan every closed segment too instead of trusting matching index files. */
  readonly scanAll?: boolean;
  /**
   * Take a damaged tail (the last record of the log lies whole in the file but fails its CRC,
   * and nothing intact follows it) as repairable and cut it off, instead of refusing it.
   */
  readonly truncateDamagedTail?: boolean;
}

/** The last record of a segment, read through its index. */
async function lastRecordOf(fh: FileHandle, seg: Segment): Promise<{ offset: number; flags: number; crc: number }> {
  const { offset, skip } = seg.seek(seg.last);
  let off = offset;
  for (let i = 0; ; i++) {
    const head = await readAt(fh, off, RECORD_HEADER_BYTES);
    const h = head.length === RECORD_HEADER_BYTES ? decodeRecordHeader(head, 0) : undefined;
    if (!h || h.length > MAX_RECORD_BYTES)
      throw corruptError(seg.name, off, 'cut', 'a record the index points at is cut');
    if (i === skip) {
      const whole = await readAt(fh, off, RECORD_HEADER_BYTES + h.length);
      if (whole.length < RECORD_HEADER_BYTES + h.length || recordCrc(whole, 0, h.length) !== h.crc) {
        throw corruptError(seg.name, off, 'bad-crc', 'the CRC-32C of the last record does not match');
      }
      if (h.position !== seg.last) {
        throw corruptError(seg.name, off, 'bad-position', `position ${h.position}, expected ${seg.last}`);
      }
      return { offset: off, flags: h.flags, crc: h.crc };
    }
    off += RECORD_HEADER_BYTES + h.length;
  }
}

function sameSummary(a: SegmentSummary, b: SegmentSummary): boolean {
  if (a.base !== b.base || a.count !== b.count || a.end !== b.end || a.indexEvery !== b.indexEvery) return false;
  if (a.offsets.length !== b.offsets.length) return false;
  for (let i = 0; i < a.offsets.length; i++) if (a.offsets[i] !== b.offsets[i]) return false;
  return true;
}

export async function inspectLog(dir: string, opts: InspectOptions): Promise<Inspection> {
  const verify = opts.mode === 'verify';
  const problems: VerifyProblem[] = [];
  const repairs: Repair[] = [];
  const fatal = (file: string, offset: number, reason: string, message: string): void => {
    if (!verify) throw corruptError(file, offset, reason, message, dir);
    problems.push({ file, offset, severity: 'fatal', reason, message });
  };
  const repairable = (file: string, offset: number, reason: string, message: string): void => {
    problems.push({ file, offset, severity: 'repairable', reason, message });
  };

  const names = await readdir(dir);
  const bases = names
    .map(parseSegmentName)
    .filter((b): b is number => b !== undefined)
    .sort((a, b) => a - b);
  const indexFiles = new Set(names.filter((n) => parseIndexName(n) !== undefined));

  let meta = EMPTY_META;
  const metaBytes = await readIfExists(join(dir, META_FILE));
  if (metaBytes) {
    const m = decodeMeta(metaBytes);
    if ('reason' in m) fatal(META_FILE, 0, m.reason, 'the meta file (highest epoch, truncation seals) is damaged');
    else meta = m;
  }
  if (names.includes(`${META_FILE}.tmp`)) repairs.push({ kind: 'delete', file: `${META_FILE}.tmp` });

  const segments: Segment[] = [];
  let nextBase = 1;
  let bytes = 0;
  let tailScan: SegmentScan | undefined;
  let truncateLastTo: number | undefined;

  // A segment is created with its header fsynced before any record goes in, so the only
  // segment that can have a torn header is a last one that holds nothing else.
  const lastBase = bases[bases.length - 1];
  if (lastBase !== undefined) {
    const name = segmentName(lastBase);
    const fh = await open(join(dir, name), 'r');
    try {
      const size = (await fh.stat()).size;
      const header = await readSegmentHeader(fh);
      if ('reason' in header && size <= SEGMENT_HEADER_BYTES) {
        repairable(name, 0, 'torn-segment-header', `a segment created just before a crash (${size} bytes); removed`);
        repairs.push({ kind: 'delete', file: name });
        bases.pop();
        nextBase = lastBase;
      }
    } finally {
      await fh.close();
    }
  }

  let prevIntact = true;
  for (let i = 0; i < bases.length; i++) {
    const base = bases[i] as number;
    const isLast = i === bases.length - 1;
    const name = segmentName(base);
    const idxName = indexName(base);
    const fh = await open(join(dir, name), 'r');
    try {
      const size = (await fh.stat()).size;
      bytes += size;
      const header = await readSegmentHeader(fh);
      if ('reason' in header) {
        fatal(name, 0, header.reason, 'the segment header is damaged');
        prevIntact = false;
        continue;
      }
      if (header.base !== base) {
        fatal(name, 8, 'bad-segment-base', `the header says base position ${header.base}, the name ${base}`);
        prevIntact = false;
        continue;
      }

      let seg: Segment | undefined;
      let summary: SegmentSummary | undefined;
      if (!isLast && indexFiles.has(idxName)) {
        const idx = await readIfExists(join(dir, idxName));
        summary = idx ? decodeIndex(idx) : undefined;
      }
      // An index is trusted when it describes exactly this file and meets the next segment.
      const trusted =
        summary !== undefined &&
        summary.base === base &&
        summary.indexEvery === opts.indexEvery &&
        summary.end === size &&
        summary.count >= 1 &&
        summary.base + summary.count === bases[i + 1];
      if (!verify && !opts.scanAll && trusted && summary) {
        seg = new Segment(base, opts.indexEvery, summary);
      } else {
        const every = verify && summary ? summary.indexEvery : opts.indexEvery;
        const scan = await scanSegment(fh, size, base, every);
        seg = scan.segment;
        if (scan.stop) {
          const { offset, reason, detail } = scan.stop;
          if (!isLast) {
            fatal(name, offset, reason, `${detail} (inside a closed segment)`);
            prevIntact = false;
            continue;
          }
          const after = TEARABLE.has(reason) ? await findRecordAfter(fh, size, offset, base + seg.count) : undefined;
          if (TEARABLE.has(reason) && after === undefined && isTornTail(scan.stop, size)) {
            repairable(name, offset, 'torn-tail', `${detail}; the ${size - offset} bytes from here on are cut off`);
            truncateLastTo = offset;
          } else if (TEARABLE.has(reason) && after === undefined) {
            // Whole in the file, so written whole: maybe acknowledged, and damaged since.
            const position = base + seg.count;
            const what =
              `the last record (position ${position}, bytes ${offset} to ${scan.stop.end ?? size}) lies whole in ` +
              `the file but ${detail.replace(/^the /, 'its ')}: a record written whole, maybe acknowledged, damaged since`;
            if (opts.truncateDamagedTail) {
              repairable(
                name,
                offset,
                'damaged-tail',
                `${what}; truncateDamagedTail: it and the ${size - offset} bytes from here on are dropped`,
              );
              truncateLastTo = offset;
            } else {
              fatal(
                name,
                offset,
                'damaged-tail',
                `${what}; to drop it on purpose, open with truncateDamagedTail (--truncate-damaged-tail)`,
              );
              prevIntact = false;
              continue;
            }
          } else {
            const follows = after === undefined ? '' : `; an intact record follows at offset ${after}`;
            fatal(name, offset, reason, `${detail}${follows}`);
            prevIntact = false;
            continue;
          }
        }
        if (isLast) {
          tailScan = scan;
        } else if (verify) {
          if (!indexFiles.has(idxName)) {
            repairable(idxName, 0, 'missing-index', 'the index of a closed segment is missing; open rebuilds it');
          } else if (!summary || !sameSummary(summary, seg.summary())) {
            repairable(idxName, 0, 'stale-index', 'the index does not match its segment; open rebuilds it');
          }
        } else {
          repairs.push({ kind: 'write-index', segment: seg });
        }
      }
      if (isLast && indexFiles.has(idxName)) repairs.push({ kind: 'delete-index', file: idxName });

      const prev = segments[segments.length - 1];
      if (prev && prevIntact && prev.base + prev.count !== base) {
        fatal(name, 0, 'gap', `the segment starts at position ${base} but the one before ends at ${prev.last}`);
      }
      segments.push(seg);
      prevIntact = true;
    } finally {
      await fh.close();
    }
  }

  // The last batch must be whole: its last record carries the batch-end flag, or is a
  // record truncateAfter sealed when it cut that batch.
  const tail = segments[segments.length - 1];
  const sealed = (position: number, crc: number) => meta.seals.some((s) => s.position === position && s.crc === crc);
  if (tail && tailScan && tailScan.segment === tail && tail.count > 0) {
    const rec = tailScan.lastRecord!;
    if ((rec.flags & FLAG_BATCH_END) === 0 && !sealed(rec.position, rec.crc)) {
      const start = tailScan.lastBatchStart!;
      repairable(
        tail.name,
        start.offset,
        'incomplete-batch',
        `the last batch (positions ${tail.base + start.count} to ${rec.position}) has no end; all of it is dropped`,
      );
      tail.truncate(start.count, start.offset);
      truncateLastTo = start.offset;
    }
  }
  // Batches never span segments: when the last segment holds no record, the log's last
  // record ends a closed segment and must end its batch.
  const prev = segments[segments.length - 2];
  if (tail && tail.count === 0 && prev && prev.count > 0 && prevIntact) {
    const fh = await open(join(dir, prev.name), 'r');
    try {
      const rec = await lastRecordOf(fh, prev);
      if ((rec.flags & FLAG_BATCH_END) === 0 && !sealed(prev.last, rec.crc)) {
        fatal(prev.name, rec.offset, 'incomplete-batch', 'a closed segment ends inside a batch');
      }
    } catch (e) {
      if (!verify) throw e;
      const d = (e as { details?: { offset?: number; reason?: string } }).details;
      fatal(prev.name, d?.offset ?? 0, d?.reason ?? 'bad-crc', (e as Error).message);
    } finally {
      await fh.close();
    }
  }
  if (tail && truncateLastTo !== undefined) repairs.push({ kind: 'truncate', file: tail.name, size: truncateLastTo });

  const kept = new Set(segments.map((s) => s.indexName));
  for (const n of indexFiles) {
    if (!kept.has(n) && !repairs.some((r) => r.kind === 'delete-index' && r.file === n)) {
      repairs.push({ kind: 'delete-index', file: n });
    }
  }

  let highestEpoch = meta.epoch;
  for (const s of segments) if (s.maxEpoch > highestEpoch) highestEpoch = s.maxEpoch;
  if (tail) nextBase = tail.base + tail.count;
  return { segments, meta, highestEpoch, nextBase, bytes, problems, repairs };
}
