/**
 * The refusals of Chronacta's cluster mode (docs/chronacta-ha.md, docs/errors.md). Match on
 * `err.code`. The replicated log under Chronacta (ts/replication/) refuses with its own
 * `PLX_REPLICATION_*` codes; Chronacta's clients have always seen `PLX_CHRONACTA_HA_*`, so
 * Chronacta opens the log with `HA_CODE_ALIASES` and wraps the layer's functions it offers
 * with `withHaCodes`: every refusal a client of Chronacta sees keeps its code.
 */
import { type PlexusCode, PlexusError } from '../core/errors.js';
import { type ReplicationErrorAliases, ReplicationErrorCode, translateError } from '../replication/errors.js';

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

/** The replicated log's codes and the Chronacta codes its clients see for them (docs/errors.md). */
export const HA_CODE_ALIASES: ReplicationErrorAliases = {
  [ReplicationErrorCode.NOT_LEADER]: HaErrorCode.NOT_LEADER,
  [ReplicationErrorCode.NOT_READY]: HaErrorCode.NOT_READY,
  [ReplicationErrorCode.DIVERGED]: HaErrorCode.DIVERGED,
  [ReplicationErrorCode.STOPPED]: HaErrorCode.STOPPED,
  [ReplicationErrorCode.BAD_CONFIG]: HaErrorCode.BAD_CONFIG,
  [ReplicationErrorCode.UNSUPPORTED]: HaErrorCode.UNSUPPORTED,
  [ReplicationErrorCode.MEMBERSHIP]: HaErrorCode.MEMBERSHIP,
  [ReplicationErrorCode.BAD_FRAME]: HaErrorCode.BAD_FRAME,
  [ReplicationErrorCode.CATCH_UP_UNAVAILABLE]: HaErrorCode.CATCH_UP_UNAVAILABLE,
  [ReplicationErrorCode.BAD_CERTIFICATE]: HaErrorCode.BAD_CERTIFICATE,
};

export function haError(
  code: PlexusCode,
  message: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): PlexusError {
  return new PlexusError(code, message, details, cause === undefined ? undefined : { cause });
}

/** A replicated-log refusal under its Chronacta code; anything else as it is. */
export function toHaError(e: unknown): unknown {
  return translateError(e, HA_CODE_ALIASES);
}

/** `fn` refusing with Chronacta's codes (synchronous or promise-returning functions). */
export function withHaCodes<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R {
  return (...args: A): R => {
    let out: R;
    try {
      out = fn(...args);
    } catch (e) {
      throw toHaError(e);
    }
    if (out instanceof Promise) {
      return out.catch((e: unknown) => {
        throw toHaError(e);
      }) as R;
    }
    return out;
  };
}
