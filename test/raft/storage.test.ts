/** MemoryRaftStorage passes the RaftStorage compliance suite. */
import { describe, expect, it } from 'vitest';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import { raftStorageSuite } from '../compliance/raft-storage.suite.js';

raftStorageSuite('MemoryRaftStorage', async () => {
  const storage = new MemoryRaftStorage();
  return { storage, reopen: async () => storage, teardown: async () => {} };
});

describe('MemoryRaftStorage.bootstrap', () => {
  it('starts a founding member at a snapshot 1/1 holding the configuration', () => {
    const s = MemoryRaftStorage.bootstrap({ voters: [1, 2, 3], learners: [] });
    expect(s.firstIndex()).toBe(2);
    expect(s.lastIndex()).toBe(1);
    expect(s.term(1)).toBe(1);
    expect(s.initialState()).toEqual({
      hardState: { term: 1, vote: 0, commit: 1 },
      confState: { voters: [1, 2, 3], learners: [] },
    });
  });
});
