/**
 * plexus storage: the one log engine (segmented append-only files with CRC-32C per record,
 * group-commit fsync, recovery on open, suffix truncation, compare-and-set and fencing), the
 * multiplexed log that keeps many logs in a few of its stores, and the LogStorage seam
 * (ts/storage/log-storage.ts). docs/storage.md describes the formats and the behaviour.
 */
export { isConflict, isFenced, StorageCode } from './errors.js';
export {
  DEFAULT_INDEX_EVERY,
  DEFAULT_SEGMENT_BYTES,
  FileLog,
  type FileLogOptions,
  type FileLogStats,
  openLog,
  stderrLogger,
} from './file-log.js';
export { MAX_BATCH_BYTES, MAX_BATCH_RECORDS, MAX_RECORD_BYTES, RECORD_HEADER_BYTES } from './format.js';
export { isTruncatable } from './log-storage.js';
export { MemoryLog, MemoryLogState } from './memory-log.js';
export {
  DEFAULT_LANE_COMPACT_RECORDS,
  DEFAULT_LANES,
  type LaneCompaction,
  MultiplexedLog,
} from './multiplexed-log.js';
export { isSegmented, logSegments } from './segmented.js';
export type {
  AppendOptions,
  AppendResult,
  FramedBatch,
  FsyncMode,
  LogRecord,
  LogStorage,
  ReadOptions,
  SegmentedLog,
  SegmentInfo,
  StorageLogger,
  TruncatableLog,
  VerifyProblem,
  VerifyReport,
} from './types.js';
export { verifyLog } from './verify.js';
