/**
 * The simulated cluster runs the real driver (ts/raft-io/driver.ts) on simulated time: one
 * seed run twice gives byte-identical histories and traces, with slow disks too; the simulated
 * disk makes writes durable only after its latency and a crash loses what was not synced.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import type { Entry } from '../../ts/raft/types.js';
import { runSimulation } from '../../ts/sim/raft/cluster.js';
import { SimDisk } from '../../ts/sim/raft/disk.js';

const entry = (index: number, term = 1): Entry => ({ index, term, type: 'normal', data: new Uint8Array([index]) });

describe('the simulated cluster on the driver', () => {
  for (const disk of [undefined, { minLatency: 5, maxLatency: 40 }]) {
    const what = disk ? `disks of ${disk.minLatency}..${disk.maxLatency} ms` : 'default disks';
    it(`one seed twice gives byte-identical histories (${what})`, () => {
      for (const seed of [7, 1234, 99_001]) {
        const a = runSimulation({ seed, nodes: 5, trace: true, disk });
        const b = runSimulation({ seed, nodes: 5, trace: true, disk });
        expect(Buffer.from(JSON.stringify(b.history)).equals(Buffer.from(JSON.stringify(a.history)))).toBe(true);
        expect(b.trace.join('\n')).toBe(a.trace.join('\n'));
        expect(b.fingerprint).toBe(a.fingerprint);
        expect(a.history.operations().length).toBeGreaterThan(5);
        expect(a.ok, a.violations.map((v) => v.message).join('; ')).toBe(true);
      }
    });
  }

  it('slow disks change the run (the driver waits for them) and every seed still holds', () => {
    const prints = new Set<string>();
    for (let seed = 1; seed <= 30; seed++) {
      const fast = runSimulation({ seed, nodes: 3, disk: { minLatency: 0, maxLatency: 0 } });
      const slow = runSimulation({ seed, nodes: 3, disk: { minLatency: 20, maxLatency: 60 } });
      expect(fast.ok && slow.ok, `seed ${seed}`).toBe(true);
      prints.add(fast.fingerprint);
      prints.add(slow.fingerprint);
    }
    expect(prints.size).toBe(60);
  });
});

describe('SimDisk', () => {
  it('writes are read at once, durable after the sync latency, and lost by a crash before it', () => {
    const clock = new ManualClock();
    const durable = MemoryRaftStorage.bootstrap({ voters: [1], learners: [] });
    const hard: number[] = [];
    const disk = new SimDisk(
      durable,
      clock,
      () => 10,
      (hs) => hard.push(hs.term),
    );
    disk.append([entry(2), entry(3)]);
    disk.setHardState({ term: 2, vote: 1, commit: 1 });
    expect(disk.storage.lastIndex()).toBe(3);
    expect(durable.lastIndex()).toBe(1);
    let synced = false;
    disk.sync().then(() => {
      synced = true;
    });
    clock.advance(9);
    expect(synced).toBe(false);
    expect(durable.lastIndex()).toBe(1);
    clock.advance(1);
    expect(synced).toBe(true);
    expect(durable.lastIndex()).toBe(3);
    expect(hard).toEqual([2]);

    disk.append([entry(4, 2)]);
    let second = false;
    disk.sync().then(() => {
      second = true;
    });
    clock.advance(5);
    disk.crash();
    clock.advance(100);
    expect(second).toBe(false);
    expect(durable.lastIndex()).toBe(3);
    const restarted = new SimDisk(durable, clock, () => 1);
    expect(restarted.storage.lastIndex()).toBe(3);
    expect(restarted.storage.initialState().hardState).toEqual({ term: 2, vote: 1, commit: 1 });
  });
});
