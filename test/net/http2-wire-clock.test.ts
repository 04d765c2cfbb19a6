/**
 * Http2Wire takes its time from the clock it is given: over real mutual TLS 1.3 on loopback,
 * the pause before unacknowledged frames are sent again and the delivery deadline run on a
 * ManualClock, not on wall time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { ClusterFrame } from '../../ts/codec/cluster-frame.js';
import { ManualClock } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { freePort } from '../../ts/net/ports.js';
import type { DeliveryVerdict, OutboundFrame } from '../../ts/net/types.js';
import { until } from '../helpers/until.js';
import { nodeCreds } from './helpers.js';

const frame: OutboundFrame = {
  shard: 1,
  epoch: 1n,
  sender: 'urn:plexus:actor:s',
  target: 'urn:plexus:actor:t',
  payload: new Uint8Array([1, 2, 3]),
};

const turns = async (n: number) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

describe('Http2Wire on a manual clock', () => {
  const wires: Http2Wire[] = [];
  afterEach(async () => {
    for (const w of wires.splice(0)) await w.close();
  });

  async function sender(clock: ManualClock, port: number): Promise<Http2Wire> {
    const a = new Http2Wire({
      self: 'a',
      cluster: 'c1',
      tls: await nodeCreds('a'),
      resolve: (peer) => (peer === 'b' ? `127.0.0.1:${port}` : undefined),
      isMember: () => true,
      deliveryDeadlineMs: 1000,
      retryBackoffMs: 100,
      clock,
    });
    wires.push(a);
    await a.listen();
    return a;
  }

  it('sends frames again only when the clock reaches the resend pause', async () => {
    const clock = new ManualClock(0);
    const port = await freePort();
    const a = await sender(clock, port);
    // Only the deadline sweep is scheduled before anything is sent.
    expect(clock.pending()).toBe(1);
    let outcome: DeliveryVerdict | unknown;
    const sent = a.send('b', frame).then(
      (v) => {
        outcome = v;
      },
      (e) => {
        outcome = e;
      },
    );
    // Nobody listens yet: the connection fails and the resend waits on the manual clock.
    await until(() => clock.pending() === 2, { what: 'the resend pause on the manual clock' });
    const seen: ClusterFrame[] = [];
    const b = new Http2Wire({
      self: 'b',
      cluster: 'c1',
      tls: await nodeCreds('b'),
      port,
      resolve: () => undefined,
      isMember: () => true,
    });
    wires.push(b);
    b.onFrame(async (_from, fr) => {
      seen.push(fr);
      return 'stored';
    });
    await b.listen();
    await turns(20);
    expect(seen).toHaveLength(0);
    expect(outcome).toBeUndefined();
    // The pause is 50-100 ms (equal jitter): 100 ms of the clock sends the frame again.
    clock.advance(100);
    await sent;
    expect(outcome).toBe('stored');
    expect(seen).toHaveLength(1);
    expect([...seen[0]!.payload]).toEqual([1, 2, 3]);
  });

  it('fails a frame at its deadline on the clock, not on wall time', async () => {
    const clock = new ManualClock(0);
    const a = await sender(clock, await freePort());
    let outcome: unknown;
    const sent = a.send('b', frame).then(
      (v) => {
        outcome = v;
      },
      (e) => {
        outcome = e;
      },
    );
    await until(() => clock.pending() === 2, { what: 'the resend pause on the manual clock' });
    for (let t = 0; t < 9; t++) {
      clock.advance(100);
      await until(() => clock.pending() === 2, { what: 'the next resend pause' });
    }
    // 900 ms of the clock: still within the deadline, whatever wall time has passed.
    expect(outcome).toBeUndefined();
    for (let t = 0; t < 5 && outcome === undefined; t++) {
      clock.advance(100);
      await turns(5);
    }
    await sent;
    expect(isPlexusError(outcome, 'PLX_WIRE_DEADLINE')).toBe(true);
    expect(clock.now()).toBeGreaterThanOrEqual(1000);
    expect(clock.now()).toBeLessThanOrEqual(1300);
  });
});
