/**
 * Majority arithmetic over the voters: the committed index and election results. A simple
 * reference version (test/raft/quorum.test.ts) checks these against brute force.
 */

/** The largest index that a majority of `voters` has matched (missing voters count as 0). */
export function majorityCommitted(voters: ReadonlySet<number>, match: (id: number) => number): number {
  if (voters.size === 0) return 0;
  const idx = [...voters].map(match).sort((a, b) => b - a);
  return idx[Math.floor(idx.length / 2)]!;
}

export type VoteResult = 'won' | 'lost' | 'pending';

export function voteResult(voters: ReadonlySet<number>, votes: ReadonlyMap<number, boolean>): VoteResult {
  const need = Math.floor(voters.size / 2) + 1;
  let granted = 0;
  let rejected = 0;
  for (const v of voters) {
    const r = votes.get(v);
    if (r === true) granted++;
    else if (r === false) rejected++;
  }
  if (granted >= need) return 'won';
  if (voters.size - rejected < need) return 'lost';
  return 'pending';
}

export function hasQuorum(voters: ReadonlySet<number>, ids: ReadonlySet<number>): boolean {
  let n = 0;
  for (const v of voters) if (ids.has(v)) n++;
  return n >= Math.floor(voters.size / 2) + 1;
}
