/**
 * Chronacta's cluster configuration (`cluster.json`, docs/chronacta-ha.md): a cluster id and
 * its members as the replicated log knows them (ts/replication/config.ts), and the bounds of
 * follower reads. Bad values are PLX_CHRONACTA_HA_BAD_CONFIG.
 */
import {
  checkAddress as checkReplicaAddress,
  checkMember as checkReplicaMember,
  type HaMember,
} from '../replication/config.js';
import { HaErrorCode, haError, withHaCodes } from './ha-errors.js';

export type { HaMember } from '../replication/config.js';

export interface HaConfig {
  readonly clusterId: string;
  readonly members: readonly HaMember[];
}

const MAX_MEMBERS = 64;

function badConfig(message: string, details: Record<string, unknown> = {}) {
  return haError(HaErrorCode.BAD_CONFIG, message, details);
}

/** `checkAddress` of the replicated log, refusing with PLX_CHRONACTA_HA_BAD_CONFIG. */
export const checkAddress: (what: string, a: unknown) => string = withHaCodes(checkReplicaAddress);

/** `checkMember` of the replicated log, refusing with PLX_CHRONACTA_HA_BAD_CONFIG. */
export const checkMember: (m: unknown) => HaMember = withHaCodes(checkReplicaMember);

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
