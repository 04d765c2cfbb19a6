/**
 * MemoryWire takes its time from the clock it is given: the delivery deadline and the pauses
 * between resends run on a ManualClock, not on wall time.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { MemoryNetwork, MemoryWire } from '../../ts/net/memory-wire.js';
import type { OutboundFrame } from '../../ts/net/types.js';

const frame: OutboundFrame = {
  shard: 1,
  epoch: 1n,
  sender: 'urn:plexus:actor:s',
  target: 'urn:plexus:actor:t',
  payload: new Uint8Array(10),
};

const turn = () => new Promise((r) => setImmediate(r));

describe('MemoryWire on a manual clock', () => {
  it('resends after each pause of the clock and gives up at its deadline', async () => {
    const clock = new ManualClock(0);
    const network = new MemoryNetwork();
    const opts = { network, isMember: () => true, deliveryDeadlineMs: 1000, retryBackoffMs: 100, clock };
    const a = new MemoryWire({ self: 'a', ...opts });
    const b = new MemoryWire({ self: 'b', ...opts });
    await a.listen();
    await b.listen();
    const attempts: number[] = [];
    network.faults.drop = (_from, _to, attempt) => {
      attempts.push(attempt);
      return true;
    };
    let outcome: unknown;
    const sent = a.send('b', frame).then(
      (v) => {
        outcome = v;
      },
      (e) => {
        outcome = e;
      },
    );
    for (let i = 0; i < 5; i++) await turn();
    expect(attempts).toEqual([1]);
    expect(outcome).toBeUndefined();
    // Pauses are 50-100 ms (equal jitter): 100 ms of the clock brings the next attempt.
    clock.advance(100);
    for (let i = 0; i < 5; i++) await turn();
    expect(attempts).toEqual([1, 2]);
    for (let t = 0; t < 20 && outcome === undefined; t++) {
      clock.advance(100);
      for (let i = 0; i < 5; i++) await turn();
    }
    await sent;
    expect(isPlexusError(outcome, 'PLX_WIRE_DEADLINE')).toBe(true);
    expect(clock.now()).toBeGreaterThanOrEqual(900);
    expect(clock.now()).toBeLessThanOrEqual(1100);
    expect(attempts.length).toBeGreaterThanOrEqual(10);
    await a.close();
    await b.close();
  });
});
