/**
 * The segments of a log kept in segment files, read through the storage layer: the segment
 * file name format (docs/storage.md, "Files") is the storage's own, so no caller parses it.
 */

import { StorageCode, storageError } from './errors.js';
import { parseSegmentName } from './format.js';
import type { LogStorage, SegmentedLog, SegmentInfo } from './log-storage.js';

/** Whether `log` is kept in segment files it names (`segmentFiles`). */
export function isSegmented(log: LogStorage): log is SegmentedLog {
  return Array.isArray((log as Partial<SegmentedLog>).segmentFiles);
}

/**
 * The log's segments, oldest first; the last one is open for appends, the others are closed.
 * A name that is not a segment file's is refused (`PLX_STORAGE_CORRUPT`).
 */
export function logSegments(log: SegmentedLog): SegmentInfo[] {
  return log.segmentFiles.map((file) => {
    const base = parseSegmentName(file);
    if (base === undefined) {
      throw storageError(StorageCode.CORRUPT, `${file} is not the name of a segment file`, { file });
    }
    return { file, first: BigInt(base) };
  });
}
