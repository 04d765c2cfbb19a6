/**
 * The refusals of the replicated log (docs/replication.md, docs/errors.md). Match on
 * `err.code`. Compare-and-set and fencing refusals keep the log engine's codes
 * (`PLX_STORAGE_CONFLICT`, `PLX_STORAGE_FENCED`), and an append whose outcome is unknown
 * keeps the Raft driver's (`PLX_RAFT_TIMEOUT`, `PLX_RAFT_PROPOSAL_LOST`), since the
 * LogStorage seam promises exactly those.
 *
 * A product that offered these refusals under its own codes before it used this layer
 * passes an alias table (`ReplicatedLogOptions.errorCodes`); the log then refuses with the
 * alias, keeping the layer's code as the error's cause (see `translateError`).
 */
import type { CatchUpRefusal } from '../codec/catch-up.js';
import type { DescriptorRefusal } from '../codec/snapshot-descriptor.js';
import { isPlexusError, type PlexusCode, PlexusError } from '../core/errors.js';

export const ReplicationErrorCode = {
  /** An append or membership change on a member that is not the leader; `details.leader`, `details.leaderAddress`. */
  NOT_LEADER: 'PLX_REPLICATION_NOT_LEADER',
  /** A new leader that has not yet applied every entry of earlier terms within the timeout. */
  NOT_READY: 'PLX_REPLICATION_NOT_READY',
  /** A committed entry that does not fit the local log (a gap, an overlap with another batch, a bad frame): the member stops. */
  DIVERGED: 'PLX_REPLICATION_DIVERGED',
  /** The member stopped: after a divergence, a failed local write (disk full) or `close()`. */
  STOPPED: 'PLX_REPLICATION_STOPPED',
  /** A bad configuration or option (ids, addresses, a member list without this node, a member identity scheme). */
  BAD_CONFIG: 'PLX_REPLICATION_BAD_CONFIG',
  /** An operation the replicated log does not offer (truncating committed records). */
  UNSUPPORTED: 'PLX_REPLICATION_UNSUPPORTED',
  /** A membership change that cannot go ahead (a known id, an unknown id, a learner that did not catch up). */
  MEMBERSHIP: 'PLX_REPLICATION_MEMBERSHIP',
  /** A frame on a catch-up stream that does not decode (magic, version, type, length, CRC-32C, counts); the stream closes. */
  BAD_FRAME: 'PLX_REPLICATION_BAD_FRAME',
  /** A source cannot send the records a member needs below a snapshot (it compacted them or lacks them); the member tries another. */
  CATCH_UP_UNAVAILABLE: 'PLX_REPLICATION_CATCH_UP_UNAVAILABLE',
  /** A member certificate that does not name the member, is not signed by the cluster CA, has expired, or does not match its key. */
  BAD_CERTIFICATE: 'PLX_REPLICATION_BAD_CERTIFICATE',
} as const;

export type ReplicationCode = (typeof ReplicationErrorCode)[keyof typeof ReplicationErrorCode];

/** A product's codes for the layer's refusals: layer code -> the code its clients see. */
export type ReplicationErrorAliases = Readonly<Partial<Record<ReplicationCode, PlexusCode>>>;

export function replicationError(
  code: ReplicationCode,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return new PlexusError(code, message, details, cause === undefined ? undefined : { cause });
}

/**
 * `e` under its alias when `aliases` names its code: a new PlexusError with the alias, the
 * same message and details, and `e` (with the layer's code) as its cause. Any other value
 * comes back as it is.
 */
export function translateError<T>(e: T, aliases: ReplicationErrorAliases | undefined): T | PlexusError {
  if (aliases === undefined || !isPlexusError(e)) return e;
  const alias = aliases[e.code as ReplicationCode];
  if (alias === undefined) return e;
  const out = new PlexusError(alias, e.message, e.details, { cause: e });
  if (e.stack !== undefined) out.stack = e.stack.replace(e.code, alias);
  return out;
}

/** The refusal of a catch-up frame (ts/codec/catch-up.ts) under the layer's code: PLX_REPLICATION_BAD_FRAME. */
export const catchUpRefusal: CatchUpRefusal = (message, details) =>
  replicationError(ReplicationErrorCode.BAD_FRAME, message, details);

/**
 * The refusal of a snapshot descriptor (ts/codec/snapshot-descriptor.ts): one above its size is
 * a bad configuration (PLX_REPLICATION_BAD_CONFIG); data that is not a descriptor means the
 * member cannot follow the log (PLX_REPLICATION_DIVERGED).
 */
export const descriptorRefusal: DescriptorRefusal = (reason, message) =>
  replicationError(reason === 'too-large' ? ReplicationErrorCode.BAD_CONFIG : ReplicationErrorCode.DIVERGED, message);
