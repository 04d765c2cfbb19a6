/**
 * SWIM gossip with Lifeguard (ts/cluster/gossip/swim.ts) on simulated time, seeded and
 * deterministic (test/cluster/gossip-sim.ts). PLEXUS_SIM_SEEDS=N runs N seeds per scenario
 * (default 24), from PLEXUS_SIM_FIRST_SEED (default 1); a failing seed prints the command that
 * replays it alone.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_DETECTOR_CONFIG } from '../../ts/cluster/config.js';
import { DEFAULT_GOSSIP_CONFIG, gossipConfig, gossipConfigFor } from '../../ts/cluster/gossip/config.js';
import { Swim } from '../../ts/cluster/gossip/swim.js';
import type { GossipMessage, GossipUpdate } from '../../ts/codec/gossip.js';
import { isPlexusError } from '../../ts/core/index.js';
import { SimRandom } from '../../ts/sim/rng.js';
import { GossipSim, memberName } from './gossip-sim.js';

const SEEDS = Number(process.env.PLEXUS_SIM_SEEDS ?? 24);
const FIRST = Number(process.env.PLEXUS_SIM_FIRST_SEED ?? 1);
const FILE = 'test/cluster/gossip-sim.test.ts';
const { suspectAfterMs, failedAfterMs } = DEFAULT_DETECTOR_CONFIG;

/** Runs `fn` for each seed; a failure names its seed and how to replay it. */
function eachSeed(title: string, fn: (seed: number) => void): void {
  for (let seed = FIRST; seed < FIRST + SEEDS; seed++) {
    try {
      fn(seed);
    } catch (e) {
      const replay = `PLEXUS_SIM_FIRST_SEED=${seed} PLEXUS_SIM_SEEDS=1 npx vitest run ${FILE} -t "${title}"`;
      throw new Error(`seed ${seed} failed: ${(e as Error).message}\nReplay: ${replay}`, { cause: e });
    }
  }
}

/** A cluster of `size` members joined through member 0 and settled for 25 s. */
function settled(seed: number, size: number, config = {}): GossipSim {
  const sim = new GossipSim({ seed, size, config });
  sim.joinAll();
  sim.runUntil(25_000);
  return sim;
}

const sizeOf = (seed: number) => 5 + (seed % 16);

describe('gossip membership on simulated time', () => {
  it('converges: 5 to 20 members joining through one seed member all see each other alive', () => {
    eachSeed('converges', (seed) => {
      const size = sizeOf(seed);
      const sim = settled(seed, size);
      for (const m of sim.members) {
        const views = m.swim.members();
        expect(
          views.map((v) => v.name),
          `${m.name}'s table`,
        ).toEqual(sim.members.map((x) => x.name));
        expect(
          views.filter((v) => v.state !== 'alive'),
          `${m.name} sees everyone alive`,
        ).toEqual([]);
      }
      expect(sim.changes.filter((c) => c.to === 'dead' || c.to === 'suspect')).toEqual([]);
    });
  });

  it('is a function of its seed', () => {
    const a = settled(FIRST, 9);
    const b = settled(FIRST, 9);
    a.kill(3);
    b.kill(3);
    a.runUntil(40_000);
    b.runUntil(40_000);
    expect(a.changes.length).toBeGreaterThan(9 * 8);
    expect(b.changes).toEqual(a.changes);
    expect(b.net.stats).toEqual(a.net.stats);
  });

  it('declares a killed member failed everywhere within the failure bound, and nobody else', () => {
    const firstSuspicion: number[] = [];
    eachSeed('killed member', (seed) => {
      const size = sizeOf(seed);
      const sim = settled(seed, size);
      const victim = 1 + sim.rng.int(size - 1);
      const killedAt = sim.now;
      sim.kill(victim);
      sim.runUntil(killedAt + failedAfterMs);
      const name = memberName(victim);
      for (const m of sim.members) {
        if (m.id === victim) continue;
        expect(sim.view(m.id, victim), `${m.name} sees ${name} failed ${failedAfterMs} ms after the kill`).toBe('dead');
      }
      const wrong = sim.changes.filter((c) => c.to === 'dead' && c.member !== name);
      expect(wrong, 'healthy members declared failed').toEqual([]);
      const s = sim.changes.find((c) => c.member === name && c.to === 'suspect');
      firstSuspicion.push((s?.at ?? Number.POSITIVE_INFINITY) - killedAt);
    });
    firstSuspicion.sort((a, b) => a - b);
    // The first suspicion comes one to two probe intervals after the kill, the median by 3 s.
    expect(firstSuspicion[firstSuspicion.length >> 1]).toBeLessThanOrEqual(suspectAfterMs);
  });

  // Gossip is probabilistic: a refutation can miss the one member whose suspicion then times
  // out. Measured over seeds 1..200: 2 runs of 200 with one false failure behind a lossy link;
  // with a starved member, 3 with Lifeguard against 675 without. The bounds below allow one
  // false failure per 20 runs and require Lifeguard to cut them twentyfold.
  it('does not declare a member behind a lossy link (10-30% loss) failed: indirect probes reach it', () => {
    let falseFailures = 0;
    let suspicions = 0;
    eachSeed('lossy link', (seed) => {
      const size = sizeOf(seed);
      const sim = settled(seed, size);
      const x = 1 + sim.rng.int(size - 1);
      sim.lossy.set(x, 0.1 + sim.rng.float() * 0.2);
      const from = sim.now;
      sim.runUntil(from + 90_000);
      const ofX = sim.changes.filter((c) => c.at >= from && c.member === memberName(x));
      suspicions += ofX.filter((c) => c.to === 'suspect').length;
      falseFailures += sim.changes.filter((c) => c.to === 'dead').length;
      // Once the link is good again, every table has it alive (it refuted whatever was said).
      sim.lossy.delete(x);
      sim.runUntil(sim.now + failedAfterMs + DEFAULT_GOSSIP_CONFIG.pushPullIntervalMs);
      for (const m of sim.members) expect(sim.view(m.id, x), `${m.name}'s view at the end`).toBe('alive');
    });
    // The link did lose probes (the member was suspected and refuted), yet it was hardly ever failed.
    expect(suspicions).toBeGreaterThan(SEEDS);
    expect(falseFailures).toBeLessThanOrEqual(Math.ceil(SEEDS / 20));
  });

  it('with Lifeguard, a starved member (paused 1-4 s at a time) makes far fewer healthy members fail', () => {
    let withLifeguard = 0;
    let without = 0;
    let lifeguardScores = 0;
    eachSeed('starved member', (seed) => {
      const size = 5 + (seed % 4);
      for (const lifeguard of [true, false]) {
        const sim = settled(seed, size, { lifeguard });
        const slow = 1 + sim.rng.int(size - 1);
        const from = sim.now;
        sim.starve(slow, [1_000, 4_000], [500, 3_000]);
        sim.runUntil(from + 120_000);
        const falsePositives = sim.changes.filter((c) => c.to === 'dead' && c.member !== memberName(slow)).length;
        if (lifeguard) {
          withLifeguard += falsePositives;
          lifeguardScores += sim.members[slow]?.swim.awareness ?? 0;
        } else {
          without += falsePositives;
          expect(sim.members[slow]?.swim.awareness, 'no health score without Lifeguard').toBe(0);
        }
      }
    });
    expect(without, 'healthy members failed without Lifeguard').toBeGreaterThan(SEEDS);
    expect(withLifeguard, 'healthy members failed with Lifeguard').toBeLessThanOrEqual(Math.ceil(SEEDS / 20));
    expect(withLifeguard * 20).toBeLessThanOrEqual(without);
    // The starved member knows it is the slow one.
    expect(lifeguardScores).toBeGreaterThan(0);
  });

  it('refutes: a member suspected at its incarnation raises it, and everyone takes the new alive', () => {
    eachSeed('refutes', (seed) => {
      const size = 5 + (seed % 6);
      const sim = settled(seed, size);
      const target = 1 + sim.rng.int(size - 1);
      const teller = (target % (size - 1)) + 1 === target ? 0 : (target % (size - 1)) + 1;
      const name = memberName(target);
      const before = sim.members[target]?.swim.incarnation ?? -1;
      // One member is told the target is suspect (as a lost probe would make it).
      sim.members[teller]?.swim.step(
        {
          kind: 'gossip',
          from: memberName(teller),
          updates: [{ state: 'suspect', member: name, incarnation: before, from: memberName(teller) }],
        },
        sim.now,
      );
      expect(sim.view(teller, target)).toBe('suspect');
      sim.runUntil(sim.now + failedAfterMs);
      expect(sim.members[target]?.swim.incarnation).toBe(before + 1);
      for (const m of sim.members) {
        expect(m.swim.member(name), `${m.name}'s view of ${name}`).toEqual({
          name,
          state: 'alive',
          incarnation: before + 1,
        });
      }
      expect(sim.changes.filter((c) => c.to === 'dead')).toEqual([]);
    });
  });

  it('brings a member cut off by a partition, and failed, back as alive once the partition heals', () => {
    eachSeed('partition heals', (seed) => {
      const size = sizeOf(seed);
      const sim = settled(seed, size);
      const x = 1 + sim.rng.int(size - 1);
      const name = memberName(x);
      const before = sim.members[x]?.swim.incarnation ?? -1;
      const others = sim.members.filter((m) => m.id !== x).map((m) => m.id);
      sim.net.partition([others, [x]]);
      // A short partition, or one long enough for the cut-off member to fail everyone else too.
      const long = seed % 2 === 1;
      sim.runUntil(sim.now + (long ? 180_000 : 2 * failedAfterMs));
      for (const id of others) expect(sim.view(id, x), `${memberName(id)} sees ${name} failed`).toBe('dead');
      // The cut-off member suspects the others too, slowly: its failing probes and missing nacks
      // raise its health score, which stretches its probe interval (Lifeguard).
      expect(sim.members[x]?.swim.awareness).toBeGreaterThan(0);
      if (long) {
        for (const id of others) expect(sim.view(x, id), `${name} sees ${memberName(id)} failed`).toBe('dead');
      }
      sim.net.heal();
      // Within two push-pull intervals every table is whole again.
      sim.runUntil(sim.now + 2 * DEFAULT_GOSSIP_CONFIG.pushPullIntervalMs + failedAfterMs);
      for (const m of sim.members) {
        expect(
          m.swim.members().filter((v) => v.state !== 'alive'),
          `${m.name} sees everyone alive after the heal`,
        ).toEqual([]);
      }
      expect(sim.members[x]?.swim.incarnation).toBeGreaterThan(before);
    });
  });

  it('marks a member that leaves as left, never failed', () => {
    eachSeed('leaves', (seed) => {
      const size = sizeOf(seed);
      const sim = settled(seed, size);
      const leaver = 1 + sim.rng.int(size - 1);
      const name = memberName(leaver);
      const at = sim.now;
      sim.members[leaver]?.swim.leave(at);
      sim.runUntil(at + 3_000);
      sim.kill(leaver);
      sim.runUntil(at + 3 * failedAfterMs);
      for (const m of sim.members) {
        if (m.id === leaver) continue;
        expect(sim.view(m.id, leaver), `${m.name} sees ${name} left`).toBe('left');
      }
      expect(sim.changes.filter((c) => c.to === 'dead' || (c.member === name && c.to === 'suspect'))).toEqual([]);
    });
  });
});

/** One member whose messages are kept for the test to read and answer. */
function lone(config = {}): { swim: Swim; sent: { to: string; m: GossipMessage }[] } {
  const sent: { to: string; m: GossipMessage }[] = [];
  const swim = new Swim({ name: 'a', config, random: new SimRandom(7), now: 0, send: (to, m) => sent.push({ to, m }) });
  return { swim, sent };
}

const gossip = (...updates: GossipUpdate[]): GossipMessage => ({ kind: 'gossip', from: 'z', updates });
const u = (state: GossipUpdate['state'], member: string, incarnation: number, from = 'z'): GossipUpdate => ({
  state,
  member,
  incarnation,
  from,
});

describe('gossip membership rules', () => {
  it('orders by incarnation: a stale suspicion never overrides a newer alive, alive needs a greater one', () => {
    const { swim } = lone();
    const at = (x: GossipUpdate) => {
      swim.step(gossip(x), 1);
      return swim.member('b');
    };
    expect(at(u('alive', 'b', 5))).toEqual({ name: 'b', state: 'alive', incarnation: 5 });
    expect(at(u('suspect', 'b', 4))?.state).toBe('alive');
    expect(at(u('dead', 'b', 4))?.state).toBe('alive');
    expect(at(u('suspect', 'b', 5))).toEqual({ name: 'b', state: 'suspect', incarnation: 5 });
    expect(at(u('alive', 'b', 5))?.state).toBe('suspect');
    expect(at(u('alive', 'b', 6))).toEqual({ name: 'b', state: 'alive', incarnation: 6 });
    expect(at(u('suspect', 'b', 5))?.state).toBe('alive');
    expect(at(u('dead', 'b', 6))).toEqual({ name: 'b', state: 'dead', incarnation: 6 });
    expect(at(u('alive', 'b', 6))?.state).toBe('dead');
    expect(at(u('suspect', 'b', 6))?.state).toBe('dead');
    expect(at(u('alive', 'b', 7))).toEqual({ name: 'b', state: 'alive', incarnation: 7 });
    expect(at(u('left', 'b', 8))).toEqual({ name: 'b', state: 'left', incarnation: 8 });
    // A suspicion about an unknown member is not a membership.
    swim.step(gossip(u('suspect', 'q', 1)), 2);
    expect(swim.member('q')).toBeUndefined();
  });

  it('refutes a suspicion or a death notice about itself, and answers its teller at once', () => {
    const { swim, sent } = lone();
    swim.step(gossip(u('alive', 'b', 0)), 1);
    sent.length = 0;
    swim.step({ kind: 'gossip', from: 'b', updates: [u('suspect', 'a', 0, 'b')] }, 2);
    expect(swim.incarnation).toBe(1);
    const reply = sent.find((s) => s.to === 'b');
    expect(reply?.m.updates).toContainEqual(u('alive', 'a', 1, 'a'));
    swim.step({ kind: 'gossip', from: 'b', updates: [u('dead', 'a', 3, 'b')] }, 3);
    expect(swim.incarnation).toBe(4);
    // A stale one is answered with the current incarnation, not a new one.
    sent.length = 0;
    swim.step({ kind: 'gossip', from: 'b', updates: [u('suspect', 'a', 2, 'b')] }, 4);
    expect(swim.incarnation).toBe(4);
    expect(sent.find((s) => s.to === 'b')?.m.updates).toContainEqual(u('alive', 'a', 4, 'a'));
  });

  it('probes directly, then through k helpers, and suspects only without any ack', () => {
    const { swim, sent } = lone();
    swim.step(gossip(u('alive', 'b', 0), u('alive', 'c', 0), u('alive', 'd', 0), u('alive', 'e', 0)), 0);
    swim.tick(1_000);
    const ping = sent.find((s) => s.m.kind === 'ping');
    expect(ping).toBeDefined();
    const target = ping?.to as string;
    const seq = ping?.m.kind === 'ping' ? ping.m.seq : -1;
    sent.length = 0;
    swim.tick(1_000 + DEFAULT_GOSSIP_CONFIG.probeTimeoutMs);
    const reqs = sent.filter((s) => s.m.kind === 'ping-req');
    expect(reqs.length).toBe(DEFAULT_GOSSIP_CONFIG.indirectChecks);
    expect(new Set(reqs.map((r) => r.to)).has(target)).toBe(false);
    for (const r of reqs) expect(r.m).toMatchObject({ kind: 'ping-req', seq, target });
    // A helper's ack arrives: the probe succeeded.
    swim.step({ kind: 'ack', from: reqs[0]?.to as string, seq, updates: [] }, 1_700);
    sent.length = 0;
    swim.tick(2_000);
    expect(swim.member(target)?.state).toBe('alive');
    // The next target gets no answer at all: suspect at the end of its interval, not before.
    const next = sent.find((s) => s.m.kind === 'ping')?.to as string;
    expect(next).toBeDefined();
    swim.tick(2_999);
    expect(swim.member(next)?.state).toBe('alive');
    swim.tick(3_000);
    expect(swim.member(next)?.state).toBe('suspect');
  });

  it("answers a ping-req with the target's ack, or a nack when the target is silent", () => {
    const { swim, sent } = lone();
    swim.step({ kind: 'ping-req', from: 'r', seq: 41, target: 't', updates: [] }, 10);
    const ping = sent.find((s) => s.to === 't' && s.m.kind === 'ping');
    const own = ping?.m.kind === 'ping' ? ping.m.seq : -1;
    swim.step({ kind: 'ack', from: 't', seq: own, updates: [] }, 20);
    expect(sent.find((s) => s.to === 'r')?.m).toMatchObject({ kind: 'ack', seq: 41 });
    sent.length = 0;
    swim.step({ kind: 'ping-req', from: 'r', seq: 42, target: 't', updates: [] }, 30);
    swim.tick(30 + DEFAULT_GOSSIP_CONFIG.probeTimeoutMs - 1);
    expect(sent.some((s) => s.m.kind === 'nack')).toBe(false);
    swim.tick(30 + DEFAULT_GOSSIP_CONFIG.probeTimeoutMs);
    expect(sent.find((s) => s.to === 'r' && s.m.kind === 'nack')?.m).toMatchObject({ seq: 42 });
  });

  it('Lifeguard: missed nacks raise the health score, which stretches the probe interval; acks lower it', () => {
    const { swim, sent } = lone();
    const others = ['b', 'c', 'd', 'e'];
    swim.step(gossip(...others.map((n) => u('alive', n, 0))), 0);
    // The silent members refute (as members that only this one cannot hear would), so probing goes on.
    const revive = (at: number) => {
      for (const n of others) {
        const v = swim.member(n);
        if (v !== undefined && v.state !== 'alive') swim.step(gossip(u('alive', n, v.incarnation + 1)), at);
      }
    };
    // Nobody answers: every probe fails and no helper nacks.
    let t = 0;
    while (swim.awareness < DEFAULT_GOSSIP_CONFIG.awarenessMaxMultiplier - 1 && t < 60_000) {
      t = swim.nextDeadline();
      swim.tick(t);
      revive(t);
    }
    expect(swim.awareness).toBe(DEFAULT_GOSSIP_CONFIG.awarenessMaxMultiplier - 1);
    // Pings now go out every 8 intervals.
    sent.length = 0;
    const pings: number[] = [];
    for (let i = 0; i < 400 && pings.length < 3; i++) {
      t = swim.nextDeadline();
      swim.tick(t);
      revive(t);
      for (const s of sent.splice(0)) if (s.m.kind === 'ping') pings.push(t);
    }
    expect(pings[2]! - pings[1]!).toBe(
      DEFAULT_GOSSIP_CONFIG.probeIntervalMs * DEFAULT_GOSSIP_CONFIG.awarenessMaxMultiplier,
    );
    // A member that answers brings it down, one step per acked probe.
    swim.step(gossip(u('alive', 'f', 9)), t);
    const score = swim.awareness;
    for (let i = 0; i < 2_000 && swim.awareness === score; i++) {
      t = swim.nextDeadline();
      swim.tick(t);
      revive(t);
      for (const s of sent.splice(0)) {
        if (s.m.kind === 'ping' && s.to === 'f') swim.step({ kind: 'ack', from: 'f', seq: s.m.seq, updates: [] }, t);
      }
    }
    expect(swim.awareness).toBe(score - 1);
    // Without Lifeguard there is no score.
    const plain = lone({ lifeguard: false });
    plain.swim.step(gossip(u('alive', 'b', 0), u('alive', 'c', 0)), 0);
    for (let i = 0; i < 50; i++) plain.swim.tick(plain.swim.nextDeadline());
    expect(plain.swim.awareness).toBe(0);
  });

  it('Lifeguard: a ping to a suspect member carries the suspicion (buddy system)', () => {
    for (const lifeguard of [true, false]) {
      const { swim, sent } = lone({ lifeguard });
      swim.step(gossip(u('alive', 'b', 3), u('alive', 'c', 0), u('suspect', 'b', 3, 'c')), 0);
      const carried: boolean[] = [];
      for (let i = 0; i < 200 && swim.member('b')?.state === 'suspect'; i++) {
        swim.tick(swim.nextDeadline());
        for (const s of sent.splice(0)) {
          if (s.m.kind === 'ping' && s.to === 'b') {
            carried.push(s.m.updates.some((x) => x.state === 'suspect' && x.member === 'b' && x.incarnation === 3));
          }
        }
      }
      expect(carried.length).toBeGreaterThan(0);
      if (lifeguard) expect(carried.every(Boolean)).toBe(true);
      else expect(carried.some((c) => !c)).toBe(true);
    }
  });

  it('Lifeguard: an unconfirmed suspicion waits the maximum, confirmations shrink it to the minimum', () => {
    const timeToDead = (confirmers: string[], lifeguard = true) => {
      const { swim } = lone({ lifeguard });
      const names = ['b', 'c', 'd', 'e', 'f'];
      swim.step(gossip(...names.map((n) => u('alive', n, 0))), 0);
      swim.step(gossip(u('suspect', 'b', 0, 'c')), 0);
      for (const who of confirmers) swim.step(gossip(u('suspect', 'b', 0, who)), 0);
      let t = 0;
      for (let i = 0; i < 500 && swim.member('b')?.state === 'suspect'; i++) {
        t = swim.nextDeadline();
        swim.tick(t);
      }
      return t;
    };
    // Six members: min = 3 x 1 x 1 s, max = 2 x min, k = 1.
    expect(timeToDead([])).toBe(6_000);
    expect(timeToDead(['c'])).toBe(6_000); // the suspecter itself is no confirmation
    expect(timeToDead(['d'])).toBe(3_000);
    expect(timeToDead([], false)).toBe(3_000);
  });

  it('checks its configuration and maps the failure detector onto it', () => {
    expect(gossipConfigFor(DEFAULT_DETECTOR_CONFIG)).toMatchObject({ probeIntervalMs: 1_000, probeTimeoutMs: 500 });
    expect(gossipConfigFor({ suspectAfterMs: 600, failedAfterMs: 2_000 })).toMatchObject({
      probeIntervalMs: 200,
      probeTimeoutMs: 100,
    });
    for (const bad of [
      { probeTimeoutMs: 1_000 },
      { probeIntervalMs: 0 },
      { suspicionMult: 0.5 },
      { maxPiggyback: 65 },
    ]) {
      let err: unknown;
      try {
        gossipConfig(bad);
      } catch (e) {
        err = e;
      }
      expect(isPlexusError(err, 'PLX_GOSSIP_BAD_CONFIG'), JSON.stringify(bad)).toBe(true);
    }
  });
});
