/** The linearizability checker and the invariants on hand-made histories. */
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { History } from '../../ts/sim/history.js';
import { ReplicatedLogInvariants } from '../../ts/sim/invariants.js';
import { checkLinearizable } from '../../ts/sim/linearizability.js';
import { appendLogModel, type LogInput, type LogOutput } from '../../ts/sim/log-model.js';

type H = History<LogInput, LogOutput>;
const check = (h: H) => checkLinearizable(h.operations(), appendLogModel()).result;

function append(h: H, client: number, value: string, t: number): number {
  return h.invoke(client, { kind: 'append', value }, t);
}
function read(h: H, client: number, t: number): number {
  return h.invoke(client, { kind: 'read' }, t);
}

describe('linearizability checker (append-only log)', () => {
  it('accepts a sequential history', () => {
    const h: H = new History();
    h.ok(append(h, 1, 'a', 0), { position: 1 }, 1);
    h.ok(append(h, 1, 'b', 2), { position: 2 }, 3);
    h.ok(read(h, 2, 4), { values: ['a', 'b'] }, 5);
    expect(check(h)).toBe('ok');
  });

  it('accepts concurrent appends in either order', () => {
    const h: H = new History();
    const a = append(h, 1, 'a', 0);
    const b = append(h, 2, 'b', 0);
    h.ok(b, { position: 1 }, 3);
    h.ok(a, { position: 2 }, 4);
    expect(check(h)).toBe('ok');
  });

  it('refuses a stale read: a read that starts after an acknowledged append must see it', () => {
    const h: H = new History();
    h.ok(append(h, 1, 'a', 0), { position: 1 }, 1);
    h.ok(read(h, 2, 2), { values: [] }, 3);
    const r = checkLinearizable(h.operations(), appendLogModel());
    expect(r.result).toBe('violation');
    expect(r.unplaced.map((o) => o.input.kind)).toEqual(['read']);
  });

  it('refuses two appends acknowledged at the same position', () => {
    const h: H = new History();
    h.ok(append(h, 1, 'a', 0), { position: 1 }, 2);
    h.ok(append(h, 2, 'b', 1), { position: 1 }, 3);
    expect(check(h)).toBe('violation');
  });

  it('refuses positions that go backwards in real time', () => {
    const h: H = new History();
    h.ok(append(h, 1, 'a', 0), { position: 2 }, 1);
    h.ok(append(h, 1, 'b', 2), { position: 1 }, 3);
    expect(check(h)).toBe('violation');
  });

  it('an append with an unknown outcome may or may not have happened', () => {
    const seen: H = new History();
    append(seen, 1, 'x', 0); // never returns
    seen.ok(read(seen, 2, 5), { values: ['x'] }, 6);
    expect(check(seen)).toBe('ok');
    const unseen: H = new History();
    append(unseen, 1, 'x', 0);
    unseen.ok(read(unseen, 2, 5), { values: [] }, 6);
    expect(check(unseen)).toBe('ok');
    // ... but a value nobody appended can never be read.
    const ghost: H = new History();
    ghost.ok(read(ghost, 2, 5), { values: ['ghost'] }, 6);
    expect(check(ghost)).toBe('violation');
  });

  it('a read with a limit returns a prefix of the log', () => {
    const h: H = new History();
    h.ok(append(h, 1, 'a', 0), { position: 1 }, 1);
    h.ok(append(h, 1, 'b', 2), { position: 2 }, 3);
    h.ok(h.invoke(2, { kind: 'read', limit: 1 }, 4), { values: ['a'] }, 5);
    expect(check(h)).toBe('ok');
    const bad: H = new History();
    bad.ok(append(bad, 1, 'a', 0), { position: 1 }, 1);
    bad.ok(append(bad, 1, 'b', 2), { position: 2 }, 3);
    bad.ok(bad.invoke(2, { kind: 'read', limit: 1 }, 4), { values: ['b'] }, 5);
    expect(check(bad)).toBe('violation');
  });

  it('an append resolved as taken effect must be placed, with its position', () => {
    const h: H = new History();
    const lost = append(h, 1, 'x', 0);
    h.resolve(lost, { position: 1 });
    h.ok(append(h, 2, 'y', 5), { position: 2 }, 6);
    expect(check(h)).toBe('ok');
    const wrong: H = new History();
    const w = append(wrong, 1, 'x', 0);
    wrong.resolve(w, { position: 1 });
    wrong.ok(append(wrong, 2, 'y', 5), { position: 1 }, 6);
    expect(check(wrong)).toBe('violation');
  });

  it('handles a long concurrent history quickly thanks to memoization', () => {
    const h: H = new History();
    let pos = 0;
    for (let round = 0; round < 40; round++) {
      const ids = [1, 2, 3, 4].map((c) => append(h, c, `v${round}-${c}`, round));
      for (const id of ids) h.ok(id, { position: ++pos }, round + 0.5);
    }
    const r = checkLinearizable(h.operations(), appendLogModel());
    expect(r.result).toBe('ok');
    expect(r.statesExplored).toBeLessThan(20_000);
  });

  it('refuses a malformed history with PLX_SIM_BAD_HISTORY', () => {
    const h: H = new History();
    const id = append(h, 1, 'a', 0);
    h.ok(id, { position: 1 }, 1);
    try {
      h.ok(id, { position: 1 }, 2);
      expect.unreachable();
    } catch (e) {
      expect(isPlexusError(e, 'PLX_SIM_BAD_HISTORY')).toBe(true);
    }
  });
});

describe('replicated log invariants', () => {
  it('flags two leaders in one term, a lost entry, a commit going back and diverging positions', () => {
    const inv = new ReplicatedLogInvariants();
    inv.leader(2, 1, 0);
    inv.leader(2, 1, 1);
    expect(inv.violations).toEqual([]);
    inv.leader(2, 3, 2);
    inv.appliedEntry(1, 5, 2, 'a', 3);
    inv.appliedEntry(2, 5, 3, 'b', 4);
    inv.commit(1, 7, 5);
    inv.commit(1, 6, 6);
    inv.position(1, 1, 'x', 7);
    inv.position(2, 1, 'y', 8);
    inv.leaderLog(4, 1, () => 9, 9);
    expect(inv.violations.map((v) => v.rule)).toEqual([
      'election-safety',
      'state-machine-safety',
      'commit-monotonic',
      'replica-divergence',
      'leader-completeness',
    ]);
  });
});
