/**
 * The pickup client in live mode over a real WebSocket: queued and new messages are pushed, each
 * must be acknowledged, unacknowledged ones come again after the connection is lost, and the
 * client reconnects to a mediator restarted on the same data directory (which lost nothing).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { unpack } from '../../ts/federation/didcomm/unpack.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { type MediatorServer, startMediator } from '../../ts/federation/mediator/server.js';
import type { PickedUp } from '../../ts/federation/pickup/client.js';
import { PickupClient } from '../../ts/federation/pickup/client.js';
import { until } from '../helpers/until.js';
import { expectCode } from './fixtures.js';
import { event, freePort, pickupClient, recipient, resolver, send, sender, tempDir } from './mediator-fixtures.js';

let tmp: { dir: string; remove: () => Promise<void> };

beforeAll(async () => {
  tmp = await tempDir('pickup');
});
afterAll(async () => {
  await tmp?.remove();
});

async function idOf(p: PickedUp, keys: InMemoryKeyManager): Promise<string> {
  return (await unpack(p.envelope, { resolver, keys })).message.id;
}

describe('live delivery over WebSocket', () => {
  it('pushes queued and new messages; acknowledged ones are gone, the others come again on a new connection', async () => {
    const server = await startMediator({ keys: new InMemoryKeyManager(), dataDir: `${tmp.dir}/live` });
    try {
      const alice = await sender();
      const bob = await recipient(server);
      const c = pickupClient(bob, server);
      await c.requestMediation();
      await c.addRecipients([bob.did]);
      expect((await send(alice, bob, event(alice, bob, 0))).status).toBe(202);

      const got: PickedUp[] = [];
      const states: string[] = [];
      const session = c.live(
        async (m) => {
          got.push(m);
          // Acknowledge inside the callback (as a runtime does once the turn is durable) for even numbers.
          const id = await idOf(m, bob.keys);
          if (id === 'send-0-c0ffee' || id === 'send-2-c0ffee') await session.acknowledge([m.id]);
        },
        { onState: (s) => states.push(s) },
      );
      await session.ready;
      expect(session.connected).toBe(true);
      await until(() => got.length === 1, { timeoutMs: 5000, what: 'the queued message' });
      for (let i = 1; i <= 3; i++) expect((await send(alice, bob, event(alice, bob, i))).status).toBe(202);
      await until(() => got.length === 4, { timeoutMs: 5000, what: 'the live messages' });
      expect(await Promise.all(got.map((g) => idOf(g, bob.keys)))).toEqual([
        'send-0-c0ffee',
        'send-1-c0ffee',
        'send-2-c0ffee',
        'send-3-c0ffee',
      ]);
      await until(() => server.mediator.queue.size === 2, { timeoutMs: 5000, what: 'the acknowledgements' });
      expect((await c.status()).messageCount).toBe(2);
      await session.close();
      expect(states).toEqual(['open', 'closed']);

      // A new connection gets exactly the two unacknowledged messages again.
      const again: PickedUp[] = [];
      const s2 = c.live((m) => {
        again.push(m);
      });
      await s2.ready;
      await until(() => again.length === 2, { timeoutMs: 5000, what: 'the redelivery' });
      expect(await Promise.all(again.map((g) => idOf(g, bob.keys)))).toEqual(['send-1-c0ffee', 'send-3-c0ffee']);
      await s2.acknowledge(again.map((g) => g.id));
      await until(() => server.mediator.queue.size === 0, { timeoutMs: 5000, what: 'the queue to empty' });
      await s2.close();
    } finally {
      await server.close();
    }
  });

  it('reconnects to a mediator restarted on the same port and data directory, which kept its queue', async () => {
    const port = await freePort();
    const keys = new InMemoryKeyManager();
    const dataDir = `${tmp.dir}/restart`;
    let server: MediatorServer = await startMediator({ keys, dataDir, port });
    const alice = await sender();
    const bob = await recipient(server);
    const c = pickupClient(bob, server);
    await c.requestMediation();
    await c.addRecipients([bob.did]);
    const got: string[] = [];
    const states: string[] = [];
    const errors: string[] = [];
    const session = c.live(
      async (m) => {
        got.push(await idOf(m, bob.keys));
      },
      { backoffMs: 20, maxBackoffMs: 100, onState: (s) => states.push(s), onError: (e) => errors.push(e.message) },
    );
    try {
      await session.ready;
      expect((await send(alice, bob, event(alice, bob, 1))).status).toBe(202);
      await until(() => got.length === 1, { timeoutMs: 5000, what: 'the first message' });
      // Not acknowledged. The mediator stops; a message is queued only after it is back.
      await server.close();
      await until(() => !session.connected, { timeoutMs: 5000, what: 'the disconnect' });
      server = await startMediator({ keys, dataDir, port });
      expect(server.did).toBe(c.mediatorDid);
      expect(server.mediator.queue.size).toBe(1);
      expect((await send(alice, bob, event(alice, bob, 2))).status).toBe(202);
      await until(() => got.length === 3, { timeoutMs: 10_000, what: 'the redelivery after reconnect' }).catch(
        (e: Error) => {
          throw new Error(
            `${e.message}: got ${got.join(',')}, states ${states.join(',')}, errors ${errors.join(' | ')}`,
          );
        },
      );
      expect(got).toEqual(['send-1-c0ffee', 'send-1-c0ffee', 'send-2-c0ffee']);
      expect(states).toEqual(['open', 'closed', 'open']);
    } finally {
      await session.close();
      await server.close();
    }
  });

  it('binds a socket to one client and answers refusals it cannot pack as JSON frames', async () => {
    const server = await startMediator({ keys: new InMemoryKeyManager(), dataDir: `${tmp.dir}/ws` });
    try {
      const ws = new WebSocket(server.wsUrl);
      await new Promise((r) => ws.once('open', r));
      const reply = new Promise<string>((r) => ws.once('message', (d) => r(String(d))));
      ws.send('{"not":"didcomm"}');
      expect(JSON.parse(await reply)).toMatchObject({ code: 'PLX_MEDIATOR_UNREADABLE' });
      ws.close();
      // A client that was never granted cannot go live.
      const bob = await recipient(server);
      const c = new PickupClient({
        mediatorUrl: server.url,
        mediatorDid: server.did,
        did: bob.did,
        resolver,
        keys: bob.keys,
      });
      const errors: string[] = [];
      const s = c.live(() => {}, { onError: (e) => errors.push(String(e.details.problem ?? e.code)), backoffMs: 50 });
      await until(() => errors.length > 0, { timeoutMs: 5000, what: 'the refusal' });
      expect(errors[0]).toBe('e.p.req.not-granted');
      expect(s.connected).toBe(false);
      await s.close();
      await expectCode(c.fetch(1), 'PLX_PICKUP_PROBLEM');

      // The first client that speaks on a socket owns it: another client's request is refused.
      const eve = await recipient(server);
      const ce = new PickupClient({
        mediatorUrl: server.url,
        mediatorDid: server.did,
        did: eve.did,
        resolver,
        keys: eve.keys,
      });
      await c.requestMediation();
      await ce.requestMediation();
      const raw = new WebSocket(server.wsUrl);
      await new Promise((r) => raw.once('open', r));
      const frames: string[] = [];
      raw.on('message', (d) => frames.push(String(d)));
      const statusRequest = (from: string) => ({
        id: `q-${from.slice(-6)}`,
        type: 'https://didcomm.org/messagepickup/3.0/status-request',
        from,
        to: [server.did],
        body: {},
      });
      raw.send(await c.pack(statusRequest(bob.did)));
      await until(() => frames.length === 1, { timeoutMs: 5000, what: 'the status' });
      expect((await c.open(frames[0]!)).type).toBe('https://didcomm.org/messagepickup/3.0/status');
      raw.send(await ce.pack(statusRequest(eve.did)));
      await until(() => frames.length === 2, { timeoutMs: 5000, what: 'the refusal' });
      const refused = await ce.openRaw(frames[1]!);
      expect(refused.type).toBe('https://didcomm.org/report-problem/2.0/problem-report');
      expect(refused.body).toMatchObject({ code: 'e.p.req.connection-bound' });
      raw.close();
    } finally {
      await server.close();
    }
  });

  it('an unreachable mediator is PLX_PICKUP_UNREACHABLE', async () => {
    const port = await freePort();
    const bob = await sender();
    const c = new PickupClient({
      mediatorUrl: `http://127.0.0.1:${port}/`,
      mediatorDid: bob.did,
      did: bob.did,
      resolver,
      keys: bob.keys,
    });
    await expectCode(c.status(), 'PLX_PICKUP_UNREACHABLE');
    expect(
      () => new PickupClient({ mediatorUrl: 'ftp://x', mediatorDid: bob.did, did: bob.did, resolver, keys: bob.keys }),
    ).toThrow(/http/);
  });
});
