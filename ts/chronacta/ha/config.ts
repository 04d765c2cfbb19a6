/**
 * The membership of a replicated Chronacta cluster: each member's Raft id, the address its
 * Raft transport listens on (peers dial it) and the address clients reach its gRPC server
 * at (named in NOT_LEADER redirects). `parseHaConfig` checks a `cluster.json`-style object.
 */
import { HaErrorCode, haError } from './errors.js';

export interface HaMember {
  /** Raft node id, 1 .. 2^53 - 1, never reused. */
  readonly id: number;
  /** host:port of the member's Raft transport. */
  readonly raftAddress: string;
  /** host:port clients use for the member's gRPC server. */
  readonly advertise: string;
}

export interface HaConfig {
  readonly clusterId: string;
  readonly members: readonly HaMember[];
}

const MAX_MEMBERS = 64;

function badConfig(message: string, details: Record<string, unknown> = {}) {
  return haError(HaErrorCode.BAD_CONFIG, message, details);
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

/** Checks a parsed cluster configuration: a cluster id and 1 .. 64 members with distinct ids. */
export function parseHaConfig(value: unknown): HaConfig {
  if (typeof value !== 'object' || value === null) throw badConfig('the cluster configuration must be an object');
  const v = value as Record<string, unknown>;
  const clusterId = v.clusterId ?? 'chronacta';
  if (typeof clusterId !== 'string' || clusterId.length === 0 || clusterId.length > 128) {
    throw badConfig('clusterId must be a string of 1 to 128 characters');
  }
  if (!Array.isArray(v.members) || v.members.length < 1 || v.members.length > MAX_MEMBERS) {
    throw badConfig(`members must list 1 to ${MAX_MEMBERS} members`);
  }
  const members = v.members.map(checkMember);
  const ids = new Set(members.map((m) => m.id));
  if (ids.size !== members.length) throw badConfig('member ids must be distinct');
  return { clusterId, members };
}

/**
 * When a follower serves a read marked `follower` (docs/chronacta-ha.md#follower-reads): its
 * applied position is at most `maxReadLag` positions behind the leader's last committed
 * position as the follower last heard it, and it heard it at most `maxReadStalenessMs` ago.
 */
export interface FollowerReadBounds {
  /** Positions a follower may be behind the leader's commit it last heard. Default 0. */
  readonly maxReadLag: number;
  /** How old that news from the leader may be. Default: one election timeout (electionTick x tickMs, 1000 ms). */
  readonly maxReadStalenessMs: number;
}

/** The bounds with their defaults filled in from the Raft timing; bad values are PLX_CHRONACTA_HA_BAD_CONFIG. */
export function followerReadBounds(opts: {
  readonly maxReadLag?: number | undefined;
  readonly maxReadStalenessMs?: number | undefined;
  readonly tickMs?: number | undefined;
  readonly electionTick?: number | undefined;
}): FollowerReadBounds {
  const maxReadLag = opts.maxReadLag ?? 0;
  if (!Number.isSafeInteger(maxReadLag) || maxReadLag < 0) {
    throw badConfig(`maxReadLag must be a whole number of positions from 0, got ${String(opts.maxReadLag)}`);
  }
  const maxReadStalenessMs = opts.maxReadStalenessMs ?? (opts.electionTick ?? 10) * (opts.tickMs ?? 100);
  if (!Number.isSafeInteger(maxReadStalenessMs) || maxReadStalenessMs < 1 || maxReadStalenessMs > 3_600_000) {
    throw badConfig(`maxReadStalenessMs must be 1 to 3600000 milliseconds, got ${String(opts.maxReadStalenessMs)}`);
  }
  return { maxReadLag, maxReadStalenessMs };
}
