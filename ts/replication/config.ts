/**
 * The members of a replicated log: each member's Raft id, the address its Raft transport
 * listens on (peers dial it) and the address clients reach it at (named in NOT_LEADER
 * redirects). A product's configuration file (Chronacta's `cluster.json`) is checked by the
 * product with `checkMember` for each entry.
 */
import { ReplicationErrorCode, replicationError } from './errors.js';

export interface HaMember {
  /** Raft node id, 1 .. 2^53 - 1, never reused. */
  readonly id: number;
  /** host:port of the member's Raft transport. */
  readonly raftAddress: string;
  /** host:port clients use for the member's gRPC server. */
  readonly advertise: string;
}

function badConfig(message: string, details: Record<string, unknown> = {}) {
  return replicationError(ReplicationErrorCode.BAD_CONFIG, message, details);
}

export function checkAddress(what: string, a: unknown): string {
  if (typeof a !== 'string' || a.length > 255) throw badConfig(`${what} must be a host:port string`, { address: a });
  const i = a.lastIndexOf(':');
  const port = Number(a.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw badConfig(`${what} "${a}" is not host:port`, { address: a });
  }
  return a;
}

export function checkMember(m: unknown): HaMember {
  if (typeof m !== 'object' || m === null) throw badConfig('a member must be an object { id, raftAddress, advertise }');
  const r = m as Record<string, unknown>;
  const id = r.id;
  if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 1) {
    throw badConfig(`member id ${String(id)} must be a positive whole number`, { id });
  }
  return {
    id,
    raftAddress: checkAddress(`member ${id} raftAddress`, r.raftAddress),
    advertise: checkAddress(`member ${id} advertise`, r.advertise ?? r.raftAddress),
  };
}
