import { describe, expect, it } from 'vitest';
import { fromStorage } from '../../ts/chronacta/errors.js';
import { PlexusError } from '../../ts/core/errors.js';

describe('fromStorage: what the log engine and Raft say, as Chronacta codes', () => {
  it('an append refused during a leadership transfer is UNAVAILABLE with a known outcome, not INTERNAL', () => {
    const e = fromStorage(new PlexusError('PLX_RAFT_TRANSFER_IN_PROGRESS', 'transfer to 2 in progress'), 'append');
    expect(e.code).toBe('PLX_CHRONACTA_UNAVAILABLE');
    expect(e.details.outcomeUnknown).toBe(false);
    expect(e.message).toMatch(/leadership is moving/);
  });

  it('a timed-out proposal keeps its outcome unknown', () => {
    const e = fromStorage(new PlexusError('PLX_RAFT_TIMEOUT', 'no commit'), 'append');
    expect([e.code, e.details.outcomeUnknown]).toEqual(['PLX_CHRONACTA_UNAVAILABLE', true]);
  });

  it('an unknown failure is INTERNAL', () => {
    expect(fromStorage(new Error('boom'), 'append').code).toBe('PLX_CHRONACTA_INTERNAL');
  });
});
