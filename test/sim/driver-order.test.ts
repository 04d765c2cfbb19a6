/**
 * The driver's ordering, watched on simulated time: three RaftDrivers on one ManualClock, the
 * simulated network (1 ms per message) and simulated disks whose syncs take 30 ms. A leader's
 * appends leave before its own write of the entries is durable; a follower acknowledges an
 * entry only once its own write is; an entry is applied only once it is durable on a majority
 * and on the member applying it.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { RaftNode } from '../../ts/raft/node.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import type { Entry, Message } from '../../ts/raft/types.js';
import { RaftDriver } from '../../ts/raft-io/driver.js';
import { SimNetwork } from '../../ts/sim/network.js';
import { SimDisk } from '../../ts/sim/raft/disk.js';
import { SimRaftNetwork } from '../../ts/sim/raft/transport.js';
import { SimRandom } from '../../ts/sim/rng.js';

describe('RaftDriver on simulated time', () => {
  it('sends a leader appends before its write, acknowledges after the write, applies what a majority holds', async () => {
    const clock = new ManualClock();
    const rng = new SimRandom(11);
    const net = new SimNetwork<Message>(rng.fork(), { minDelay: 1, maxDelay: 1, dropRate: 0, duplicateRate: 0 });
    const sent: { at: number; m: Message }[] = [];
    const wire = new SimRaftNetwork(net, clock, (m) => sent.push({ at: clock.now(), m }));
    const ids = [1, 2, 3];
    const durables = new Map<number, MemoryRaftStorage>();
    const drivers = new Map<number, RaftDriver>();
    const nodes = new Map<number, RaftNode>();
    const applied = new Map<number, { at: number; entry: Entry }[]>();
    /** When each member's disk first held each index durably. */
    const durableAt = new Map<string, number>();
    for (const id of ids) {
      const durable = MemoryRaftStorage.bootstrap({ voters: ids, learners: [] });
      durables.set(id, durable);
      const disk = new SimDisk(durable, clock, () => 30);
      const r = rng.fork();
      const node = new RaftNode({
        id,
        storage: disk.storage,
        random: (k) => r.int(k),
        electionTick: 10,
        heartbeatTick: 2,
      });
      nodes.set(id, node);
      applied.set(id, []);
      const driver = new RaftDriver({
        node,
        storage: disk,
        transport: wire.join(id),
        clock,
        tickMs: 10,
        applier: { apply: (es) => void applied.get(id)?.push(...es.map((entry) => ({ at: clock.now(), entry }))) },
      });
      drivers.set(id, driver);
      driver.start();
    }
    const step = () => {
      clock.advance(1);
      wire.deliver(clock.now());
      clock.advance(0);
      for (const [id, d] of durables) {
        for (let i = d.firstIndex(); i <= d.lastIndex(); i++) {
          if (!durableAt.has(`${id}:${i}`)) durableAt.set(`${id}:${i}`, clock.now());
        }
      }
    };
    const leader = () => ids.find((id) => nodes.get(id)?.role === 'leader');
    for (let i = 0; i < 2000 && leader() === undefined; i++) step();
    const l = leader() as number;
    expect(l).toBeDefined();
    for (let i = 0; i < 200; i++) step(); // the new leader's first entry settles

    const proposed = drivers.get(l)?.propose(new TextEncoder().encode('x')) as Promise<number>;
    const index = nodes.get(l)?.status().lastIndex as number;
    for (let i = 0; i < 300; i++) step();
    await expect(proposed).resolves.toBe(index);

    const appends = sent.filter((s) => s.m.type === 'MsgApp' && s.m.entries.some((e) => e.index === index));
    expect(appends.length).toBeGreaterThanOrEqual(2);
    const leaderDurable = durableAt.get(`${l}:${index}`) as number;
    expect(leaderDurable).toBeDefined();
    // Early sends: the appends left before the leader's own 30 ms write was done.
    expect(Math.min(...appends.map((s) => s.at))).toBeLessThan(leaderDurable);
    // Every acknowledgement of the entry left once the follower held it durably.
    const acks = sent.filter((s) => s.m.type === 'MsgAppResp' && !s.m.reject && s.m.index >= index);
    expect(acks.length).toBeGreaterThanOrEqual(1);
    for (const a of acks) expect(a.at).toBeGreaterThanOrEqual(durableAt.get(`${a.m.from}:${index}`) as number);
    // Applied, on every member, only once durable there and on a majority.
    for (const id of ids) {
      const got = applied.get(id)?.find((x) => x.entry.index === index);
      expect(got, `member ${id} applied ${index}`).toBeDefined();
      expect(got?.at).toBeGreaterThanOrEqual(durableAt.get(`${id}:${index}`) as number);
      const durableOn = ids.filter(
        (o) => (durableAt.get(`${o}:${index}`) ?? Number.POSITIVE_INFINITY) <= (got?.at ?? 0),
      );
      expect(durableOn.length).toBeGreaterThanOrEqual(2);
    }
    for (const d of drivers.values()) await d.stop();
  });
});
