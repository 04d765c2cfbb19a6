/**
 * The cluster wire's polling window (docs/cluster.md, "Polling"): `spinMs`, the
 * PLEXUS_WIRE_SPIN_MS variable and the default (off); bad values refused with
 * PLX_WIRE_BAD_OPTION; real wires on loopback hold the poller exactly while frames wait for
 * their ACKs (sender) and while ACKs sent wait for the next frames (receiver), and let go of
 * it once the frames settle, fail or the connection closes.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { wireSpinMs } from '../../ts/net/http2-wire-shared.js';
import type { OutboundFrame } from '../../ts/net/types.js';
import { thrownRefusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';
import { type Http2Net, http2Net, nodeCreds } from './helpers.js';

let net: Http2Net | undefined;
afterEach(async () => {
  await net?.close();
  net = undefined;
});

const frame = (i: number): OutboundFrame => ({
  shard: 1,
  epoch: 1n,
  sender: `urn:plexus:actor:s${i % 7}`,
  target: `urn:plexus:actor:t${i % 5}`,
  payload: new Uint8Array(100).fill(i & 0xff),
});

describe('wireSpinMs', () => {
  it('takes the option, else PLEXUS_WIRE_SPIN_MS, else 0 (off)', () => {
    expect(wireSpinMs(undefined, undefined)).toBe(0);
    expect(wireSpinMs(undefined, '')).toBe(0);
    expect(wireSpinMs(undefined, '1')).toBe(1);
    expect(wireSpinMs(undefined, '0')).toBe(0);
    expect(wireSpinMs(undefined, '2.5')).toBe(2.5);
    expect(wireSpinMs(0, '7')).toBe(0);
    expect(wireSpinMs(1000, undefined)).toBe(1000);
  });

  it.each([
    [-1, undefined],
    [1001, undefined],
    [Number.NaN, undefined],
    [Number.POSITIVE_INFINITY, undefined],
    ['3' as unknown as number, undefined],
    [undefined, 'fast'],
    [undefined, '-2'],
    [undefined, '5000'],
  ])('refuses spinMs %s / PLEXUS_WIRE_SPIN_MS %s with PLX_WIRE_BAD_OPTION', (option, env) => {
    const e = thrownRefusal(() => wireSpinMs(option, env));
    expect(e.code).toBe('PLX_WIRE_BAD_OPTION');
    expect(e.details.reason).toBe('spinMs');
    expect(e.message).toContain('from 0 to 1000');
  });

  it('makes the wire constructor refuse a bad window', async () => {
    const c = await nodeCreds('a');
    const e = thrownRefusal(
      () =>
        new Http2Wire({
          self: 'a',
          cluster: 'c1',
          tls: c,
          resolve: () => undefined,
          isMember: () => true,
          spinMs: -3,
        }),
    );
    expect(e.code).toBe('PLX_WIRE_BAD_OPTION');
  });

  it('leaves PLEXUS_WIRE_SPIN_MS to the edge: the wire itself reads no environment variable', async () => {
    const c = await nodeCreds('a');
    const before = process.env.PLEXUS_WIRE_SPIN_MS;
    process.env.PLEXUS_WIRE_SPIN_MS = 'fast';
    try {
      const w = new Http2Wire({ self: 'a', cluster: 'c1', tls: c, resolve: () => undefined, isMember: () => true });
      await w.close();
    } finally {
      if (before === undefined) delete process.env.PLEXUS_WIRE_SPIN_MS;
      else process.env.PLEXUS_WIRE_SPIN_MS = before;
    }
    expect(thrownRefusal(() => wireSpinMs(undefined, 'fast')).code).toBe('PLX_WIRE_BAD_OPTION');
  });
});

describe('polling on real wires', () => {
  it('holds while frames wait for ACKs and lets go once every frame is acknowledged', async () => {
    net = await http2Net(['a', 'b'], { spinMs: 50 });
    const a = net.wires.get('a') as Http2Wire;
    const b = net.wires.get('b') as Http2Wire;
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let handled = 0;
    b.onFrame(async () => {
      handled++;
      await gate; // the receiver answers only when the test lets it
      return 'stored';
    });
    const sends = Array.from({ length: 40 }, (_, i) => a.send('b', frame(i)));
    expect(a.spinner.waiting).toBe(40);
    await until(() => handled > 0, { timeoutMs: 5_000, what: 'the first frame at b' });
    expect(a.spinner.waiting).toBe(40); // nothing acknowledged yet
    release();
    const verdicts = await Promise.all(sends);
    expect(verdicts.every((v) => v === 'stored')).toBe(true);
    expect(a.spinner.waiting).toBe(0);
    // b sent ACKs and now waits for a's next frames: it holds until they come.
    await until(() => b.spinner.waiting === 1, { timeoutMs: 5_000, what: 'b to hold after its ACKs' });
    expect(await a.send('b', frame(99))).toBe('stored');
    expect(a.spinner.waiting).toBe(0);
    // The hold of b's last ACKs ends with the connection.
    await a.close();
    await until(() => b.spinner.waiting === 0, { timeoutMs: 5_000, what: 'b to let go once the connection closed' });
  });

  it('lets go of frames that fail: no peer address, and the deadline passing', async () => {
    net = await http2Net(['a', 'b'], { spinMs: 50, deliveryDeadlineMs: 200 });
    const a = net.wires.get('a') as Http2Wire;
    net.addresses.delete('b'); // a no longer knows where b listens
    const results = await Promise.allSettled(Array.from({ length: 5 }, (_, i) => a.send('b', frame(i))));
    expect(results.every((r) => r.status === 'rejected')).toBe(true);
    expect(a.spinner.waiting).toBe(0);
  });

  it('does not poll for ACKs that come slowly, nor for frames after ACKs that went out slowly', async () => {
    net = await http2Net(['a', 'b'], { spinMs: 4 });
    const a = net.wires.get('a') as Http2Wire;
    const b = net.wires.get('b') as Http2Wire;
    // Each frame is answered 10 ms after it came (as a durable message waits for its fsync).
    b.onFrame(() => new Promise((r) => setTimeout(() => r('stored'), 10)));
    for (let i = 0; i < 20; i++) expect(await a.send('b', frame(i))).toBe('stored');
    expect(a.ackMs).toBeGreaterThan(2);
    expect(b.answerMs).toBeGreaterThan(2);
    const last = a.send('b', frame(20));
    expect(a.spinner.waiting).toBe(0); // this frame does not hold the poller
    expect(await last).toBe('stored');
    // b decides whether to hold its poller when it writes the ACKs (ts/net/http2-ack-sink.ts),
    // so before a could read this one.
    expect(b.spinner.waiting).toBe(0); // nor do b's ACKs
    expect(a.spinner.polling).toBe(false);
    expect(b.spinner.polling).toBe(false);
  });

  it('never polls with spinMs 0, and still delivers', async () => {
    net = await http2Net(['a', 'b'], { spinMs: 0 });
    const a = net.wires.get('a') as Http2Wire;
    const b = net.wires.get('b') as Http2Wire;
    b.onFrame(async () => 'stored');
    const verdicts = await Promise.all(Array.from({ length: 20 }, (_, i) => a.send('b', frame(i))));
    expect(verdicts.every((v) => v === 'stored')).toBe(true);
    expect(a.spinner.polling).toBe(false);
    expect(b.spinner.polling).toBe(false);
    expect(a.spinner.waiting).toBe(0);
    expect(b.spinner.waiting).toBe(0);
  });
});
