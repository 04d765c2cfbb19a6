/** The retry policy (ts/core/retry.ts) on a ManualClock with seeded randomness. */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { delay, RetryPolicy, retry } from '../../ts/core/retry.js';

/** A seeded uniform source in [0, 1) (splitmix32). */
function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return ((z ^ (z >>> 16)) >>> 0) / 2 ** 32;
  };
}

const take = (n: number, next: () => number | undefined) => Array.from({ length: n }, next);

describe('RetryPolicy delays', () => {
  it('none: doubles from the base up to the cap', () => {
    const b = new RetryPolicy({ baseMs: 50, capMs: 1000, jitter: 'none' }).start(new ManualClock());
    expect(take(8, () => b.next())).toEqual([50, 100, 200, 400, 800, 1000, 1000, 1000]);
    b.reset();
    expect(b.next()).toBe(50);
  });

  it('full: each delay within [0, min(cap, base * 2^n)], and they differ', () => {
    for (let seed = 1; seed <= 50; seed++) {
      const b = new RetryPolicy({ baseMs: 100, capMs: 5000, random: seeded(seed) }).start(new ManualClock());
      const ds = take(12, () => b.next()) as number[];
      ds.forEach((d, n) => {
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThanOrEqual(Math.min(5000, 100 * 2 ** n));
      });
      expect(new Set(ds).size).toBeGreaterThan(6);
    }
  });

  it('equal: each delay within [exp/2, exp]', () => {
    const b = new RetryPolicy({ baseMs: 100, capMs: 1000, jitter: 'equal', random: seeded(7) }).start(
      new ManualClock(),
    );
    (take(10, () => b.next()) as number[]).forEach((d, n) => {
      const exp = Math.min(1000, 100 * 2 ** n);
      expect(d).toBeGreaterThanOrEqual(exp / 2);
      expect(d).toBeLessThanOrEqual(exp);
    });
  });

  it('decorrelated: within [base, 3 * previous], never above the cap', () => {
    for (let seed = 1; seed <= 50; seed++) {
      const b = new RetryPolicy({ baseMs: 10, capMs: 300, jitter: 'decorrelated', random: seeded(seed) }).start(
        new ManualClock(),
      );
      let prev = b.next() as number;
      expect(prev).toBe(10);
      for (let i = 0; i < 20; i++) {
        const d = b.next() as number;
        expect(d).toBeGreaterThanOrEqual(10);
        expect(d).toBeLessThanOrEqual(Math.min(300, Math.max(10, prev * 3)));
        prev = d;
      }
    }
  });

  it('the random source at its ends gives the bounds exactly', () => {
    const low = new RetryPolicy({ baseMs: 100, capMs: 400, random: () => 0 }).start(new ManualClock());
    expect(take(4, () => low.next())).toEqual([0, 0, 0, 0]);
    const high = new RetryPolicy({ baseMs: 100, capMs: 400, jitter: 'equal', random: () => 1 - 2 ** -53 }).start(
      new ManualClock(),
    );
    expect((take(4, () => high.next()) as number[]).map(Math.round)).toEqual([100, 200, 400, 400]);
  });

  it('ends after maxAttempts delays', () => {
    const b = new RetryPolicy({ baseMs: 1, capMs: 10, jitter: 'none', maxAttempts: 3 }).start(new ManualClock());
    expect(take(5, () => b.next())).toEqual([1, 2, 4, undefined, undefined]);
  });

  it('trims the last delay to the deadline and ends once it passed', () => {
    const clock = new ManualClock(1000);
    const b = new RetryPolicy({ baseMs: 100, capMs: 1000, jitter: 'none', deadlineMs: 250 }).start(clock);
    expect(b.next()).toBe(100);
    clock.advance(100);
    expect(b.next()).toBe(150); // 200 due, 150 left
    clock.advance(150);
    expect(b.next()).toBeUndefined();
    b.reset();
    expect(b.next()).toBe(100);
  });

  it('refuses bad options with PLX_CORE_BAD_RETRY', () => {
    const bad = [
      { baseMs: -1, capMs: 10 },
      { baseMs: 10, capMs: 5 },
      { baseMs: 1, capMs: 5, factor: 0.5 },
      { baseMs: 1, capMs: 5, jitter: 'some' as 'full' },
      { baseMs: Number.NaN, capMs: 5 },
    ];
    for (const o of bad) {
      let err: unknown;
      try {
        new RetryPolicy(o);
      } catch (e) {
        err = e;
      }
      expect(isPlexusError(err, 'PLX_CORE_BAD_RETRY')).toBe(true);
    }
  });
});

describe('retry() and delay() on a manual clock', () => {
  it('waits the policy’s delays between attempts and returns the first success', async () => {
    const clock = new ManualClock();
    const times: number[] = [];
    const p = retry(
      async (attempt) => {
        times.push(clock.now());
        if (attempt < 3) throw new Error(`attempt ${attempt}`);
        return 'done';
      },
      new RetryPolicy({ baseMs: 10, capMs: 25, jitter: 'none' }),
      { clock },
    );
    for (let i = 0; i < 10 && clock.pending() === 0; i++) await Promise.resolve();
    for (let i = 0; i < 3; i++) {
      while (clock.pending() === 0) await new Promise((r) => setImmediate(r));
      clock.advanceTo(clock.nextDue() as number);
    }
    expect(await p).toBe('done');
    expect(times).toEqual([0, 10, 30, 55]);
  });

  it('rejects with the last error once the attempts are spent, and at once for an error not retryable', async () => {
    const clock = new ManualClock();
    const policy = new RetryPolicy({ baseMs: 5, capMs: 5, jitter: 'none', maxAttempts: 2 });
    let calls = 0;
    const p = retry(
      async () => {
        calls++;
        throw new Error(`failure ${calls}`);
      },
      policy,
      { clock },
    );
    const settled = p.catch((e: Error) => e.message);
    for (let i = 0; i < 2; i++) {
      while (clock.pending() === 0) await new Promise((r) => setImmediate(r));
      clock.advance(5);
    }
    expect(await settled).toBe('failure 3');
    const fatal = new Error('fatal');
    await expect(
      retry(
        async () => {
          throw fatal;
        },
        policy,
        { clock, retryable: (e) => e !== fatal },
      ),
    ).rejects.toBe(fatal);
    expect(clock.pending()).toBe(0);
  });

  it('an abort stops the wait in progress with PLX_CORE_ABORTED and clears its timer', async () => {
    const clock = new ManualClock();
    const ac = new AbortController();
    let calls = 0;
    const p = retry(
      async () => {
        calls++;
        throw new Error('down');
      },
      new RetryPolicy({ baseMs: 1000, capMs: 1000, jitter: 'none' }),
      { clock, signal: ac.signal },
    );
    while (clock.pending() === 0) await new Promise((r) => setImmediate(r));
    ac.abort(new Error('shutting down'));
    const err = await p.catch((e) => e);
    expect(isPlexusError(err, 'PLX_CORE_ABORTED')).toBe(true);
    expect(clock.pending()).toBe(0);
    expect(calls).toBe(1);
    await expect(delay(10, clock, ac.signal)).rejects.toMatchObject({ code: 'PLX_CORE_ABORTED' });
  });

  it('delay resolves when the manual clock reaches it, not before', async () => {
    const clock = new ManualClock();
    let done = false;
    const p = delay(40, clock).then(() => {
      done = true;
    });
    clock.advance(39);
    await Promise.resolve();
    expect(done).toBe(false);
    clock.advance(1);
    await p;
    expect(done).toBe(true);
  });
});
