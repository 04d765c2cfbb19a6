/**
 * PlexusError <-> gRPC status. The server ends a refused call with the status of the
 * error's code and puts the code and its details in the trailing metadata; the client
 * rebuilds the same PlexusError from them (or, for a status without them, such as a
 * server that cannot be reached, a PlexusError from the status code alone).
 */
import { Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { codeFromPeer, isPlexusError, PlexusError } from '../core/errors.js';
import { ChronactaCode, type ChronactaCodeName } from './errors.js';
import type { CallStatus } from './grpc-server.js';
import { HaErrorCode } from './ha-errors.js';

export const CODE_KEY = 'plexus-code';
export const DETAILS_KEY = 'plexus-details';
export const ACTUAL_VERSION_KEY = 'actual-version';

const STATUS_OF: Record<ChronactaCodeName, status> = {
  PLX_CHRONACTA_BAD_INPUT: status.INVALID_ARGUMENT,
  PLX_CHRONACTA_TOO_LARGE: status.INVALID_ARGUMENT,
  PLX_CHRONACTA_WRONG_EXPECTED_VERSION: status.FAILED_PRECONDITION,
  PLX_CHRONACTA_IDEMPOTENCY_CONFLICT: status.ALREADY_EXISTS,
  PLX_CHRONACTA_STREAM_DELETED: status.FAILED_PRECONDITION,
  PLX_CHRONACTA_STREAM_NOT_FOUND: status.NOT_FOUND,
  PLX_CHRONACTA_DISK_FULL: status.RESOURCE_EXHAUSTED,
  PLX_CHRONACTA_UNAVAILABLE: status.UNAVAILABLE,
  PLX_CHRONACTA_CORRUPT: status.DATA_LOSS,
  PLX_CHRONACTA_LOCKED: status.UNAVAILABLE,
  PLX_CHRONACTA_BAD_DATA_DIR: status.FAILED_PRECONDITION,
  PLX_CHRONACTA_TIMEOUT: status.DEADLINE_EXCEEDED,
  PLX_CHRONACTA_SUBSCRIPTION_DROPPED: status.CANCELLED,
  PLX_CHRONACTA_INTERNAL: status.INTERNAL,
  PLX_CHRONACTA_UNAUTHENTICATED: status.UNAUTHENTICATED,
  PLX_CHRONACTA_BAD_TLS: status.FAILED_PRECONDITION,
  PLX_CHRONACTA_BAD_TOKENS: status.FAILED_PRECONDITION,
  PLX_CHRONACTA_OVERLOADED: status.RESOURCE_EXHAUSTED,
};

/** Cluster mode: a follower's refusal carries the leader's address (also in the `leader-address` trailer). */
const HA_STATUS_OF: Record<string, status> = {
  [HaErrorCode.NOT_LEADER]: status.FAILED_PRECONDITION,
  [HaErrorCode.NOT_READY]: status.UNAVAILABLE,
  [HaErrorCode.STOPPED]: status.UNAVAILABLE,
  [HaErrorCode.DIVERGED]: status.DATA_LOSS,
  [HaErrorCode.BAD_CONFIG]: status.FAILED_PRECONDITION,
  [HaErrorCode.UNSUPPORTED]: status.UNIMPLEMENTED,
  [HaErrorCode.MEMBERSHIP]: status.FAILED_PRECONDITION,
};

export const LEADER_ADDRESS_KEY = 'leader-address';

/** The gRPC status a code ends a call with. */
export function statusOf(code: string): status {
  return STATUS_OF[code as ChronactaCodeName] ?? HA_STATUS_OF[code] ?? status.INTERNAL;
}

function replacer(_k: string, v: unknown): unknown {
  return typeof v === 'bigint' ? { $bigint: v.toString() } : v;
}

function reviver(_k: string, v: unknown): unknown {
  if (typeof v === 'object' && v !== null && typeof (v as { $bigint?: unknown }).$bigint === 'string') {
    const keys = Object.keys(v);
    if (keys.length === 1) return BigInt((v as { $bigint: string }).$bigint);
  }
  return v;
}

/** JSON with every character outside printable ASCII escaped (\uXXXX), so it fits a header value. */
function asciiJson(v: unknown): string {
  return JSON.stringify(v, replacer).replace(
    /[^\x20-\x7e]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** How the server ends a call refused with `e`: the status of its code, the code and details as trailing metadata. */
export function toCallStatus(e: unknown): CallStatus {
  const err = isPlexusError(e)
    ? e
    : new PlexusError(ChronactaCode.INTERNAL, `internal failure: ${e instanceof Error ? e.message : String(e)}`);
  let details = '{}';
  try {
    details = asciiJson(err.details);
  } catch {
    // details that cannot be written (cycles) are left out
  }
  const metadata: Record<string, string> = { [CODE_KEY]: err.code, [DETAILS_KEY]: details };
  if (err.code === ChronactaCode.WRONG_EXPECTED_VERSION && err.details.actual !== undefined) {
    metadata[ACTUAL_VERSION_KEY] = String(err.details.actual);
  }
  if (err.code === HaErrorCode.NOT_LEADER && typeof err.details.leaderAddress === 'string') {
    metadata[LEADER_ADDRESS_KEY] = err.details.leaderAddress;
  }
  return { code: statusOf(err.code), details: err.message, metadata };
}

const CODE_OF_STATUS: Partial<Record<status, ChronactaCodeName>> = {
  [status.INVALID_ARGUMENT]: ChronactaCode.BAD_INPUT,
  [status.FAILED_PRECONDITION]: ChronactaCode.WRONG_EXPECTED_VERSION,
  [status.ALREADY_EXISTS]: ChronactaCode.IDEMPOTENCY_CONFLICT,
  [status.NOT_FOUND]: ChronactaCode.STREAM_NOT_FOUND,
  [status.RESOURCE_EXHAUSTED]: ChronactaCode.TOO_LARGE,
  [status.UNAVAILABLE]: ChronactaCode.UNAVAILABLE,
  [status.DATA_LOSS]: ChronactaCode.CORRUPT,
  [status.DEADLINE_EXCEEDED]: ChronactaCode.TIMEOUT,
  [status.CANCELLED]: ChronactaCode.SUBSCRIPTION_DROPPED,
  [status.UNAUTHENTICATED]: ChronactaCode.UNAUTHENTICATED,
};

/** The PlexusError a failed call stands for, on the client. */
export function fromServiceError(e: unknown): PlexusError {
  if (isPlexusError(e)) return e;
  const se = e as Partial<ServiceError>;
  const md = se.metadata instanceof Metadata ? se.metadata : undefined;
  const code = md?.get(CODE_KEY)[0];
  const message = se.details ?? (e instanceof Error ? e.message : String(e));
  if (typeof code === 'string' && code.startsWith('PLX_')) {
    let details: Record<string, unknown> = {};
    const raw = md?.get(DETAILS_KEY)[0];
    if (typeof raw === 'string') {
      try {
        details = JSON.parse(raw, reviver) as Record<string, unknown>;
      } catch {
        details = {};
      }
    }
    return new PlexusError(codeFromPeer(code), message, { ...details, grpcStatus: se.code }, { cause: e });
  }
  // A stream reset with ENHANCE_YOUR_CALM: the server's stall timeout (docs/chronacta.md, "Server limits").
  const reset = se.code === status.RESOURCE_EXHAUSTED && /Bandwidth exhausted|code 11/.test(message);
  const mapped = reset
    ? ChronactaCode.OVERLOADED
    : ((se.code !== undefined ? CODE_OF_STATUS[se.code] : undefined) ?? ChronactaCode.INTERNAL);
  // A status without our metadata comes from the transport, not from the store's rules.
  const generic =
    mapped === ChronactaCode.WRONG_EXPECTED_VERSION ||
    mapped === ChronactaCode.IDEMPOTENCY_CONFLICT ||
    mapped === ChronactaCode.STREAM_NOT_FOUND
      ? ChronactaCode.INTERNAL
      : mapped;
  return new PlexusError(
    generic,
    `gRPC call failed (${se.code ?? 'no status'}): ${message}`,
    { grpcStatus: se.code },
    {
      cause: e,
    },
  );
}
