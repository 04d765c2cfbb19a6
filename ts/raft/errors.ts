/**
 * The refusals of the Raft core. Match on `err.code`; docs/errors.md lists them.
 */
import { type PlexusCode, PlexusError } from '../core/errors.js';

export const RaftErrorCode = {
  /** A proposal, conf change or read on a node that is not the leader; `details.leader` is the known leader (0: none). */
  NOT_LEADER: 'PLX_RAFT_NOT_LEADER',
  /** A proposal while a leadership transfer is under way; retry on the new leader. */
  TRANSFER_IN_PROGRESS: 'PLX_RAFT_TRANSFER_IN_PROGRESS',
  /** A conf change while an earlier one is not yet committed. */
  CONF_CHANGE_PENDING: 'PLX_RAFT_CONF_CHANGE_PENDING',
  /** A conf change that cannot apply (remove the last voter, an id of 0) or bytes that are not a conf change. */
  BAD_CONF_CHANGE: 'PLX_RAFT_BAD_CONF_CHANGE',
  /** Bad options (ids, ticks, sizes) or a bad argument to a call. */
  BAD_CONFIG: 'PLX_RAFT_BAD_CONFIG',
  /** A message the core does not accept from a driver (a local type, a wrong recipient). */
  BAD_MESSAGE: 'PLX_RAFT_BAD_MESSAGE',
  /** Storage asked for entries below its first index (they are in a snapshot). */
  COMPACTED: 'PLX_RAFT_COMPACTED',
  /** Storage asked for entries past its last index. */
  UNAVAILABLE: 'PLX_RAFT_UNAVAILABLE',
  /** A snapshot older than the one storage holds, or compaction past what is applied. */
  SNAPSHOT_OUT_OF_DATE: 'PLX_RAFT_SNAPSHOT_OUT_OF_DATE',
  /** FileRaftStorage found a journal record it cannot read, or a journal that does not replay. */
  STORAGE_CORRUPT: 'PLX_RAFT_STORAGE_CORRUPT',
  /** FileRaftStorage could not write (the cause is the log engine's error); later writes fail too. */
  STORAGE_FAILED: 'PLX_RAFT_STORAGE_FAILED',
  /** `advance()` without a `ready()` before it, or a second `ready()` before `advance()`. */
  READY_ORDER: 'PLX_RAFT_READY_ORDER',
} as const;

export function raftError(code: PlexusCode, message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError(code, message, details);
}

export function notLeader(id: number, leader: number, what: string): PlexusError {
  const where =
    leader === 0 ? 'no leader is known yet; retry after an election' : `send it to the leader, node ${leader}`;
  return raftError(RaftErrorCode.NOT_LEADER, `node ${id} is not the leader and cannot take a ${what}: ${where}`, {
    leader,
  });
}
