import { describe, expect, it } from 'vitest';
import { every, ManualClock, monotonicClock, systemClock, timersOf } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';

describe('ManualClock', () => {
  it('fires due timers in due order, then scheduling order, and leaves later ones pending', () => {
    const c = new ManualClock(100);
    const seen: string[] = [];
    c.setTimeout(() => seen.push('b30'), 30);
    c.setTimeout(() => seen.push('a10'), 10);
    c.setTimeout(() => seen.push('c10'), 10);
    c.setTimeout(() => seen.push('late'), 500);
    c.advance(30);
    expect(seen).toEqual(['a10', 'c10', 'b30']);
    expect(c.now()).toBe(130);
    expect(c.pending()).toBe(1);
    expect(c.nextDue()).toBe(600);
  });

  it('runs a timer scheduled by a firing callback within the same advance when it falls due', () => {
    const c = new ManualClock();
    const at: number[] = [];
    c.setTimeout(() => {
      at.push(c.now());
      c.setTimeout(() => at.push(c.now()), 5);
    }, 5);
    c.advance(10);
    expect(at).toEqual([5, 10]);
  });

  it('cancels a cleared timer and refuses to go back', () => {
    const c = new ManualClock(10);
    let fired = false;
    const h = c.setTimeout(() => {
      fired = true;
    }, 1);
    c.clearTimeout(h);
    c.advance(5);
    expect(fired).toBe(false);
    expect(c.pending()).toBe(0);
    let err: unknown;
    try {
      c.advanceTo(3);
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_CORE_CLOCK_BACKWARDS')).toBe(true);
    expect(c.now()).toBe(15);
  });

  it('systemClock reads wall time and its timers fire', async () => {
    const before = Date.now();
    expect(systemClock.now()).toBeGreaterThanOrEqual(before);
    await new Promise<void>((resolve) => systemClock.setTimeout(resolve, 1));
  });

  it('every repeats on the timers it is given, only as that clock moves, until stopped', () => {
    const c = new ManualClock(0);
    const at: number[] = [];
    const r = every(c, 10, () => at.push(c.now()));
    c.advance(9);
    expect(at).toEqual([]);
    c.advance(1);
    expect(at).toEqual([10]);
    c.advance(25);
    expect(at).toEqual([10, 20, 30]);
    r.stop();
    c.advance(100);
    expect(at).toEqual([10, 20, 30]);
    expect(c.pending()).toBe(0);
  });

  it('every keeps going after a call that throws, and a call that stops it ends it', () => {
    const c = new ManualClock(0);
    let calls = 0;
    const r = every(c, 5, () => {
      calls++;
      if (calls === 1) throw new Error('first call fails');
      if (calls === 3) r.stop();
    });
    expect(() => c.advance(5)).toThrow('first call fails');
    c.advance(20);
    expect(calls).toBe(3);
    expect(c.pending()).toBe(0);
  });

  it('timersOf takes the timers of a clock that has them, else the fallback', () => {
    const c = new ManualClock(0);
    expect(timersOf(c, monotonicClock)).toBe(c);
    expect(timersOf({ now: () => 1 }, monotonicClock)).toBe(monotonicClock);
    expect(timersOf(undefined, systemClock)).toBe(systemClock);
  });
});
