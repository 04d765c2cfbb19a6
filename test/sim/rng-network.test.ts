/** The simulator's randomness and network. */
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { VirtualClock } from '../../ts/sim/clock.js';
import { SimNetwork } from '../../ts/sim/network.js';
import { SimRandom } from '../../ts/sim/rng.js';

describe('SimRandom', () => {
  it('is a pure function of the seed', () => {
    const a = new SimRandom(99);
    const b = new SimRandom(99);
    const xs = Array.from({ length: 100 }, () => a.next());
    expect(Array.from({ length: 100 }, () => b.next())).toEqual(xs);
    expect(new SimRandom(100).next()).not.toBe(xs[0]);
  });

  it('int(n) stays in range and covers it evenly', () => {
    const r = new SimRandom(5);
    const counts = new Array(10).fill(0);
    for (let i = 0; i < 20_000; i++) counts[r.int(10)]++;
    for (const c of counts) expect(Math.abs(c - 2000)).toBeLessThan(200);
  });

  it('refuses bad arguments with PLX_SIM_BAD_CONFIG', () => {
    for (const f of [() => new SimRandom(-1), () => new SimRandom(1).int(0), () => new SimRandom(1).pick([])]) {
      try {
        f();
        expect.unreachable();
      } catch (e) {
        expect(isPlexusError(e, 'PLX_SIM_BAD_CONFIG')).toBe(true);
      }
    }
  });
});

describe('SimNetwork', () => {
  const opts = { minDelay: 1, maxDelay: 50, dropRate: 0, duplicateRate: 0 };

  it('delivers in time order, reordering messages sent in sequence', () => {
    const net = new SimNetwork<number>(new SimRandom(3), opts);
    for (let i = 0; i < 50; i++) net.send(1, 2, i, 0);
    const got = net.takeDue(1000).map((m) => m.msg);
    expect([...got].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(got).not.toEqual([...got].sort((a, b) => a - b));
  });

  it('drops and duplicates at the configured rates', () => {
    const net = new SimNetwork<number>(new SimRandom(4), { ...opts, dropRate: 0.2, duplicateRate: 0.1 });
    for (let i = 0; i < 5000; i++) net.send(1, 2, i, 0);
    expect(Math.abs(net.stats.dropped - 1000)).toBeLessThan(150);
    expect(net.takeDue(1000).length).toBe(5000 - net.stats.dropped + net.stats.duplicated);
  });

  it('partitions stop messages sent across them and those in flight when they start', () => {
    const net = new SimNetwork<string>(new SimRandom(5), opts);
    net.send(1, 2, 'before', 0);
    net.partition([[1], [2, 3]]);
    net.send(1, 3, 'across', 0);
    net.send(2, 3, 'inside', 0);
    expect(net.takeDue(100).map((m) => m.msg)).toEqual(['inside']);
    net.heal();
    net.send(1, 3, 'healed', 100);
    expect(net.takeDue(200).map((m) => m.msg)).toEqual(['healed']);
  });

  it('the virtual clock never goes back', () => {
    const c = new VirtualClock();
    c.advance(5);
    expect(c.now()).toBe(5);
    expect(() => c.advanceTo(4)).toThrow(/cannot go back/);
  });
});
