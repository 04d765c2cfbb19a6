import { describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../../ts/core/clock.js';
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
});
