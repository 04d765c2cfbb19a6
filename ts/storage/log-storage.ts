/**
 * The LogStorage seam: one append-only log of records addressed by position, used by the
 * event store, the Raft log and the actor journals. `LogStorage` is the contract every log
 * keeps (append, read, compact, close); `TruncatableLog` adds suffix truncation, a
 * capability only some logs have. Implementations: `FileLog` (ts/storage/file-log.ts: segment
 * files, group-commit fsync, recovery on open) and `MemoryLog` (ts/storage/memory-log.ts),
 * both truncatable; a shard of a `MultiplexedLog` (ts/storage/multiplexed-log.ts); the
 * cluster's epoch-stamped and remote shard stores; Chronacta's replicated log. Suites:
 * test/compliance/log-storage.suite.ts (`logStorageSuite`, `truncatableLogSuite`). The file
 * format is in docs/storage.md.
 *
 * Positions are bigints. The first record ever appended has position 1; every append
 * takes the positions after `last`. Refusals are PlexusError with a `PLX_STORAGE_*` code
 * (ts/storage/errors.ts).
 */

/** One record as read back. */
export interface LogRecord {
  readonly position: bigint;
  /** The 16-byte id of the batch (one `append` call) the record was written in. */
  readonly batchId: Uint8Array;
  /** The fencing epoch its append carried, 0 when it carried none. */
  readonly epoch: bigint;
  readonly payload: Uint8Array;
}

export interface AppendOptions {
  /** The batch id, 16 bytes; a random one when absent. */
  readonly batchId?: Uint8Array;
  /**
   * Compare-and-set: the append goes ahead only if the log's last position (counting every
   * append called before this one, acknowledged or not) is this value; otherwise it fails
   * with `PLX_STORAGE_CONFLICT` and `details.actual`.
   */
  readonly expectedLast?: bigint;
  /**
   * Fencing epoch (0 .. 2^64-1): an epoch below the highest one accepted so far fails with
   * `PLX_STORAGE_FENCED`; an equal or higher one is accepted and becomes the highest.
   */
  readonly epoch?: bigint;
}

export interface AppendResult {
  /** Position of the batch's first record. */
  readonly first: bigint;
  /** Position of the batch's last record. */
  readonly last: bigint;
  readonly batchId: Uint8Array;
}

/**
 * A batch laid out by its writer the way the log stores it, so that appending it copies no
 * payload: for each record, a gap of `RECORD_HEADER_BYTES` (48) bytes and then its payload,
 * end to end with no padding. The log writes each record's header into its gap and keeps
 * `bytes` (FileLog writes them as they are) until the append settles: the writer must not
 * change them before then.
 */
export interface FramedBatch {
  /** Gap and payload of each record, end to end: exactly sum(48 + lengths[i]) bytes. */
  readonly bytes: Uint8Array;
  /** Each record's payload length in bytes. */
  readonly lengths: readonly number[] | Uint32Array;
}

export interface ReadOptions {
  /** At most this many records (default: no limit besides `maxBytes`). */
  readonly maxCount?: number;
  /**
   * Stop before the record that would take the payload bytes returned above this (default
   * 8 MiB). The first record is always returned, however large, so a reader always
   * progresses.
   */
  readonly maxBytes?: number;
}

/**
 * The log seam: append, read (both ways), compact, close. Every implementation runs
 * `logStorageSuite` (test/compliance/log-storage.suite.ts).
 */
export interface LogStorage {
  /** Position of the first record held, 0 when the log holds none. */
  readonly first: bigint;
  /**
   * Position of the last acknowledged record; 0 for a log never written. After
   * `truncateAfter(p)` (a `TruncatableLog`) it is `p`, even when that leaves the log without records.
   */
  readonly last: bigint;
  /** The highest fencing epoch accepted so far (0 if none); it survives reopen, truncation and compaction. */
  readonly highestEpoch: bigint;
  /**
   * Why the log refuses every write until it is reopened (a failure that left its files in
   * doubt); undefined while it takes writes. Optional: a log without it never refuses so.
   */
  readonly refusal?: Error | undefined;

  /**
   * Appends the payloads as one batch at positions `last + 1 ...` (in call order across
   * concurrent calls). Resolves once the batch is durable (see FsyncMode); after a crash the
   * batch is either all there or not there at all.
   */
  append(payloads: readonly Uint8Array[], opts?: AppendOptions): Promise<AppendResult>;
  /**
   * The same as `append` (positions, batch, options, durability, refusals) for a batch laid
   * out in one buffer (`FramedBatch`): the records stored are the same bytes. Optional:
   * FileLog and MemoryLog have it; a caller checks for it and uses `append` otherwise.
   */
  appendFramed?(batch: FramedBatch, opts?: AppendOptions): Promise<AppendResult>;
  /** Records from position `from` upwards (ascending); empty past the end. */
  read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]>;
  /** Records from position `from` downwards (descending); `from` past the end starts at `last`. */
  readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]>;
  /**
   * Drops stored records below `position` where the storage can do so cheaply (FileLog:
   * whole closed segments entirely below it); records at `position` and above stay.
   * Afterwards `first` is at most `position` (or 0 when nothing is left).
   */
  compactBefore(position: bigint): Promise<void>;
  /** Waits for every pending append and releases the log; later calls fail with `PLX_STORAGE_CLOSED`. */
  close(): Promise<void>;
}

/**
 * The truncation capability: a log whose suffix can be removed (Raft's conflicting entries,
 * a journal's unacknowledged tail). `FileLog` and `MemoryLog` have it; a log whose records
 * are not its own to cut (a shard of a `MultiplexedLog`, a replicated log, a remote store)
 * does not claim it. Every implementation runs `truncatableLogSuite` as well.
 */
export interface TruncatableLog extends LogStorage {
  /**
   * Removes every record after `position` (durable when it resolves); the next append takes
   * `position + 1`. A position at or past `last` changes nothing. Runs after every append
   * called before it.
   */
  truncateAfter(position: bigint): Promise<void>;
}

/** Whether `log` has the truncation capability (a `truncateAfter` method). */
export function isTruncatable(log: LogStorage): log is TruncatableLog {
  return typeof (log as Partial<TruncatableLog>).truncateAfter === 'function';
}

/** One segment of a log kept in segment files. */
export interface SegmentInfo {
  /** The segment file's name inside the log's directory. */
  readonly file: string;
  /** The position the segment starts at: every record below it is in an earlier segment. */
  readonly first: bigint;
}

/**
 * A log kept in segment files (`FileLog`, and a log over one such as Chronacta's replicated
 * log): its files' names, oldest first, the last one open for appends. A reader that works
 * on closed segments (the event store's compaction) takes them through `logSegments`
 * (ts/storage/segmented.ts) instead of parsing the names itself.
 */
export interface SegmentedLog extends LogStorage {
  readonly segmentFiles: readonly string[];
}
