/**
 * The refusals of Chronacta: PlexusError with a `PLX_CHRONACTA_*` code. Each code has one
 * gRPC status (ts/chronacta/status.ts); the client turns a status back into the same
 * PlexusError. docs/chronacta.md lists them with what each carries in `details`.
 */
import { isPlexusError, PlexusError } from '../core/errors.js';

export const ChronactaCode = {
  /** A malformed argument or request: a bad stream name, event, expected version, option. */
  BAD_INPUT: 'PLX_CHRONACTA_BAD_INPUT',
  /** An event or a batch above the limits (docs/chronacta.md#limits). */
  TOO_LARGE: 'PLX_CHRONACTA_TOO_LARGE',
  /** The stream is not at the expected version; `details.actual` is its version (-1: no stream). */
  WRONG_EXPECTED_VERSION: 'PLX_CHRONACTA_WRONG_EXPECTED_VERSION',
  /** The idempotency key was used before with other events or another stream. */
  IDEMPOTENCY_CONFLICT: 'PLX_CHRONACTA_IDEMPOTENCY_CONFLICT',
  /** The stream was deleted hard (tombstoned): it refuses appends and reads. */
  STREAM_DELETED: 'PLX_CHRONACTA_STREAM_DELETED',
  /** The stream does not exist (a soft delete or a truncation of a stream never written). */
  STREAM_NOT_FOUND: 'PLX_CHRONACTA_STREAM_NOT_FOUND',
  /** The disk is full; nothing of the refused change was kept. */
  DISK_FULL: 'PLX_CHRONACTA_DISK_FULL',
  /** The store is closed, shutting down, or refuses writes after an I/O failure; retry elsewhere or later. */
  UNAVAILABLE: 'PLX_CHRONACTA_UNAVAILABLE',
  /** The data directory is damaged. */
  CORRUPT: 'PLX_CHRONACTA_CORRUPT',
  /** Another process has the data directory open. */
  LOCKED: 'PLX_CHRONACTA_LOCKED',
  /** The data directory's cluster files are unreadable or ask for a mode this build does not run. */
  BAD_DATA_DIR: 'PLX_CHRONACTA_BAD_DATA_DIR',
  /** A call took longer than its deadline (client side). */
  TIMEOUT: 'PLX_CHRONACTA_TIMEOUT',
  /** The subscription ended because the server stopped or the connection was lost. */
  SUBSCRIPTION_DROPPED: 'PLX_CHRONACTA_SUBSCRIPTION_DROPPED',
  /** A fault inside the server or a response the client cannot read. */
  INTERNAL: 'PLX_CHRONACTA_INTERNAL',
  /** A call without a bearer token the server's tokens file holds (gRPC UNAUTHENTICATED). */
  UNAUTHENTICATED: 'PLX_CHRONACTA_UNAUTHENTICATED',
  /** A TLS certificate, key or CA file of the client port (server or client) that cannot be used. */
  BAD_TLS: 'PLX_CHRONACTA_BAD_TLS',
  /** A tokens file (server) or token (client) that cannot be used. */
  BAD_TOKENS: 'PLX_CHRONACTA_BAD_TOKENS',
  /**
   * The server refused or ended the call at one of its limits (docs/chronacta.md, "Server limits"):
   * `details.reason` names it; retry later, read what was sent, or use fewer connections.
   */
  OVERLOADED: 'PLX_CHRONACTA_OVERLOADED',
} as const;

export type ChronactaCodeName = (typeof ChronactaCode)[keyof typeof ChronactaCode];

export function chronactaError(
  code: ChronactaCodeName,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return new PlexusError(code, message, details, cause === undefined ? undefined : { cause });
}

export function badInput(message: string, details: Record<string, unknown> = {}): PlexusError {
  return chronactaError(ChronactaCode.BAD_INPUT, message, details);
}

export function tooLarge(message: string, details: Record<string, unknown> = {}): PlexusError {
  return chronactaError(ChronactaCode.TOO_LARGE, message, details);
}

/** True when `e` is a wrong expected version; `e.details.actual` is the stream's version (bigint, -1n: none). */
export function isWrongExpectedVersion(e: unknown): e is PlexusError {
  return isPlexusError(e, ChronactaCode.WRONG_EXPECTED_VERSION);
}

/** A storage refusal (`PLX_STORAGE_*`) in Chronacta's terms; Chronacta errors pass through. */
export function fromStorage(e: unknown, what: string): PlexusError {
  if (isPlexusError(e) && e.code.startsWith('PLX_CHRONACTA_')) return e;
  const code = isPlexusError(e) ? e.code : '';
  const msg = e instanceof Error ? e.message : String(e);
  const details = isPlexusError(e) ? { ...e.details, storageCode: code } : {};
  switch (code) {
    case 'PLX_STORAGE_DISK_FULL':
      return chronactaError(ChronactaCode.DISK_FULL, `${what}: the disk is full (${msg})`, details, e);
    case 'PLX_STORAGE_CORRUPT':
      return chronactaError(ChronactaCode.CORRUPT, `${what}: ${msg}`, details, e);
    case 'PLX_STORAGE_LOCKED':
      return chronactaError(
        ChronactaCode.LOCKED,
        `${what}: the data directory is in use by another process (${msg}); stop it first`,
        details,
        e,
      );
    case 'PLX_STORAGE_CLOSED':
      return chronactaError(ChronactaCode.UNAVAILABLE, `${what}: the store is closed`, details, e);
    case 'PLX_RAFT_TIMEOUT':
    case 'PLX_RAFT_PROPOSAL_LOST':
      return chronactaError(
        ChronactaCode.UNAVAILABLE,
        `${what}: the outcome is unknown (${msg}); read to check, or retry with the same idempotency key`,
        { ...details, outcomeUnknown: true },
        e,
      );
    case 'PLX_RAFT_TRANSFER_IN_PROGRESS':
      // Refused before it was proposed: nothing of it can commit.
      return chronactaError(
        ChronactaCode.UNAVAILABLE,
        `${what}: leadership is moving to another member (${msg}); retry, the client finds the new leader`,
        { ...details, outcomeUnknown: false },
        e,
      );
    case 'PLX_STORAGE_IO':
    case 'PLX_STORAGE_CONFLICT':
    case 'PLX_STORAGE_FENCED':
      return chronactaError(ChronactaCode.UNAVAILABLE, `${what}: ${msg}; retry`, details, e);
    default:
      return chronactaError(ChronactaCode.INTERNAL, `${what}: ${msg}`, details, e);
  }
}
