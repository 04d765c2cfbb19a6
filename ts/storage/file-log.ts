/**
 * FileLog: the log on disk (docs/storage.md). Records go into segment files of about
 * `segmentBytes` each; a batch never spans two segments. One writer loop runs every
 * change in call order: appends waiting together are written with one write and covered
 * by one fsync (group commit), and each append's promise resolves only once its fsync has
 * completed. Truncation and compaction run in the same loop, after every append called
 * before them.
 *
 * Reads see acknowledged records only. They find a position through the in-memory index
 * of each segment (persisted for closed segments, rebuilt by a scan when missing) and
 * check the CRC-32C of every record they return.
 */
import { constants as fsConstants } from 'node:fs';
import { type FileHandle, open, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { checkAppend, checkFramed, checkPosition, checkReadOptions, ReadBudget } from './checks.js';
import {
  badInput,
  closedError,
  compactedError,
  conflictError,
  corruptError,
  fencedError,
  ioError,
  isNoSpace,
  StorageCode,
  type StorageCodeName,
  storageError,
} from './errors.js';
import {
  acquireLock,
  ensureDir,
  HandleCache,
  readAt,
  releaseLock,
  replaceFile,
  syncDir,
  unlinkIfExists,
  WindowReader,
  writeAll,
  writeAllGathered,
  writeAllGatheredSync,
} from './files.js';
import {
  copyOut,
  decodeRecordHeader,
  encodeBatch,
  encodeIndex,
  encodeMeta,
  encodeSegmentHeader,
  FLAG_BATCH_END,
  frameBatch,
  MAX_POSITION,
  MAX_RECORD_BYTES,
  META_FILE,
  type Meta,
  RECORD_HEADER_BYTES,
  recordCrc,
  SEGMENT_HEADER_BYTES,
  type Seal,
  segmentName,
} from './format.js';
import { type Inspection, inspectLog } from './recovery.js';
import { Segment } from './segment.js';
import type {
  AppendOptions,
  AppendResult,
  FramedBatch,
  FsyncMode,
  LogRecord,
  ReadOptions,
  StorageLogger,
  TruncatableLog,
  VerifyProblem,
} from './types.js';

export interface FileLogOptions {
  /** Roll over to a new segment file once the current one would pass this size (default 64 MiB, 128 B .. 1 GiB). */
  readonly segmentBytes?: number;
  /** When appends are acknowledged (default `batch`, group commit). */
  readonly fsync?: FsyncMode;
  /** Where recovery reports what it repaired (default: warnings to standard error). */
  readonly logger?: StorageLogger;
  /** Index every n-th record of a segment (default 16, 1 .. 65536; 1 is a dense index). */
  readonly indexEvery?: number;
  /**
   * What open checks record by record (default `last`): the last segment only, closed
   * segments being taken from their index files (each record's CRC is still checked when
   * it is read); or `all` segments, so that damage anywhere refuses the open.
   */
  readonly scanOnOpen?: 'last' | 'all';
  /** Called after every completed fsync of a segment file, with the file's name (for metrics and tests). */
  readonly onSync?: (file: string) => void;
  /**
   * With fsync `never` only: write each group with a synchronous write on the calling thread
   * (a copy into the page cache, microseconds for small groups) instead of a round trip
   * through libuv's thread pool, which costs two thread wake-ups per group. Default false.
   * Ignored in the durable modes, whose writes wait for the disk.
   */
  readonly inlineWrites?: boolean;
  /**
   * In the durable modes, where the platform has O_DSYNC (Linux): write each group with a
   * synchronous O_DSYNC write on the calling thread, which returns once the bytes are durable.
   * The event loop waits for the disk meanwhile (a flush takes 0.1 ms to several ms), and two
   * thread wake-ups per group are saved; meant for a writer with nothing else to do while its
   * write is pending (a Raft journal, whose Ready waits for it anyway). Default false; ignored
   * with fsync `never` (see `inlineWrites`) and where O_DSYNC is missing.
   */
  readonly inlineSyncWrites?: boolean;
  /**
   * Cut off a damaged tail instead of refusing it: the log's last record lies whole in the
   * file but fails its CRC-32C, with nothing intact after it. Such a record was written
   * whole, so it may have been acknowledged; by default open refuses it with
   * PLX_STORAGE_CORRUPT (reason `damaged-tail`). With this option the record (and, by the
   * batch rule, the rest of its batch) is dropped and reported through the logger and
   * `recovery`. Default false; for an operator's deliberate repair.
   */
  readonly truncateDamagedTail?: boolean;
}

export const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;
export const DEFAULT_INDEX_EVERY = 16;
const MIN_SEGMENT_BYTES = 128;
const MAX_SEGMENT_BYTES = 1024 * 1024 * 1024;

/** Counters of the writer loop. */
export interface FileLogStats {
  /** Appends acknowledged. */
  readonly appends: number;
  readonly records: number;
  /** Groups written (one write call each, however many appends they held). */
  readonly writes: number;
  /** fsyncs of segment files. */
  readonly syncs: number;
}

/**
 * With a durable fsync mode, segment files are written through a descriptor opened with
 * O_DSYNC where the platform has it: a write returns once its bytes are durable, as a
 * write followed by fdatasync would, in one call and one trip through the thread pool
 * rather than two. Where it is missing (0), each group is followed by `datasync()`.
 */
const O_DSYNC: number = fsConstants.O_DSYNC ?? 0;

/** The flags a segment file is opened with for writing (`create`: made empty or new). */
function writerFlags(sync: boolean, create: boolean): number {
  const c = fsConstants;
  return c.O_RDWR | (create ? c.O_CREAT | c.O_TRUNC : 0) | (sync ? O_DSYNC : 0);
}

/** Standard error, for warnings only. */
export const stderrLogger: StorageLogger = {
  warn(message, details) {
    const extra =
      details === undefined ? '' : ` ${JSON.stringify(details, (_k, v) => (typeof v === 'bigint' ? String(v) : v))}`;
    process.stderr.write(`plexus storage: ${message}${extra}\n`);
  },
};

interface AppendOp {
  readonly kind: 'append';
  readonly buf: Buffer;
  readonly first: number;
  readonly count: number;
  readonly epoch: bigint;
  readonly batchId: Uint8Array;
  readonly resolve: (r: AppendResult) => void;
  readonly reject: (e: unknown) => void;
}

interface ChangeOp {
  readonly kind: 'truncate' | 'compact';
  readonly position: number;
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

type Op = AppendOp | ChangeOp;

function checkOptions(
  opts: FileLogOptions,
): Required<Omit<FileLogOptions, 'onSync' | 'inlineWrites' | 'inlineSyncWrites' | 'truncateDamagedTail'>> &
  Pick<FileLogOptions, 'onSync'> & { inlineWrites: boolean; inlineSyncWrites: boolean; truncateDamagedTail: boolean } {
  if (typeof opts !== 'object' || opts === null) throw badInput('openLog options must be an object');
  const segmentBytes = opts.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
  if (!Number.isSafeInteger(segmentBytes) || segmentBytes < MIN_SEGMENT_BYTES || segmentBytes > MAX_SEGMENT_BYTES) {
    throw badInput(
      `segmentBytes must be a whole number from ${MIN_SEGMENT_BYTES} to ${MAX_SEGMENT_BYTES}, got ${String(segmentBytes)}`,
    );
  }
  const fsync = opts.fsync ?? 'batch';
  if (fsync !== 'always' && fsync !== 'batch' && fsync !== 'never') {
    throw badInput(`fsync must be 'always', 'batch' or 'never', got ${String(fsync)}`);
  }
  const indexEvery = opts.indexEvery ?? DEFAULT_INDEX_EVERY;
  if (!Number.isSafeInteger(indexEvery) || indexEvery < 1 || indexEvery > 65_536) {
    throw badInput(`indexEvery must be a whole number from 1 to 65536, got ${String(indexEvery)}`);
  }
  const logger = opts.logger ?? stderrLogger;
  if (typeof logger?.warn !== 'function') throw badInput('logger must have a warn(message, details) method');
  if (opts.onSync !== undefined && typeof opts.onSync !== 'function') throw badInput('onSync must be a function');
  const scanOnOpen = opts.scanOnOpen ?? 'last';
  if (scanOnOpen !== 'last' && scanOnOpen !== 'all')
    throw badInput(`scanOnOpen must be 'last' or 'all', got ${String(scanOnOpen)}`);
  const inlineWrites = opts.inlineWrites ?? false;
  if (typeof inlineWrites !== 'boolean') throw badInput('inlineWrites must be a boolean');
  const inlineSyncWrites = opts.inlineSyncWrites ?? false;
  if (typeof inlineSyncWrites !== 'boolean') throw badInput('inlineSyncWrites must be a boolean');
  const truncateDamagedTail = opts.truncateDamagedTail ?? false;
  if (typeof truncateDamagedTail !== 'boolean') throw badInput('truncateDamagedTail must be a boolean');
  return {
    segmentBytes,
    fsync,
    indexEvery,
    logger,
    scanOnOpen,
    onSync: opts.onSync,
    inlineWrites,
    inlineSyncWrites,
    truncateDamagedTail,
  };
}

/**
 * Opens (or creates) the log in `dir`: takes the directory's lock, recovers (a torn tail is
 * truncated, an incomplete last batch dropped, both reported to the logger) and refuses
 * damage before the tail with PLX_STORAGE_CORRUPT naming the file and offset.
 */
export async function openLog(dir: string, opts: FileLogOptions = {}): Promise<FileLog> {
  const o = checkOptions(opts);
  if (typeof dir !== 'string' || dir === '') throw badInput('openLog needs a directory path');
  const abs = resolve(dir);
  try {
    await ensureDir(abs);
  } catch (e) {
    throw ioError('creating the log directory', abs, e);
  }
  try {
    await acquireLock(abs);
  } catch (e) {
    throw ioError('locking the log directory', abs, e);
  }
  let writer: FileHandle | undefined;
  try {
    const found = await inspectLog(abs, {
      indexEvery: o.indexEvery,
      mode: 'open',
      scanAll: o.scanOnOpen === 'all',
      truncateDamagedTail: o.truncateDamagedTail,
    });
    await applyRepairs(abs, found, o.logger, o.fsync !== 'never');
    const segments = found.segments;
    if (segments.length === 0) {
      const seg = new Segment(found.nextBase, o.indexEvery);
      writer = await createSegment(abs, seg, o.fsync !== 'never');
      segments.push(seg);
    } else {
      writer = await open(
        join(abs, (segments[segments.length - 1] as Segment).name),
        writerFlags(o.fsync !== 'never', false),
      );
    }
    return new FileLog(abs, o, segments, writer, found.meta, found.highestEpoch, found.problems);
  } catch (e) {
    await writer?.close().catch(() => {});
    await releaseLock(abs);
    throw ioError('opening the log', abs, e);
  }
}

async function applyRepairs(dir: string, found: Inspection, logger: StorageLogger, sync: boolean): Promise<void> {
  for (const p of found.problems) {
    logger.warn(`recovery of ${dir}: ${p.file} at offset ${p.offset}: ${p.reason}: ${p.message}`, {
      dir,
      file: p.file,
      offset: p.offset,
      reason: p.reason,
    });
  }
  let changed = false;
  for (const r of found.repairs) {
    switch (r.kind) {
      case 'truncate': {
        const fh = await open(join(dir, r.file), 'r+');
        try {
          await fh.truncate(r.size);
          if (sync) await fh.datasync();
        } finally {
          await fh.close();
        }
        changed = true;
        break;
      }
      case 'delete':
        changed = (await unlinkIfExists(join(dir, r.file))) || changed;
        break;
      case 'delete-index':
        changed = (await unlinkIfExists(join(dir, r.file))) || changed;
        break;
      case 'write-index':
        await writeIndex(dir, r.segment, logger);
        logger.info?.(`rebuilt the index of ${r.segment.name} in ${dir}`, { dir, file: r.segment.indexName });
        break;
    }
  }
  if (changed && sync) await syncDir(dir);
}

/** The index of a closed segment; derived data, so a failure only costs a scan at the next open. */
async function writeIndex(dir: string, seg: Segment, logger: StorageLogger): Promise<void> {
  const path = join(dir, seg.indexName);
  try {
    await writeFile(path, encodeIndex(seg.summary()));
  } catch (e) {
    await unlinkIfExists(path).catch(() => {});
    logger.info?.(`could not write the index ${seg.indexName}; it is rebuilt at the next open`, {
      dir,
      error: (e as Error).message,
    });
  }
}

/** Makes the segment file with its header, durable before any record goes in. */
async function createSegment(dir: string, seg: Segment, sync: boolean): Promise<FileHandle> {
  const path = join(dir, seg.name);
  const fh = await open(path, writerFlags(sync, true));
  try {
    await writeAll(fh, encodeSegmentHeader(seg.base), 0);
    if (sync) {
      if (O_DSYNC === 0) await fh.datasync();
      await syncDir(dir);
    }
    return fh;
  } catch (e) {
    await fh.close().catch(() => {});
    await unlinkIfExists(path).catch(() => {});
    throw e;
  }
}

function maxEpoch(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

/** `seals` (ascending) with `seal` in its place, replacing one at the same position. */
function withSeal(seals: readonly Seal[], seal: Seal): Seal[] {
  const out = seals.filter((s) => s.position !== seal.position);
  let i = out.length;
  while (i > 0 && (out[i - 1] as Seal).position > seal.position) i--;
  out.splice(i, 0, seal);
  return out;
}

function sameMeta(a: Meta, b: Meta): boolean {
  if (a.epoch !== b.epoch || a.seals.length !== b.seals.length) return false;
  return a.seals.every((s, i) => s.position === b.seals[i]?.position && s.crc === b.seals[i]?.crc);
}

export class FileLog implements TruncatableLog {
  private readonly handles = new HandleCache();
  private readonly queue: Op[] = [];
  private pumping = false;
  private idle: (() => void)[] = [];
  private closing = false;
  private closed = false;
  /** Set after a failure that leaves the files in doubt (a failed fsync): writes refused until reopen. */
  private broken: PlexusError | undefined;
  /** The last position counting every append accepted so far, acknowledged or not. */
  private tailLast: number;
  /** The highest epoch counting every append accepted so far. */
  private pendingEpoch: bigint;
  private durableEpoch: bigint;
  private counters = { appends: 0, records: 0, writes: 0, syncs: 0 };
  private readonly sync: boolean;
  /** Groups are written synchronously (fsync `never` with `inlineWrites`, or O_DSYNC with `inlineSyncWrites`). */
  private inline: boolean;

  /** @internal use openLog */
  constructor(
    readonly dir: string,
    private readonly opts: ReturnType<typeof checkOptions>,
    private readonly segments: Segment[],
    private writer: FileHandle,
    private meta: Meta,
    highestEpoch: bigint,
    /** What recovery repaired when this log was opened (a torn tail, a dropped batch, ...), in order. */
    readonly recovery: readonly VerifyProblem[] = [],
  ) {
    this.tailLast = this.lastPos;
    this.pendingEpoch = highestEpoch;
    this.durableEpoch = highestEpoch;
    this.sync = opts.fsync !== 'never';
    this.inline = this.sync ? opts.inlineSyncWrites && O_DSYNC !== 0 : opts.inlineWrites;
  }

  /**
   * Turns `inlineSyncWrites` on or off from the next group on (a writer whose role changes:
   * a Raft member writes its journal inline as a follower and through the thread pool as a
   * leader). No effect with fsync `never` or where O_DSYNC is missing.
   */
  setInlineSyncWrites(on: boolean): void {
    if (this.sync) this.inline = on && O_DSYNC !== 0;
  }

  // ------------------------------------------------------------------ positions

  private get tail(): Segment {
    return this.segments[this.segments.length - 1] as Segment;
  }

  private get lastPos(): number {
    return this.tail.last;
  }

  /** The lowest position that can be stored: the first record's, or `last + 1` when there is none. */
  private get startPos(): number {
    return (this.segments[0] as Segment).base;
  }

  get first(): bigint {
    return this.lastPos >= this.startPos ? BigInt(this.startPos) : 0n;
  }

  get last(): bigint {
    return BigInt(this.lastPos);
  }

  get refusal(): PlexusError | undefined {
    return this.broken;
  }

  get highestEpoch(): bigint {
    return this.durableEpoch;
  }

  get stats(): FileLogStats {
    return { ...this.counters };
  }

  /** The segment files' names, oldest first. */
  get segmentFiles(): readonly string[] {
    return this.segments.map((s) => s.name);
  }

  // ------------------------------------------------------------------ appends

  async append(payloads: readonly Uint8Array[], opts?: AppendOptions): Promise<AppendResult> {
    this.checkWritable();
    const a = checkAppend(payloads, opts);
    const count = a.payloads.length;
    const first = this.admit(a, count);
    const epoch = a.epoch ?? 0n;
    return this.enqueue(encodeBatch(a.payloads, first, epoch, a.batchId), first, count, epoch, a.batchId);
  }

  /**
   * `append` for a batch laid out in one buffer (`FramedBatch` in types.ts): the headers
   * are written into its gaps and the buffer itself is written, with no copy.
   */
  async appendFramed(batch: FramedBatch, opts?: AppendOptions): Promise<AppendResult> {
    this.checkWritable();
    const a = checkFramed(batch, opts);
    const count = a.lengths.length;
    const first = this.admit(a, count);
    const epoch = a.epoch ?? 0n;
    frameBatch(a.bytes, 0, a.lengths, first, epoch, a.batchId);
    const buf = Buffer.from(a.bytes.buffer, a.bytes.byteOffset, a.bytes.length);
    return this.enqueue(buf, first, count, epoch, a.batchId);
  }

  /** Fencing and compare-and-set against every append accepted so far; the batch's first position. */
  private admit(
    a: { readonly epoch: bigint | undefined; readonly expectedLast: number | undefined },
    count: number,
  ): number {
    if (a.epoch !== undefined && a.epoch < this.pendingEpoch) throw fencedError(a.epoch, this.pendingEpoch);
    if (a.expectedLast !== undefined && a.expectedLast !== this.tailLast) {
      throw conflictError(BigInt(a.expectedLast), BigInt(this.tailLast));
    }
    const first = this.tailLast + 1;
    if (first + count - 1 > MAX_POSITION) {
      throw storageError(StorageCode.BAD_POSITION, 'the log is full: positions would pass 2^53 - 1', {
        last: BigInt(this.tailLast),
      });
    }
    return first;
  }

  /** Takes the encoded batch's positions and queues it for the writer loop. */
  private enqueue(
    buf: Buffer,
    first: number,
    count: number,
    epoch: bigint,
    batchId: Uint8Array,
  ): Promise<AppendResult> {
    this.tailLast += count;
    if (epoch > this.pendingEpoch) this.pendingEpoch = epoch;
    return new Promise<AppendResult>((resolve, reject) => {
      this.queue.push({ kind: 'append', buf, first, count, epoch, batchId, resolve, reject });
      this.schedule();
    });
  }

  async truncateAfter(position: bigint): Promise<void> {
    this.checkWritable();
    const p = checkPosition(position, 'truncateAfter', 0);
    if (p < this.startPos - 1) throw compactedError(position + 1n, BigInt(this.startPos));
    if (p < this.tailLast) this.tailLast = p;
    return this.enqueueChange('truncate', p);
  }

  async compactBefore(position: bigint): Promise<void> {
    this.checkWritable();
    return this.enqueueChange('compact', checkPosition(position, 'compactBefore', 0));
  }

  private enqueueChange(kind: 'truncate' | 'compact', position: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ kind, position, resolve, reject });
      this.schedule();
    });
  }

  private checkWritable(): void {
    if (this.closing || this.closed) throw closedError(this.dir);
    if (this.broken) {
      throw storageError(
        StorageCode.IO,
        `the log at ${this.dir} refuses writes after an earlier failure (${this.broken.message}); close and reopen it`,
        { dir: this.dir },
        this.broken,
      );
    }
  }

  /** Starts the writer loop after the current turn, so appends called together form one group. */
  private schedule(): void {
    if (this.pumping) return;
    this.pumping = true;
    queueMicrotask(() => void this.pump());
  }

  private async pump(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const op = this.queue[0] as Op;
        if (this.broken) {
          this.failQueued(this.broken);
          break;
        }
        try {
          if (op.kind === 'append') await this.writeGroup();
          else {
            this.queue.shift();
            if (op.kind === 'truncate') await this.runTruncate(op);
            else await this.runCompact(op);
          }
        } catch (e) {
          // Each step reports its own failures; anything else leaves the state in doubt.
          const err = ioError('the log writer', this.dir, e);
          this.broken = err;
          if (op.kind !== 'append') op.reject(err);
          this.failQueued(err);
        }
      }
    } finally {
      this.pumping = false;
      const waiting = this.idle;
      this.idle = [];
      for (const w of waiting) w();
    }
  }

  /**
   * Rejects every waiting change after a failure: each was accepted against positions that
   * the failed one would have taken.
   */
  private failQueued(cause: PlexusError): void {
    const ops = this.queue.splice(0);
    for (const op of ops) {
      op.reject(
        storageError(
          cause.code as StorageCodeName,
          `not attempted, since a change called before it failed: ${cause.message}`,
          { ...cause.details },
          cause,
        ),
      );
    }
    this.tailLast = this.lastPos;
    this.pendingEpoch = this.durableEpoch;
  }

  /** Writes the appends at the head of the queue that fit the current segment, as one group. */
  private async writeGroup(): Promise<void> {
    const head = this.queue[0] as AppendOp;
    if (this.tail.count > 0 && this.tail.end + head.buf.length > this.opts.segmentBytes) {
      try {
        await this.rollover();
      } catch (e) {
        const err = ioError('starting a new segment', join(this.dir, segmentName(this.tail.last + 1)), e);
        this.queue.shift();
        head.reject(err);
        this.failQueued(err);
        return;
      }
    }
    const seg = this.tail;
    const group: AppendOp[] = [];
    let size = 0;
    while (this.queue.length > 0) {
      const op = this.queue[0] as Op;
      if (op.kind !== 'append') break;
      if (group.length > 0) {
        if (this.opts.fsync === 'always') break;
        if (seg.end + size + op.buf.length > this.opts.segmentBytes) break;
      }
      group.push(op);
      this.queue.shift();
      size += op.buf.length;
    }
    const at = seg.end;
    // A seal at or after the first position of the group names a record a truncation
    // removed. It goes (durably) before a record is written at its position, so that a torn
    // write there can never be taken for the sealed record.
    const stale = this.meta.seals[this.meta.seals.length - 1];
    if (stale !== undefined && stale.position > this.lastPos) {
      try {
        await this.writeMeta({ epoch: this.meta.epoch, seals: this.sealsWithin(this.lastPos) });
      } catch (e) {
        const err = ioError('dropping the seals of truncated records', join(this.dir, META_FILE), e);
        for (const g of group) g.reject(err);
        this.failQueued(err);
        return;
      }
    }
    // Through an O_DSYNC descriptor the write is the fsync: a failure of it is one of both.
    const dsync = this.sync && O_DSYNC !== 0;
    let phase = dsync ? 'write with O_DSYNC' : 'write';
    try {
      const bufs = group.length === 1 ? [(group[0] as AppendOp).buf] : group.map((g) => g.buf);
      if (this.inline) writeAllGatheredSync(this.writer.fd, bufs, at);
      else await writeAllGathered(this.writer, bufs, at);
      this.counters.writes++;
      if (this.sync) {
        if (!dsync) {
          phase = 'fsync';
          await this.writer.datasync();
        }
        this.synced(seg.name);
      }
    } catch (e) {
      const records = group.reduce((n, g) => n + g.count, 0);
      const err = ioError(`appending ${records} records (${phase})`, join(this.dir, seg.name), e);
      // Nothing of the failed group may stay: cut the file back to the last good record.
      try {
        await this.writer.truncate(at);
      } catch (te) {
        this.broken = ioError('cutting back a failed append', join(this.dir, seg.name), te);
      }
      // After a failed fsync (other than for space) the kernel may have dropped the
      // unwritten pages: nothing written since the last good fsync can be trusted.
      if ((phase === 'fsync' || dsync) && !isNoSpace(e)) this.broken = err;
      for (const g of group) g.reject(err);
      this.failQueued(err);
      return;
    }
    let off = at;
    for (const g of group) {
      let rel = 0;
      for (let i = 0; i < g.count; i++) {
        const size1 = RECORD_HEADER_BYTES + g.buf.readUInt32LE(rel);
        seg.push(off + rel, size1, g.epoch);
        rel += size1;
      }
      off += g.buf.length;
      if (g.epoch > this.durableEpoch) this.durableEpoch = g.epoch;
    }
    this.counters.appends += group.length;
    for (const g of group) {
      this.counters.records += g.count;
      g.resolve({ first: BigInt(g.first), last: BigInt(g.first + g.count - 1), batchId: g.batchId });
    }
  }

  private synced(file: string): void {
    this.counters.syncs++;
    this.opts.onSync?.(file);
  }

  /**
   * Closes the current segment and starts the next one. The closed segment's records were
   * fsynced by their group, and the new file's header is fsynced (with the directory)
   * before any record goes in, so only the last segment can ever have a torn tail.
   */
  private async rollover(): Promise<void> {
    const old = this.tail;
    const seg = new Segment(old.base + old.count, this.opts.indexEvery);
    const fh = await createSegment(this.dir, seg, this.sync);
    const oldWriter = this.writer;
    this.writer = fh;
    this.segments.push(seg);
    await oldWriter.close().catch(() => {});
    await writeIndex(this.dir, old, this.opts.logger);
  }

  // ------------------------------------------------------------------ truncate, compact

  private async runTruncate(op: ChangeOp): Promise<void> {
    const p = op.position;
    if (p >= this.lastPos) return op.resolve();
    if (p < this.startPos - 1) {
      // A compaction called before it removed the position; later appends counted on it.
      const err = compactedError(BigInt(p + 1), BigInt(this.startPos));
      op.reject(err);
      this.failQueued(err);
      return;
    }
    // The segment that keeps position p + 1 as its next: the last one starting at or before it.
    let t = this.segments.length - 1;
    while (t > 0 && (this.segments[t] as Segment).base > p + 1) t--;
    const target = this.segments[t] as Segment;
    const keep = p + 1 - target.base;
    let end = SEGMENT_HEADER_BYTES;
    // Every seal of a record still held stays until the truncation is done: a crash in
    // between can leave any of them as the last record of the log.
    let seals = this.sealsWithin(this.lastPos);
    try {
      if (p >= this.startPos) {
        // Record p is in the target, or (keep = 0) ends the segment before it.
        const holder = keep > 0 ? target : (this.segments[t - 1] as Segment);
        const rec = await this.recordHeaderAt(holder, p);
        if (keep > 0) end = rec.offset + RECORD_HEADER_BYTES + rec.length;
        // A batch cut in the middle stays whole for recovery: the meta file seals its new last record.
        if ((rec.flags & FLAG_BATCH_END) === 0) seals = withSeal(seals, { position: p, crc: rec.crc });
      }
      await this.writeMeta({ epoch: maxEpoch(this.durableEpoch, this.meta.epoch), seals });
    } catch (e) {
      const err = ioError(`truncating after position ${p}`, join(this.dir, target.name), e);
      op.reject(err);
      this.failQueued(err);
      return;
    }
    // From here on a failure leaves the files between two states: writes stop until reopen.
    try {
      const removed = this.segments.splice(t + 1);
      target.truncate(keep, end);
      removed.reverse();
      for (const [i, s] of removed.entries()) {
        this.handles.retire(join(this.dir, s.name));
        await unlinkIfExists(join(this.dir, s.name));
        await unlinkIfExists(join(this.dir, s.indexName));
        // Each removal is durable before the next, so a power loss leaves the newest segments
        // gone, never a gap.
        if (this.sync && i < removed.length - 1) await syncDir(this.dir);
      }
      if (removed.length > 0) {
        await this.writer.close().catch(() => {});
        this.writer = await open(join(this.dir, target.name), writerFlags(this.sync, false));
        await unlinkIfExists(join(this.dir, target.indexName));
      }
      await this.writer.truncate(end);
      if (this.sync) {
        await this.writer.datasync();
        this.synced(target.name);
        await syncDir(this.dir);
      }
      op.resolve();
    } catch (e) {
      const err = ioError(`truncating after position ${p}`, join(this.dir, target.name), e);
      this.broken = err;
      op.reject(err);
      this.failQueued(err);
    }
  }

  private async runCompact(op: ChangeOp): Promise<void> {
    const p = op.position;
    let n = 0;
    while (n < this.segments.length - 1 && (this.segments[n + 1] as Segment).base <= p) n++;
    try {
      let highest = this.meta.epoch;
      for (let i = 0; i < n; i++) highest = maxEpoch(highest, (this.segments[i] as Segment).maxEpoch);
      // The highest epoch must outlive the records that carry it.
      if (highest > this.meta.epoch) await this.writeMeta({ epoch: highest, seals: this.sealsWithin(this.lastPos) });
      for (let i = 0; i < n; i++) {
        const s = this.segments[0] as Segment;
        this.handles.retire(join(this.dir, s.name));
        // Out of the list before its file goes: a read that then misses the file sees its
        // position below the first and reports it compacted, not an I/O failure.
        this.segments.shift();
        await unlinkIfExists(join(this.dir, s.name));
        await unlinkIfExists(join(this.dir, s.indexName));
        // Each removal is durable before the next, so a power loss leaves the oldest segments
        // gone, never a gap.
        if (this.sync && i < n - 1) await syncDir(this.dir);
      }
      if (n > 0 && this.sync) await syncDir(this.dir);
      op.resolve();
    } catch (e) {
      const err = ioError(`compacting before position ${p}`, this.dir, e);
      op.reject(err);
      this.failQueued(err);
    }
  }

  private async writeMeta(m: Meta): Promise<void> {
    if (sameMeta(m, this.meta)) return;
    await replaceFile(this.dir, META_FILE, encodeMeta(m), this.sync);
    this.meta = m;
  }

  /**
   * The seals of records the log holds, up to `to`. Seals below the first record go with
   * the segments compaction removed; seals above `to` name records a truncation removed.
   */
  private sealsWithin(to: number): Seal[] {
    return this.meta.seals.filter((s) => s.position >= this.startPos && s.position <= to);
  }

  /** The header of the record at `position` in `seg`, found through the index. */
  private async recordHeaderAt(
    seg: Segment,
    position: number,
  ): Promise<{ offset: number; length: number; flags: number; crc: number }> {
    const { offset, skip } = seg.seek(position);
    const fh = this.writer;
    const path = join(this.dir, seg.name);
    const walk = async (h: FileHandle) => {
      let off = offset;
      for (let i = 0; ; i++) {
        const buf = await readAt(h, off, RECORD_HEADER_BYTES);
        if (buf.length < RECORD_HEADER_BYTES)
          throw corruptError(seg.name, off, 'cut', 'a record the index points at is cut');
        const rec = decodeRecordHeader(buf, 0);
        if (rec.position !== position - skip + i) {
          throw corruptError(
            seg.name,
            off,
            'bad-position',
            `position ${rec.position}, expected ${position - skip + i}`,
          );
        }
        if (i === skip) return { offset: off, length: rec.length, flags: rec.flags, crc: rec.crc };
        off += RECORD_HEADER_BYTES + rec.length;
      }
    };
    return seg === this.tail ? walk(fh) : this.handles.use(path, walk);
  }

  // ------------------------------------------------------------------ reads

  async read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    this.checkReadable();
    const f = checkPosition(from, 'read from', 1);
    const budget = this.budget(opts);
    return this.reading(f, () => this.readUp(f, budget));
  }

  async readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    this.checkReadable();
    const f = Math.min(checkPosition(from, 'readBackward from', 1), this.lastPos);
    const budget = this.budget(opts);
    return this.reading(f, () => this.readDown(f, budget));
  }

  /** Runs a read; a file that vanished under it was compacted away, any other failure is I/O. */
  private async reading(from: number, fn: () => Promise<LogRecord[]>): Promise<LogRecord[]> {
    try {
      return await fn();
    } catch (e) {
      if (isPlexusError(e)) throw e;
      if (from < this.startPos) throw compactedError(BigInt(from), BigInt(this.startPos));
      throw ioError(`reading from position ${from}`, this.dir, e);
    }
  }

  private async readUp(f: number, budget: ReadBudget): Promise<LogRecord[]> {
    const last = this.lastPos;
    if (f > last) return [];
    if (f < this.startPos) throw compactedError(BigInt(f), BigInt(this.startPos));
    const out: LogRecord[] = [];
    let pos = f;
    while (pos <= last && !budget.full) {
      const seg = this.segmentOf(pos);
      if (!seg) break;
      const to = Math.min(seg.last, last);
      if (await this.readForward(seg, pos, to, budget, out)) break;
      pos = to + 1;
    }
    return out;
  }

  private async readDown(f: number, budget: ReadBudget): Promise<LogRecord[]> {
    if (f === 0) return [];
    if (f < this.startPos) throw compactedError(BigInt(f), BigInt(this.startPos));
    const out: LogRecord[] = [];
    let pos = f;
    while (pos >= this.startPos && !budget.full) {
      const seg = this.segmentOf(pos);
      if (!seg) break;
      if (await this.readBackwardIn(seg, pos, budget, out)) break;
      pos = seg.base - 1;
    }
    return out;
  }

  private budget(opts: ReadOptions | undefined): ReadBudget {
    const { maxCount, maxBytes } = checkReadOptions(opts);
    return new ReadBudget(maxCount, maxBytes);
  }

  private checkReadable(): void {
    if (this.closed) throw closedError(this.dir);
  }

  /** The segment holding `position` (binary search over the bases). */
  private segmentOf(position: number): Segment | undefined {
    let lo = 0;
    let hi = this.segments.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if ((this.segments[mid] as Segment).base <= position) lo = mid;
      else hi = mid - 1;
    }
    const s = this.segments[lo];
    return s && s.base <= position && position <= s.last ? s : undefined;
  }

  /** Reads `from..to` of one segment into `out`; true when the budget stopped it. */
  private readForward(seg: Segment, from: number, to: number, budget: ReadBudget, out: LogRecord[]): Promise<boolean> {
    return this.handles.use(join(this.dir, seg.name), async (fh) => {
      const reader = new WindowReader(fh, seg.end);
      let { offset, skip } = seg.seek(from);
      for (let pos = from - skip; pos <= to; pos++) {
        const head = await reader.get(offset, RECORD_HEADER_BYTES);
        if (!head) return this.vanished(seg, offset, pos);
        const h = decodeRecordHeader(head.buf, head.at);
        this.checkHeader(seg, offset, h.position, pos, h.length);
        const size = RECORD_HEADER_BYTES + h.length;
        if (skip > 0) {
          skip--;
        } else {
          if (!budget.take(h.length)) return true;
          const whole = await reader.get(offset, size);
          if (!whole) return this.vanished(seg, offset, pos);
          out.push(this.toRecord(seg, offset, whole.buf, whole.at, h.length, h.crc, h.epoch, pos));
        }
        offset += size;
      }
      return false;
    });
  }

  /** Reads `to` down to the segment's first record into `out`; true when the budget stopped it. */
  private readBackwardIn(seg: Segment, to: number, budget: ReadBudget, out: LogRecord[]): Promise<boolean> {
    return this.handles.use(join(this.dir, seg.name), async (fh) => {
      const reader = new WindowReader(fh, seg.end);
      const every = seg.indexEvery;
      for (let hi = to; hi >= seg.base; ) {
        const blockStart = seg.base + Math.floor((hi - seg.base) / every) * every;
        // Walk the headers of the index block forwards, then take the records backwards.
        const found: { offset: number; length: number; crc: number; epoch: bigint }[] = [];
        let { offset } = seg.seek(blockStart);
        for (let pos = blockStart; pos <= hi; pos++) {
          const head = await reader.get(offset, RECORD_HEADER_BYTES);
          if (!head) return this.vanished(seg, offset, pos);
          const h = decodeRecordHeader(head.buf, head.at);
          this.checkHeader(seg, offset, h.position, pos, h.length);
          found.push({ offset, length: h.length, crc: h.crc, epoch: h.epoch });
          offset += RECORD_HEADER_BYTES + h.length;
        }
        for (let i = found.length - 1; i >= 0; i--) {
          const r = found[i]!;
          if (!budget.take(r.length)) return true;
          const whole = await reader.get(r.offset, RECORD_HEADER_BYTES + r.length);
          if (!whole) return this.vanished(seg, r.offset, blockStart + i);
          out.push(this.toRecord(seg, r.offset, whole.buf, whole.at, r.length, r.crc, r.epoch, blockStart + i));
        }
        hi = blockStart - 1;
      }
      return false;
    });
  }

  private checkHeader(seg: Segment, offset: number, position: number, expected: number, length: number): void {
    if (position !== expected) {
      throw corruptError(seg.name, offset, 'bad-position', `read position ${position}, expected ${expected}`);
    }
    if (length > MAX_RECORD_BYTES || offset + RECORD_HEADER_BYTES + length > seg.end) {
      throw corruptError(seg.name, offset, 'bad-length', `length ${length} runs past the segment's last record`);
    }
  }

  private toRecord(
    seg: Segment,
    offset: number,
    buf: Buffer,
    at: number,
    length: number,
    crc: number,
    epoch: bigint,
    position: number,
  ): LogRecord {
    if (recordCrc(buf, at, length) !== crc) {
      throw corruptError(seg.name, offset, 'bad-crc', `the CRC-32C of record ${position} does not match`);
    }
    return {
      position: BigInt(position),
      batchId: copyOut(buf, at + 24, at + 40),
      epoch,
      payload: copyOut(buf, at + RECORD_HEADER_BYTES, at + RECORD_HEADER_BYTES + length),
    };
  }

  /** A record shorter on disk than the index says: truncated away meanwhile (stop), or damage. */
  private vanished(seg: Segment, offset: number, position: number): boolean {
    if (position > this.lastPos || position < this.startPos) return true;
    throw corruptError(seg.name, offset, 'cut', `record ${position} is cut short`);
  }

  // ------------------------------------------------------------------ close

  /** Waits for every change called before it, then releases the files and the directory's lock. */
  async close(): Promise<void> {
    if (this.closed || this.closing) {
      while (!this.closed) await new Promise<void>((r) => this.idle.push(r));
      return;
    }
    this.closing = true;
    while (this.pumping || this.queue.length > 0) await new Promise<void>((r) => this.idle.push(r));
    await this.writer.close().catch(() => {});
    await this.handles.closeAll();
    await releaseLock(this.dir);
    this.closed = true;
    const waiting = this.idle;
    this.idle = [];
    for (const w of waiting) w();
  }
}
