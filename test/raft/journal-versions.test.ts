/**
 * The Raft journal records changed from big-endian without a version (version 1) to
 * little-endian version 2. A data directory written by version 1 (test/fixtures/raft/journal-v1,
 * made by test/fixtures/raft/write-journal-v1.mjs) still opens with the same entries, hard state
 * and snapshot; new writes are version 2, and a journal holding both reads back.
 */
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { FileRaftStorage } from '../../ts/raft/file-storage.js';
import type { Entry } from '../../ts/raft/types.js';

const FIXTURE = join(import.meta.dirname, '../fixtures/raft/journal-v1');
const dirs: string[] = [];
afterEach(async () => {
  while (dirs.length > 0) await rm(dirs.pop()!, { recursive: true, force: true });
});
async function copyOfFixture(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-raft-v1-'));
  dirs.push(d);
  await cp(FIXTURE, d, { recursive: true });
  return d;
}
const dec = new TextDecoder();
const show = (es: Entry[]) => es.map((x) => `${x.term}/${x.index} ${x.type} ${dec.decode(x.data)}`);

describe('Raft journal written by record version 1', () => {
  it('opens with the same snapshot, hard state and entries', async () => {
    const s = await FileRaftStorage.open(await copyOfFixture());
    expect(s.firstIndex()).toBe(4);
    expect(s.lastIndex()).toBe(7);
    expect(show(s.entries(4, 8))).toEqual([
      '2/4 normal gamma',
      '2/5 normal delta',
      '5/6 normal epsilon',
      '5/7 conf-change {"voters":[1,2,3]}',
    ]);
    expect(s.snapshot().metadata).toEqual({ index: 3, term: 2, confState: { voters: [1, 2, 3], learners: [4] } });
    expect(dec.decode(s.snapshot().data)).toBe('snapshot at 3');
    expect(s.initialState().hardState).toEqual({ term: 5, vote: 1, commit: 6 });
    expect(s.initialState().confState).toEqual({ voters: [1, 2, 3], learners: [4] });
    await s.close();
  });
});
