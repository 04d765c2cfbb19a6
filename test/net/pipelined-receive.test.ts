/**
 * The receiver's pipelined path (docs/cluster.md, "Streams, order and backpressure"): a frame
 * handler that calls `taken` lets the stream's next frame in before the first is stored, the
 * ACKs still go out in stream order and only for settled frames, and a handler that never
 * calls `taken` keeps the one-frame-at-a-time contract.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { ClusterFrame } from '../../ts/codec/cluster-frame.js';
import type { DeliveryVerdict } from '../../ts/net/types.js';
import { until } from '../helpers/until.js';
import { type Http2Net, http2Net } from './helpers.js';

const enc = new TextEncoder();
const dec = new TextDecoder();
const frame = (sender: string, target: string, i: number) => ({
  shard: 1,
  epoch: 1n,
  sender,
  target,
  payload: enc.encode(`${i}`),
});

interface Held {
  readonly n: number;
  settle(v: 'stored' | 'refused'): void;
}

/**
 * A call from a to b and its answer, on the connection the frames use: b writes the ACK runs
 * of an event-loop turn at its end, so an ACK it had made before the call came is read by a
 * before the answer.
 */
async function roundTrip(net: Http2Net): Promise<void> {
  net.wires.get('b')?.onCall(async () => new Uint8Array(0));
  await net.wires.get('a')?.call('b', new Uint8Array([1]));
}

describe('Http2Wire pipelined receive', () => {
  let net: Http2Net | undefined;
  afterEach(async () => {
    await net?.close();
    net = undefined;
  });

  it('hands the next frame of a stream in once the previous one is taken; ACKs go out in stream order', async () => {
    net = await http2Net(['a', 'b'], { streamCap: 1 });
    const held: Held[] = [];
    net.wires.get('b')?.onFrame(
      (_from: string, fr: ClusterFrame, taken?: () => void) =>
        new Promise((resolve) => {
          held.push({ n: Number(dec.decode(fr.payload)), settle: resolve });
          taken?.();
        }),
    );
    const a = net.wires.get('a')!;
    const order: number[] = [];
    // Three pairs on one stream (stream cap 1), so the stream carries frames of all three.
    const sends = [0, 1, 2, 3, 4, 5].map((i) =>
      a.send('b', frame(`vt:s/${i % 3}`, `vt:t/${i % 3}`, i)).then((v: DeliveryVerdict) => {
        order.push(i);
        return v;
      }),
    );
    // Every frame reached the handler while none was stored yet: nothing waited for a durable step.
    await until(() => held.length === 6, { timeoutMs: 3_000, what: 'held.length === 6' });
    expect(held.map((h) => h.n)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(order).toEqual([]);
    // Settled out of order: frame 3 first. Its ACK waits for frames 0..2 (runs count in order).
    held[3]?.settle('stored');
    // A round trip on the same connection after the settle: an ACK for frame 3 that (wrongly)
    // went out would have reached a before the answer.
    await roundTrip(net);
    expect(order).toEqual([]);
    held[0]?.settle('stored');
    await until(() => order.length === 1, { timeoutMs: 3_000, what: 'order.length === 1' });
    expect(order).toEqual([0]);
    held[2]?.settle('refused');
    held[1]?.settle('stored');
    await until(() => order.length === 4, { timeoutMs: 3_000, what: 'order.length === 4' });
    expect(order).toEqual([0, 1, 2, 3]);
    held[5]?.settle('stored');
    held[4]?.settle('stored');
    const verdicts = await Promise.all(sends);
    expect(verdicts).toEqual(['stored', 'stored', 'refused', 'stored', 'stored', 'stored']);
  });

  it('without `taken`, the next frame waits until the previous one is stored', async () => {
    net = await http2Net(['a', 'b'], { streamCap: 1 });
    const held: Held[] = [];
    net.wires.get('b')?.onFrame(
      (_from: string, fr: ClusterFrame) =>
        new Promise((resolve) => {
          held.push({ n: Number(dec.decode(fr.payload)), settle: resolve });
        }),
    );
    const a = net.wires.get('a')!;
    const sends = [0, 1, 2].map((i) => a.send('b', frame('vt:s/0', `vt:t/${i}`, i)));
    await until(() => held.length === 1, { timeoutMs: 3_000, what: 'held.length === 1' });
    // The next frames arrived and wait in b's read-ahead, not handed to the handler.
    const b = net.wires.get('b')!;
    await until(() => b.inboundBufferedBytes() > 0, { timeoutMs: 3_000, what: 'the next frames read ahead' });
    expect(held.length).toBe(1);
    held[0]?.settle('stored');
    await until(() => held.length === 2, { timeoutMs: 3_000, what: 'held.length === 2' });
    held[1]?.settle('stored');
    await until(() => held.length === 3, { timeoutMs: 3_000, what: 'held.length === 3' });
    held[2]?.settle('stored');
    expect(await Promise.all(sends)).toEqual(['stored', 'stored', 'stored']);
  });

  it('a copy of a frame being stored is answered duplicate once the first copy is stored', async () => {
    net = await http2Net(['a', 'b'], { streamCap: 2 });
    const held: Held[] = [];
    net.wires.get('b')?.onFrame(
      (_from: string, fr: ClusterFrame, taken?: () => void) =>
        new Promise((resolve) => {
          held.push({ n: Number(dec.decode(fr.payload)), settle: resolve });
          taken?.();
        }),
    );
    const a = net.wires.get('a')!;
    const id = new Uint8Array(16).fill(7);
    const first = a.send('b', { ...frame('vt:s/0', 'vt:t/0', 0), messageId: id });
    await until(() => held.length === 1, { timeoutMs: 3_000, what: 'held.length === 1' });
    // The same id on another pair's stream (as a resend on a new stream would carry it).
    const second = a.send('b', { ...frame('vt:s/1', 'vt:t/1', 0), messageId: id });
    // The copy arrived and waits for the first copy's outcome, not handed to the handler.
    const b = net.wires.get('b')!;
    await until(() => b.inboundCopiesWaiting === 1, { timeoutMs: 3_000, what: 'the copy waiting' });
    expect(held.length).toBe(1);
    held[0]?.settle('stored');
    expect(await first).toBe('stored');
    expect(await second).toBe('duplicate');
  });
});
