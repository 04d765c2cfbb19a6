/**
 * The refusals of the log engine: PlexusError with a `PLX_STORAGE_*` code (docs/storage.md
 * lists them with what each carries in `details`).
 */
import { isPlexusError, PlexusError } from '../core/errors.js';

export const StorageCode = {
  /** An argument of the wrong type or shape, or an option out of range. */
  BAD_INPUT: 'PLX_STORAGE_BAD_INPUT',
  /** A position that is not a bigint from 0 (or 1 for reads) to 2^53 - 1. */
  BAD_POSITION: 'PLX_STORAGE_BAD_POSITION',
  /** A record above the largest payload, or a batch above the largest batch. */
  TOO_LARGE: 'PLX_STORAGE_TOO_LARGE',
  /** `expectedLast` differs from the log's last position; `details.actual` holds it. */
  CONFLICT: 'PLX_STORAGE_CONFLICT',
  /** The append's epoch is below the highest accepted; `details.highestEpoch` holds it. */
  FENCED: 'PLX_STORAGE_FENCED',
  /** The position lies below the first record still stored. */
  COMPACTED: 'PLX_STORAGE_COMPACTED',
  /** The file system is full; nothing of the failed append remains. */
  DISK_FULL: 'PLX_STORAGE_DISK_FULL',
  /** Any other I/O failure. After a failed fsync the log refuses writes until reopened. */
  IO: 'PLX_STORAGE_IO',
  /** Damaged data before the tail; `details.file` and `details.offset` say where. */
  CORRUPT: 'PLX_STORAGE_CORRUPT',
  /** The log is closed. */
  CLOSED: 'PLX_STORAGE_CLOSED',
  /** Another open log (in this or another live process) holds the directory. */
  LOCKED: 'PLX_STORAGE_LOCKED',
  /** `verifyLog` was given a directory that does not exist. */
  NOT_FOUND: 'PLX_STORAGE_NOT_FOUND',
} as const;

export type StorageCodeName = (typeof StorageCode)[keyof typeof StorageCode];

export function storageError(
  code: StorageCodeName,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return new PlexusError(code, message, details, cause === undefined ? undefined : { cause });
}

/** True when `e` is the refusal of an append whose epoch is below the highest accepted. */
export function isFenced(e: unknown): e is PlexusError {
  return isPlexusError(e, StorageCode.FENCED);
}

/** True when `e` is a failed compare-and-set; `e.details.actual` is the log's last position. */
export function isConflict(e: unknown): e is PlexusError {
  return isPlexusError(e, StorageCode.CONFLICT);
}

export function badInput(message: string, details: Record<string, unknown> = {}): PlexusError {
  return storageError(StorageCode.BAD_INPUT, message, details);
}

export function closedError(dir: string): PlexusError {
  return storageError(StorageCode.CLOSED, `the log at ${dir} is closed; open it again to use it`, { dir });
}

export function fencedError(epoch: bigint, highestEpoch: bigint): PlexusError {
  return storageError(
    StorageCode.FENCED,
    `append refused: epoch ${epoch} is below the highest accepted epoch ${highestEpoch}; a writer with a newer epoch owns the log`,
    { epoch, highestEpoch },
  );
}

export function conflictError(expected: bigint, actual: bigint): PlexusError {
  return storageError(
    StorageCode.CONFLICT,
    `append refused: expected the last position to be ${expected} but it is ${actual}; read the log and retry`,
    { expected, actual },
  );
}

export function compactedError(position: bigint, first: bigint): PlexusError {
  return storageError(
    StorageCode.COMPACTED,
    `position ${position} is below the first stored record ${first}: it was compacted away (read from ${first}, or restore from a snapshot)`,
    { position, first },
  );
}

export function corruptError(file: string, offset: number, reason: string, what: string, dir?: string): PlexusError {
  const where = dir === undefined ? file : `${dir}/${file}`;
  return storageError(
    StorageCode.CORRUPT,
    `${where} is damaged at byte offset ${offset} (${reason}): ${what}. Records before the damage are intact; restore the directory from a replica or backup (verifyLog lists every problem)`,
    { file, offset, reason, ...(dir === undefined ? {} : { dir }) },
  );
}

const DISK_FULL_CODES = new Set(['ENOSPC', 'EDQUOT']);

/** True when a Node.js error means the file system has no room (or the quota is used up). */
export function isNoSpace(e: unknown): boolean {
  return typeof e === 'object' && e !== null && DISK_FULL_CODES.has((e as { code?: string }).code ?? '');
}

/** A file-system error as a storage error: DISK_FULL for a full disk, IO for anything else. */
export function ioError(what: string, file: string, e: unknown): PlexusError {
  if (isPlexusError(e)) return e;
  const errno = (e as { code?: string } | undefined)?.code;
  if (isNoSpace(e)) {
    return storageError(
      StorageCode.DISK_FULL,
      `${what} failed: no space left on the file system of ${file} (${errno}); nothing of it was kept, free space and retry`,
      { file, errno },
      e,
    );
  }
  return storageError(
    StorageCode.IO,
    `${what} failed on ${file}: ${(e as Error | undefined)?.message ?? String(e)}`,
    { file, errno },
    e,
  );
}
