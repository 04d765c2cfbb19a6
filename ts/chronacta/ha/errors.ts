/**
 * The refusals of the replicated log (docs/chronacta-ha.md). Match on `err.code`;
 * docs/errors.md lists them. Compare-and-set and fencing refusals keep the log engine's
 * codes (`PLX_STORAGE_CONFLICT`, `PLX_STORAGE_FENCED`), and an append whose outcome is
 * unknown keeps the Raft driver's (`PLX_RAFT_TIMEOUT`, `PLX_RAFT_PROPOSAL_LOST`), since the
 * LogStorage seam promises exactly those.
 */
import { type PlexusCode, PlexusError } from '../../core/errors.js';

export const HaErrorCode = {
  /** An append or membership change on a member that is not the leader; `details.leader`, `details.leaderAddress`. */
  NOT_LEADER: 'PLX_CHRONACTA_HA_NOT_LEADER',
  /** A new leader that has not yet applied every entry of earlier terms within the timeout. */
  NOT_READY: 'PLX_CHRONACTA_HA_NOT_READY',
  /** A committed entry that does not fit the local log (a gap, an overlap with another batch, a bad frame): the member stops. */
  DIVERGED: 'PLX_CHRONACTA_HA_DIVERGED',
  /** The member stopped: after a divergence, a failed local write (disk full) or `close()`. */
  STOPPED: 'PLX_CHRONACTA_HA_STOPPED',
  /** A bad cluster configuration or option (ids, addresses, a member list without this node). */
  BAD_CONFIG: 'PLX_CHRONACTA_HA_BAD_CONFIG',
  /** An operation the replicated log does not offer (truncating committed records). */
  UNSUPPORTED: 'PLX_CHRONACTA_HA_UNSUPPORTED',
  /** A membership change that cannot go ahead (a known id, an unknown id, a learner that did not catch up). */
  MEMBERSHIP: 'PLX_CHRONACTA_HA_MEMBERSHIP',
  /** A frame on a catch-up stream that does not decode (magic, version, type, length, CRC-32C, counts); the stream closes. */
  BAD_FRAME: 'PLX_CHRONACTA_HA_BAD_FRAME',
  /** A source cannot send the records a member needs below a snapshot (it compacted them or lacks them); the member tries another. */
  CATCH_UP_UNAVAILABLE: 'PLX_CHRONACTA_HA_CATCH_UP_UNAVAILABLE',
  /** `serve --cluster` on a data directory without the member's certificate files (cluster/tls/). */
  NO_CERTIFICATE: 'PLX_CHRONACTA_HA_NO_CERTIFICATE',
  /** A member certificate that does not name the member, is not signed by the cluster CA, has expired, or does not match its key. */
  BAD_CERTIFICATE: 'PLX_CHRONACTA_HA_BAD_CERTIFICATE',
} as const;

export function haError(
  code: PlexusCode,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return new PlexusError(code, message, details, cause === undefined ? undefined : { cause });
}
