/**
 * RaftDriver deadlines: proposals and reads that are not confirmed within `timeoutMs` fail
 * with PLX_RAFT_TIMEOUT (outcome unknown), each naming what it was, whatever the tick; ones
 * confirmed in time resolve; later proposals get their own deadline.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { RaftNode } from '../../ts/raft/node.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import { RaftDriver } from '../../ts/raft-io/driver.js';
import { until } from '../helpers/until.js';
import { memoryWriter } from './harness.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (stops.length > 0) await (stops.pop() as () => Promise<void>)();
});

/** A one-voter node whose storage sync can be held (nothing new is then durable or committed). */
async function lone(timeoutMs: number) {
  const storage = MemoryRaftStorage.bootstrap({ voters: [1], learners: [] });
  const node = new RaftNode({ id: 1, storage, random: () => 0 });
  let held: Promise<void> | undefined;
  let release: () => void = () => undefined;
  const applied: number[] = [];
  const driver = new RaftDriver({
    node,
    storage: memoryWriter(storage, () => held ?? Promise.resolve()),
    send: () => undefined,
    applier: { apply: (es) => void applied.push(...es.map((e) => e.index)) },
    tickMs: 60_000, // no tick during the test: deadlines do not depend on ticks
    timeoutMs,
  });
  node.campaign();
  driver.start();
  stops.push(async () => {
    release();
    await driver.stop();
  });
  await until(() => node.role === 'leader', { timeoutMs: 1_000, what: 'the single node leading' });
  return {
    node,
    driver,
    applied,
    hold() {
      held = new Promise<void>((r) => {
        release = () => {
          held = undefined;
          r();
        };
      });
    },
    release: () => release(),
  };
}

const enc = new TextEncoder();

describe('RaftDriver deadlines', () => {
  it('fails every proposal and read not confirmed in time with PLX_RAFT_TIMEOUT, and resolves the ones confirmed', async () => {
    const n = await lone(150);
    expect(n.node.role).toBe('leader');
    const ok = await n.driver.propose(enc.encode('before'));
    expect(n.applied).toContain(ok);

    n.hold();
    const stuck = [1, 2, 3].map((i) =>
      n.driver.propose(enc.encode(`stuck ${i}`)).then(
        () => 'resolved',
        (e: unknown) => e,
      ),
    );
    const results = await Promise.all(stuck);
    for (const [i, e] of results.entries()) {
      expect(isPlexusError(e, 'PLX_RAFT_TIMEOUT')).toBe(true);
      expect((e as Error).message).toContain(`entry ${ok + 1 + i}`);
      expect((e as { details: Record<string, unknown> }).details.timeoutMs).toBe(150);
    }
    n.release();

    // Proposals after the release have deadlines of their own and commit.
    const later = await Promise.all([n.driver.propose(enc.encode('a')), n.driver.propose(enc.encode('b'))]);
    expect(later[1]).toBe((later[0] as number) + 1);
    expect(n.applied).toEqual(expect.arrayContaining(later));
  });

  it('fails a read that is not confirmed in time the same way', async () => {
    const n = await lone(100);
    n.hold();
    // The read waits behind a Ready whose storage sync is held.
    void n.driver.propose(enc.encode('held')).catch(() => undefined);
    const e = await n.driver.read().then(
      () => 'resolved',
      (x: unknown) => x,
    );
    expect(isPlexusError(e, 'PLX_RAFT_TIMEOUT')).toBe(true);
    expect((e as Error).message).toContain('a read');
  });
});
