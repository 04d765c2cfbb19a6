/**
 * An append from a leader whose entries conflict with this node's committed prefix is refused
 * with a code (PLX_RAFT_BAD_MESSAGE, reason committed-conflict), and the log is left as it was:
 * the driver logs and drops a message the core refuses. No correct leader sends one (Raft's Log
 * Matching and Leader Completeness properties); a faulty or forged one must not crash the node.
 */
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { RaftLog } from '../../ts/raft/log.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import type { Entry } from '../../ts/raft/types.js';

const entry = (index: number, term: number): Entry => ({ index, term, type: 'normal', data: new Uint8Array([index]) });

describe('RaftLog.maybeAppend', () => {
  it('refuses entries that conflict with the committed prefix, and changes nothing', () => {
    const log = new RaftLog(new MemoryRaftStorage(), Number.POSITIVE_INFINITY);
    expect(log.maybeAppend(0, 0, 2, [entry(1, 1), entry(2, 1), entry(3, 1)])).toBe(3);
    expect(log.committed).toBe(2);

    let err: unknown;
    try {
      log.maybeAppend(1, 1, 3, [entry(2, 2)]);
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_RAFT_BAD_MESSAGE'), String(err)).toBe(true);
    expect(isPlexusError(err) && err.details).toMatchObject({ reason: 'committed-conflict', index: 2, committed: 2 });
    expect(log.committed).toBe(2);
    expect(log.lastIndex()).toBe(3);
    expect(log.term(2)).toBe(1);
  });

  it('still replaces a conflicting suffix above the committed prefix', () => {
    const log = new RaftLog(new MemoryRaftStorage(), Number.POSITIVE_INFINITY);
    log.maybeAppend(0, 0, 1, [entry(1, 1), entry(2, 1), entry(3, 1)]);
    expect(log.maybeAppend(1, 1, 1, [entry(2, 2)])).toBe(2);
    expect(log.lastIndex()).toBe(2);
    expect(log.term(2)).toBe(2);
  });
});
