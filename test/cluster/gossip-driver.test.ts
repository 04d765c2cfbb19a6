/**
 * The gossip driver (ts/cluster/gossip/driver.ts) runs the same `Swim` on a ManualClock and on
 * real time. Members talk through an in-process bus that encodes and decodes every message
 * (ts/codec/gossip.ts) and delivers it after a delay on the same clock; the transport over the
 * cluster's mutual-TLS connections is not part of this test.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_DETECTOR_CONFIG } from '../../ts/cluster/config.js';
import { gossipConfigFor } from '../../ts/cluster/gossip/config.js';
import { driveSwim, type SwimDriver } from '../../ts/cluster/gossip/driver.js';
import { Swim } from '../../ts/cluster/gossip/swim.js';
import { decodeGossip, encodeGossip } from '../../ts/codec/gossip.js';
import { type ClockTimers, ManualClock, monotonicClock } from '../../ts/core/clock.js';
import { SimRandom } from '../../ts/sim/rng.js';
import { until } from '../helpers/until.js';

interface Cluster {
  readonly swims: Swim[];
  readonly drivers: SwimDriver[];
  readonly names: string[];
}

function cluster(size: number, clock: ClockTimers, config = {}, delayMs = 2): Cluster {
  const names = Array.from({ length: size }, (_, i) => `n${i}`);
  const drivers: SwimDriver[] = [];
  const rng = new SimRandom(42);
  const swims = names.map(
    (name) =>
      new Swim({
        name,
        config,
        random: rng.fork(),
        now: clock.now(),
        send: (to, m) => {
          const bytes = encodeGossip(m);
          const i = names.indexOf(to);
          clock.setTimeout(() => drivers[i]?.deliver(decodeGossip(bytes)), delayMs);
        },
      }),
  );
  for (const s of swims) drivers.push(driveSwim(s, clock));
  for (let i = 1; i < size; i++) {
    swims[i]?.join([names[0] as string], clock.now());
    drivers[i]?.poke();
  }
  return { swims, drivers, names };
}

const allAlive = (c: Cluster, except = -1) =>
  c.swims.every(
    (s, i) =>
      i === except ||
      (s
        .members()
        .filter((v) => v.name !== c.names[except])
        .every((v) => v.state === 'alive') &&
        s.members().length === c.names.length),
  );

describe('the gossip driver', () => {
  it('on a ManualClock: members converge, and a stopped one is failed everywhere within 10 s', () => {
    const clock = new ManualClock(1_000);
    const c = cluster(6, clock);
    clock.advance(15_000);
    expect(allAlive(c)).toBe(true);
    c.drivers[4]?.stop();
    clock.advance(DEFAULT_DETECTOR_CONFIG.failedAfterMs);
    for (const [i, s] of c.swims.entries()) {
      if (i !== 4) expect(s.member('n4')?.state, `n${i}'s view of n4`).toBe('dead');
    }
    expect(allAlive(c, 4)).toBe(true);
    for (const d of c.drivers) d.stop();
    // Stopped drivers leave no timer behind but the bus's deliveries, which do nothing.
    clock.advance(100);
    expect(clock.pending()).toBe(0);
  });

  it('on real time: members converge, and a stopped one is failed everywhere', async () => {
    // A detector ten times faster than the default: probes every 100 ms.
    const config = gossipConfigFor({ suspectAfterMs: 300, failedAfterMs: 1_000 });
    const c = cluster(5, monotonicClock, config, 1);
    try {
      await until(() => allAlive(c), { what: 'every member alive in every table', timeoutMs: 20_000 });
      c.drivers[2]?.stop();
      const stoppedAt = performance.now();
      await until(() => c.swims.every((s, i) => i === 2 || s.member('n2')?.state === 'dead'), {
        what: 'n2 failed in every table',
        timeoutMs: 20_000,
      });
      // Nobody fails it before the minimum suspicion timeout (3 x 1 x 100 ms for 5 members) ran out.
      expect(performance.now() - stoppedAt).toBeGreaterThanOrEqual(config.suspicionMult * config.probeIntervalMs);
      await until(() => allAlive(c, 2), { what: 'the other members alive everywhere', timeoutMs: 20_000 });
    } finally {
      for (const d of c.drivers) d.stop();
    }
  }, 60_000);
});
