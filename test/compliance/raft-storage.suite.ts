/**
 * The compliance suite of the RaftStorage seam (ts/raft/storage.ts). Every implementation runs
 * it with a factory that makes a fresh storage; `reopen` returns the same storage as a
 * restarted process would see it (the in-memory one returns itself).
 */
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import type { RaftStorage, RaftStorageWriter } from '../../ts/raft/storage.js';
import type { Entry } from '../../ts/raft/types.js';

export type WritableRaftStorage = RaftStorage & RaftStorageWriter;

export interface RaftStorageHarness {
  readonly storage: WritableRaftStorage;
  reopen(): Promise<WritableRaftStorage>;
  teardown(): Promise<void>;
}

export type RaftStorageFactory = () => Promise<RaftStorageHarness>;

const enc = new TextEncoder();
const e = (index: number, term: number, text = `e${index}`): Entry => ({
  index,
  term,
  type: 'normal',
  data: enc.encode(text),
});

function code(f: () => unknown): string {
  try {
    f();
  } catch (err) {
    if (isPlexusError(err)) return err.code;
    throw err;
  }
  return 'none';
}

export function raftStorageSuite(name: string, factory: RaftStorageFactory): void {
  describe(`RaftStorage compliance: ${name}`, () => {
    const withStorage = (f: (h: RaftStorageHarness) => Promise<void> | void) => async () => {
      const h = await factory();
      try {
        await f(h);
      } finally {
        await h.teardown();
      }
    };

    it(
      'starts empty: first index 1, last index 0, term(0) is 0',
      withStorage(({ storage: s }) => {
        expect(s.firstIndex()).toBe(1);
        expect(s.lastIndex()).toBe(0);
        expect(s.term(0)).toBe(0);
        expect(s.initialState().hardState).toEqual({ term: 0, vote: 0, commit: 0 });
      }),
    );

    it(
      'appends, reads ranges and replaces a conflicting suffix',
      withStorage(({ storage: s }) => {
        s.append([e(1, 1), e(2, 1), e(3, 2)]);
        expect(s.lastIndex()).toBe(3);
        expect(s.entries(2, 4).map((x) => x.index)).toEqual([2, 3]);
        s.append([e(3, 3, 'new'), e(4, 3)]);
        expect(s.term(3)).toBe(3);
        expect(s.lastIndex()).toBe(4);
        s.append([e(2, 4)]);
        expect(s.lastIndex()).toBe(2);
        expect(code(() => s.term(3))).toBe('PLX_RAFT_UNAVAILABLE');
        expect(code(() => s.entries(1, 9))).toBe('PLX_RAFT_UNAVAILABLE');
        expect(code(() => s.append([e(5, 4)]))).toBe('PLX_RAFT_UNAVAILABLE');
      }),
    );

    it(
      'limits a read by bytes but always returns one entry',
      withStorage(({ storage: s }) => {
        s.append([e(1, 1, 'aaaa'), e(2, 1, 'bbbb'), e(3, 1, 'cccc')]);
        expect(s.entries(1, 4, 1).length).toBe(1);
        expect(s.entries(1, 4, 8).length).toBe(2);
        expect(s.entries(1, 4).length).toBe(3);
      }),
    );

    it(
      'compacts behind a snapshot; compacted entries are refused, the snapshot term answers',
      withStorage(({ storage: s }) => {
        s.append([e(1, 1), e(2, 1), e(3, 2), e(4, 2)]);
        const cs = { voters: [1, 2, 3], learners: [] };
        s.compact({ metadata: { index: 3, term: 2, confState: cs }, data: enc.encode('s3') });
        expect(s.firstIndex()).toBe(4);
        expect(s.lastIndex()).toBe(4);
        expect(s.term(3)).toBe(2);
        expect(code(() => s.term(2))).toBe('PLX_RAFT_COMPACTED');
        expect(code(() => s.entries(3, 5))).toBe('PLX_RAFT_COMPACTED');
        expect(s.snapshot().metadata.index).toBe(3);
        expect(s.initialState().confState).toEqual(cs);
        expect(code(() => s.compact({ metadata: { index: 2, term: 1, confState: cs }, data: new Uint8Array() }))).toBe(
          'PLX_RAFT_SNAPSHOT_OUT_OF_DATE',
        );
        // Entries below the first index are skipped on append.
        s.append([e(3, 2), e(4, 2), e(5, 2)]);
        expect(s.lastIndex()).toBe(5);
      }),
    );

    it(
      'a received snapshot replaces the whole log; an older one is refused',
      withStorage(({ storage: s }) => {
        s.append([e(1, 1), e(2, 1)]);
        const cs = { voters: [1], learners: [2] };
        s.applySnapshot({ metadata: { index: 10, term: 4, confState: cs }, data: enc.encode('x') });
        expect(s.firstIndex()).toBe(11);
        expect(s.lastIndex()).toBe(10);
        expect(s.term(10)).toBe(4);
        expect(
          code(() => s.applySnapshot({ metadata: { index: 5, term: 4, confState: cs }, data: new Uint8Array() })),
        ).toBe('PLX_RAFT_SNAPSHOT_OUT_OF_DATE');
      }),
    );

    it(
      'keeps the hard state, log and snapshot across a reopen',
      withStorage(async (h) => {
        h.storage.append([e(1, 1), e(2, 2)]);
        h.storage.setHardState({ term: 2, vote: 3, commit: 1 });
        const s = await h.reopen();
        expect(s.initialState().hardState).toEqual({ term: 2, vote: 3, commit: 1 });
        expect(s.entries(1, 3).map((x) => [x.index, x.term])).toEqual([
          [1, 1],
          [2, 2],
        ]);
      }),
    );
  });
}
