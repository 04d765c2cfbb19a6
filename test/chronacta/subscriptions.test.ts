/**
 * Subscriptions through the real gRPC server: catch-up then live with concurrent appends
 * (no gap, no duplicate at the switch), streams from a version, a slow subscriber that
 * stays bounded in the server's memory and falls back to catching up from disk, and the
 * end of a subscription.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClientSubscription } from '../../ts/chronacta/client.js';
import type { SubscriptionMessage } from '../../ts/chronacta/types.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';
import { serve, tempDir } from './helpers.js';

let tmp: { dir: string; remove: () => Promise<void> };
beforeAll(async () => {
  tmp = await tempDir('subs');
});
afterAll(async () => {
  await tmp?.remove();
});

/** Collects a subscription's messages in the background. */
function collect(sub: ClientSubscription): { messages: SubscriptionMessage[]; done: Promise<unknown> } {
  const messages: SubscriptionMessage[] = [];
  const done = (async () => {
    for await (const m of sub) messages.push(m);
  })().catch((e: unknown) => e);
  return { messages, done };
}

const positions = (ms: SubscriptionMessage[]) =>
  ms.filter((m) => m.kind === 'event').map((m) => (m.kind === 'event' ? Number(m.event.position) : 0));

describe('catch-up, then live', () => {
  it('switches with no gap and no duplicate while appends go on', async () => {
    const run = await serve(join(tmp.dir, 'switch'));
    const c = run.client;
    try {
      for (let i = 0; i < 50; i++) await c.append(`pre-${i % 4}`, [{ type: 't', data: `${i}` }, { type: 't' }]);
      const next = rng(7);
      const subs: { from: number; sub: ClientSubscription; got: ReturnType<typeof collect> }[] = [];
      const writers = Array.from({ length: 4 }, async (_, w) => {
        for (let i = 0; i < 60; i++) {
          await c.append(
            `live-${w}`,
            Array.from({ length: 1 + (next() % 3) }, () => ({ type: 'e', data: `${w}/${i}` })),
          );
          // Subscribers join at different moments, from different positions.
          if (w === 0 && i % 12 === 0) {
            const from = 1 + (next() % 100);
            const sub = c.subscribe({ all: true, fromPosition: BigInt(from) });
            subs.push({ from, sub, got: collect(sub) });
          }
        }
      });
      await Promise.all(writers);
      const last = Number((await c.readAll({ direction: 'backwards', maxCount: 1 })).lastPosition);
      expect(subs.length).toBe(5);
      for (const s of subs) {
        await until(() => positions(s.got.messages).at(-1) === last, {
          timeoutMs: 15_000,
          what: `subscription from ${s.from}`,
        });
        const ps = positions(s.got.messages);
        expect(ps).toEqual(Array.from({ length: last - s.from + 1 }, (_, i) => s.from + i));
        expect(s.got.messages.some((m) => m.kind === 'caughtUp')).toBe(true);
        s.sub.close();
        await s.got.done;
      }
      await until(() => run.server.subscriptions().length === 0, {
        timeoutMs: 5000,
        what: 'subscriptions to end on the server',
      });
    } finally {
      await run.stop();
    }
  });

  it('subscribes to one stream from a version, and from the end', async () => {
    const run = await serve(join(tmp.dir, 'stream'));
    const c = run.client;
    try {
      await c.append('orders', [{ type: 'a' }, { type: 'b' }, { type: 'c' }]);
      await c.append('noise', [{ type: 'x' }]);
      const fromOne = collect(c.subscribe({ stream: 'orders', fromVersion: 1n }));
      const fromEnd = collect(c.subscribe({ stream: 'orders', fromVersion: 'end' }));
      await until(() => fromEnd.messages.some((m) => m.kind === 'caughtUp'), {
        what: "fromEnd.messages.some((m) => m.kind === 'caughtUp')",
      });
      await c.append('orders', [{ type: 'd' }]);
      await c.append('noise', [{ type: 'y' }]);
      await c.append('orders', [{ type: 'e' }]);
      const types = (g: ReturnType<typeof collect>) =>
        g.messages.map((m) => (m.kind === 'event' ? `${m.event.version}:${m.event.type}` : m.kind));
      await until(() => types(fromOne).includes('4:e') && types(fromEnd).includes('4:e'), {
        what: "types(fromOne).includes('4:e') && types(fromEnd).includes('4:e')",
      });
      expect(types(fromOne)).toEqual(['1:b', '2:c', 'caughtUp', '3:d', '4:e']);
      expect(types(fromEnd)).toEqual(['caughtUp', '3:d', '4:e']);
    } finally {
      await run.stop();
    }
  });

  it('filters $all by stream prefix and type, live too', async () => {
    const run = await serve(join(tmp.dir, 'filter'));
    const c = run.client;
    try {
      await c.append('a-1', [{ type: 'keep' }, { type: 'drop' }]);
      await c.append('b-1', [{ type: 'keep' }]);
      const g = collect(c.subscribe({ all: true, streamPrefix: 'a-', types: ['keep'] }));
      await until(() => g.messages.some((m) => m.kind === 'caughtUp'), {
        what: "g.messages.some((m) => m.kind === 'caughtUp')",
      });
      await c.append('a-2', [{ type: 'keep' }, { type: 'drop' }]);
      await c.append('b-2', [{ type: 'keep' }]);
      await until(() => g.messages.filter((m) => m.kind === 'event').length === 2, {
        what: "g.messages.filter((m) => m.kind === 'event').length === 2",
      });
      // A later event that passes the filter: $all is in position order, so anything the
      // filter let through from a-2's drop or b-2 would come before it.
      await c.append('a-3', [{ type: 'keep' }]);
      const marker = await until(
        () => {
          const i = g.messages.findIndex((m) => m.kind === 'event' && m.event.stream === 'a-3');
          return i >= 0 ? i : undefined;
        },
        { what: 'the later event a-3:keep' },
      );
      expect(
        g.messages.slice(0, marker).map((m) => (m.kind === 'event' ? `${m.event.stream}:${m.event.type}` : m.kind)),
      ).toEqual(['a-1:keep', 'caughtUp', 'a-2:keep']);
    } finally {
      await run.stop();
    }
  });

  it('ends a stream subscription when the stream is tombstoned', async () => {
    const run = await serve(join(tmp.dir, 'tomb'));
    const c = run.client;
    try {
      await c.append('t', [{ type: 'a' }]);
      const g = collect(c.subscribe({ stream: 't' }));
      await until(() => g.messages.some((m) => m.kind === 'caughtUp'), {
        what: "g.messages.some((m) => m.kind === 'caughtUp')",
      });
      await c.deleteStream('t', { hard: true });
      const err = (await g.done) as { code?: string };
      expect(err?.code).toBe('PLX_CHRONACTA_STREAM_DELETED');
      await expect(
        (async () => {
          for await (const _ of c.subscribe({ stream: 't' })) {
            // never reached
          }
        })(),
      ).rejects.toMatchObject({ code: 'PLX_CHRONACTA_STREAM_DELETED' });
    } finally {
      await run.stop();
    }
  });

  it('refuses a malformed target with INVALID_ARGUMENT', async () => {
    const run = await serve(join(tmp.dir, 'bad'));
    try {
      await expect(
        (async () => {
          for await (const _ of run.client.subscribe({ stream: '' })) {
            // never reached
          }
        })(),
      ).rejects.toMatchObject({ code: 'PLX_CHRONACTA_BAD_INPUT' });
    } finally {
      await run.stop();
    }
  });
});

describe('flow control', () => {
  it('keeps a slow subscriber bounded in memory; it falls back to the log and misses nothing', async () => {
    const limits = { liveQueueEvents: 64, liveQueueBytes: 256 * 1024, pageSize: 64 };
    const run = await serve(join(tmp.dir, 'slow'), { subscriptionLimits: limits });
    const c = run.client;
    try {
      await c.append('warm', [{ type: 't' }]);
      // The consumer does not read at all for now: the client stops taking from the
      // server after 8 messages, HTTP/2 flow control stops the server's writes.
      const sub = c.subscribe({ all: true }, { bufferSize: 8 });
      const it = sub[Symbol.asyncIterator]();
      const first = await it.next();
      expect(first.value?.kind).toBe('event');
      await until(() => run.server.subscriptions()[0]?.mode === 'live', {
        timeoutMs: 5000,
        what: 'the subscription to go live',
      });
      const payload = 'x'.repeat(4096);
      const batches = 600;
      for (let i = 0; i < batches; i += 20) {
        await Promise.all(
          Array.from({ length: 20 }, (_, k) => c.append(`bulk-${(i + k) % 7}`, [{ type: 'big', data: payload }])),
        );
      }
      const stats = run.server.subscriptions()[0]!;
      // About 2.4 MB went by; the live queue never held more than its bounds.
      expect(stats.fallbacks).toBeGreaterThanOrEqual(1);
      expect(stats.maxQueued).toBeLessThanOrEqual(limits.liveQueueEvents + 1);
      expect(stats.maxQueuedBytes).toBeLessThanOrEqual(limits.liveQueueBytes + 4096 + 400);
      // Now read everything: in order, each once, with the fall-back reported.
      const got: SubscriptionMessage[] = [first.value as SubscriptionMessage];
      const last = batches + 1;
      while (positions(got).at(-1) !== last) {
        const n = await it.next();
        if (n.done) break;
        got.push(n.value);
      }
      expect(positions(got)).toEqual(Array.from({ length: last }, (_, i) => i + 1));
      expect(got.some((m) => m.kind === 'fellBehind')).toBe(true);
      // Caught up again: live events flow.
      await until(() => run.server.subscriptions()[0]?.mode === 'live', { timeoutMs: 5000, what: 'live again' });
      await c.append('after', [{ type: 't' }]);
      for (;;) {
        const n = await it.next();
        if (n.value?.kind === 'event') {
          expect(n.value.event.position).toBe(BigInt(last + 1));
          break;
        }
      }
      sub.close();
    } finally {
      await run.stop();
    }
  });
});
