/**
 * The lease authority's host runs its tick on the timers of the clock it is given: on a
 * ManualClock, a silent member is judged failed only when that clock moves past the detector's
 * bound, never by wall time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { AuthorityReady } from '../../ts/cluster/authority.js';
import { AuthorityHost } from '../../ts/cluster/host.js';
import { ManualClock } from '../../ts/core/clock.js';

const meta = { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 };

describe('AuthorityHost on a manual clock', () => {
  let host: AuthorityHost | undefined;
  afterEach(() => host?.close());

  it('ticks only as the clock moves: a silent member fails at the bound, not before', async () => {
    const clock = new ManualClock(1000);
    const seen: AuthorityReady[] = [];
    host = new AuthorityHost({
      meta,
      members: ['a', 'b'].map((id) => ({ id, address: '' })),
      lease: { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 },
      detector: { suspectAfterMs: 100, failedAfterMs: 300 },
      autoAssign: false,
      clock,
      tickEveryMs: 10,
      onReady: (r) => seen.push(r),
    });
    const joined = await host.call({ type: 'join', node: 'a', address: '', meta });
    expect(joined.ok).toBe(true);
    const failed = () => seen.flatMap((r) => r.health).filter((h) => h.node === 'a' && h.to === 'failed');
    // Wall time passes, the manual clock does not: the host's timers wait for it.
    await new Promise((r) => setTimeout(r, 50));
    expect(clock.pending()).toBe(1);
    clock.advance(290);
    expect(failed()).toEqual([]);
    clock.advance(20);
    expect(failed().length).toBe(1);
    host.close();
    expect(clock.pending()).toBe(0);
  });
});
