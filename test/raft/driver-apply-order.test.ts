/**
 * RaftDriver apply order on a leader: committed entries it already holds durably are applied
 * (and their proposals resolved) without waiting for the write of the entries proposed after
 * them; an entry is never applied before this node's own write of it is durable.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { RaftNode } from '../../ts/raft/node.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import type { Message } from '../../ts/raft/types.js';
import { RaftDriver } from '../../ts/raft-io/driver.js';
import { loopTurns } from '../helpers/clock.js';
import { until as untilProbe } from '../helpers/until.js';
import { memoryWriter } from './harness.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (stops.length > 0) await (stops.pop() as () => Promise<void>)();
});

const enc = new TextEncoder();
async function until(cond: () => boolean, what: string): Promise<void> {
  await untilProbe(cond, { timeoutMs: 5_000, what });
}

/** A gate that holds a sync until opened. */
function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => {
    open = r;
  });
  return { p, open };
}

/** Three voters in this process; member 1's storage syncs can be held one at a time. */
async function cluster() {
  const voters = [1, 2, 3];
  const drivers = new Map<number, RaftDriver>();
  const nodes = new Map<number, RaftNode>();
  const applied = new Map<number, number[]>(voters.map((id) => [id, []]));
  /** Gates for member 1's next syncs, taken in order; none: a sync resolves at once. */
  const holds: { p: Promise<void>; open: () => void }[] = [];
  let syncs = 0;
  const deliver = (ms: readonly Message[]) => {
    for (const m of ms) setImmediate(() => drivers.get(m.to)?.receive(m));
  };
  for (const id of voters) {
    const storage = MemoryRaftStorage.bootstrap({ voters, learners: [] });
    const node = new RaftNode({ id, storage, random: () => (id === 1 ? 0 : 0.99) });
    nodes.set(id, node);
    const driver = new RaftDriver({
      node,
      storage: memoryWriter(storage, () => {
        if (id !== 1) return Promise.resolve();
        syncs++;
        return holds.shift()?.p ?? Promise.resolve();
      }),
      send: deliver,
      applier: { apply: (es) => void (applied.get(id) as number[]).push(...es.map((e) => e.index)) },
      tickMs: 60_000,
    });
    drivers.set(id, driver);
    driver.start();
    stops.push(() => driver.stop());
  }
  (nodes.get(1) as RaftNode).campaign();
  // Stopping opens every gate left, so that no Ready stays held.
  stops.push(async () => {
    for (const h of holds.splice(0)) h.open();
  });
  await until(() => nodes.get(1)?.role === 'leader', 'member 1 to lead');
  const leader = drivers.get(1) as RaftDriver;
  await leader.propose(enc.encode('warm-up'));
  return { leader, node: nodes.get(1) as RaftNode, applied, holds, syncs: () => syncs };
}

describe('RaftDriver apply order on a leader', () => {
  it("resolves a committed entry while the next entry's write is still held, and that one only after its write", async () => {
    const c = await cluster();
    const first = gate();
    c.holds.push(first);
    stops.push(async () => first.open());
    const syncsBefore = c.syncs();
    let bDone = false;
    const b = c.leader.propose(enc.encode('b')).then((i) => {
      bDone = true;
      return i;
    });
    const bIndex = c.node.lastIndex;
    // B's write is held; the followers acknowledge it meanwhile, so it is committed.
    await until(() => c.syncs() > syncsBefore, "B's write");
    await until(() => c.node.status().commit >= bIndex, 'B committed by the followers');
    expect(bDone).toBe(false); // not durable here yet: not applied
    expect(c.applied.get(1)).not.toContain(bIndex);

    let cDone = false;
    const cp = c.leader.propose(enc.encode('c')).then(() => {
      cDone = true;
    });
    const cIndex = c.node.lastIndex;
    const second = gate();
    c.holds.push(second);
    stops.push(async () => second.open());
    first.open();
    // The next Ready writes C (held) and carries B as committed: B is applied before that write ends.
    // (Bounded, so that a driver that holds B behind C's write fails here instead of hanging.)
    const late = new Promise((r) => setTimeout(() => r('still waiting'), 5000));
    expect(await Promise.race([b, late])).toBe(bIndex);
    expect(c.applied.get(1)).toContain(bIndex);
    await until(() => c.syncs() > syncsBefore + 1, "C's write");
    // The followers acknowledge C meanwhile: committed, it is what a driver that (wrongly) did
    // not wait for its own write would apply, in the Ready that follows (a few turns).
    await until(() => c.node.status().commit >= cIndex, 'C committed by the followers');
    await loopTurns();
    expect(cDone).toBe(false);
    expect(c.applied.get(1)).not.toContain(cIndex);
    second.open();
    await cp;
    expect(c.applied.get(1)).toContain(cIndex);
    // Every member applied the same entries in the same order.
    await until(
      () => [2, 3].every((id) => (c.applied.get(id) as number[]).includes(cIndex)),
      'members 2 and 3 to apply C',
    );
    expect(c.applied.get(3)).toEqual(c.applied.get(1));
    expect(c.applied.get(2)).toEqual(c.applied.get(1));
  });
});
