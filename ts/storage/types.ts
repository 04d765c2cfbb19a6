/**
 * Types of the storage layer. The log seam itself (`LogStorage`, `TruncatableLog`, records
 * and options) is in ts/storage/log-storage.ts and re-exported here.
 */
export type {
  AppendOptions,
  AppendResult,
  FramedBatch,
  LogRecord,
  LogStorage,
  ReadOptions,
  SegmentedLog,
  SegmentInfo,
  TruncatableLog,
} from './log-storage.js';
export { isTruncatable } from './log-storage.js';

/**
 * How appends reach the disk. `batch` (the default) is group commit: an append is
 * acknowledged once an fsync that covers it has completed, and appends waiting at the same
 * time share one fsync. `always` runs one fsync per append. `never` acknowledges once the
 * bytes are handed to the operating system: for tests and benchmarks only, since a power
 * loss can lose acknowledged records.
 */
export type FsyncMode = 'always' | 'batch' | 'never';

/** Where the log reports what recovery did (a truncated tail, a rebuilt index). */
export interface StorageLogger {
  warn(message: string, details?: Record<string, unknown>): void;
  info?(message: string, details?: Record<string, unknown>): void;
}

/** One thing `verifyLog` found. */
export interface VerifyProblem {
  /** The file's name inside the data directory. */
  readonly file: string;
  /** Byte offset inside the file where the problem starts. */
  readonly offset: number;
  /**
   * `repairable`: opening the log fixes it (a torn tail is truncated, an incomplete last
   * batch dropped, an index rebuilt). `fatal`: opening the log refuses it.
   */
  readonly severity: 'repairable' | 'fatal';
  /** A short reason: `torn-tail`, `incomplete-batch`, `bad-crc`, `bad-position`, ... (docs/storage.md). */
  readonly reason: string;
  readonly message: string;
}

/** What `verifyLog` reports about a data directory, without changing it. */
export interface VerifyReport {
  readonly dir: string;
  /** No problem at all. */
  readonly ok: boolean;
  /** `openLog` would open it (no fatal problem). */
  readonly openable: boolean;
  readonly segments: number;
  /** Records that would remain after open's repairs. */
  readonly records: number;
  readonly first: bigint;
  readonly last: bigint;
  readonly highestEpoch: bigint;
  /** Bytes in segment files. */
  readonly bytes: number;
  readonly problems: readonly VerifyProblem[];
}
