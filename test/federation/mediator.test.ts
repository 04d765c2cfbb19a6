/**
 * The mediator in process, over real HTTP on loopback: mediation grant and deny, keylist update
 * and query, forward then pickup between two DIDs, delivery without deletion until
 * messages-received, what a relay stores, and the refusals (queue full, too large, unreadable,
 * unknown recipient, anonymous coordination, live mode over HTTP).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packEncrypted } from '../../ts/federation/didcomm/pack.js';
import { unpack } from '../../ts/federation/didcomm/unpack.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { MEDIATE_REQUEST } from '../../ts/federation/mediator/protocol.js';
import { type MediatorServer, startMediator } from '../../ts/federation/mediator/server.js';
import { expectCode } from './fixtures.js';
import {
  event,
  filesUnder,
  pickupClient,
  post,
  recipient,
  resolver,
  send,
  sender,
  tempDir,
  visible,
} from './mediator-fixtures.js';

let tmp: { dir: string; remove: () => Promise<void> };
let server: MediatorServer;
const denied = { did: '' };

beforeAll(async () => {
  tmp = await tempDir('http');
  server = await startMediator({
    keys: new InMemoryKeyManager(),
    dataDir: `${tmp.dir}/m1`,
    allowClient: (did) => did !== denied.did,
  });
});
afterAll(async () => {
  await server?.close();
  await tmp?.remove();
});

describe('coordinate mediation 2.0 over HTTP', () => {
  it('grants mediation with the routing DID, registers, lists and removes recipient DIDs', async () => {
    const bob = await recipient(server);
    const c = pickupClient(bob, server);
    // Before mediation, pickup and keylist are refused with a problem report.
    const early = await expectCode(c.status(), 'PLX_PICKUP_PROBLEM');
    expect(early.details.problem).toBe('e.p.req.not-granted');
    expect(await c.requestMediation()).toEqual({ routingDid: server.did });
    expect(server.did.startsWith('did:peer:2.')).toBe(true);
    // A client registers its own DID and key ids of its own DID document, nothing else.
    const other = `${bob.did}#key-2`;
    const r = await c.updateKeylist([
      { recipient_did: bob.did, action: 'add' },
      { recipient_did: other, action: 'add' },
      { recipient_did: 'not a did', action: 'add' },
      { recipient_did: bob.did, action: 'add' },
      { recipient_did: `did:example:${'x'.repeat(8)}`, action: 'add' },
    ]);
    expect(r.map((x) => x.result)).toEqual(['success', 'success', 'client_error', 'no_change', 'client_error']);
    expect((await c.queryKeylist()).keys).toEqual([bob.did, other]);
    expect(await c.queryKeylist({ limit: 1, offset: 1 })).toEqual({
      keys: [other],
      pagination: { count: 1, offset: 1, remaining: 0 },
    });
    expect((await c.removeRecipients([other, other])).map((x) => x.result)).toEqual(['success', 'no_change']);
    expect((await c.queryKeylist()).keys).toEqual([bob.did]);
    // Another client cannot take a DID already registered.
    const eve = await recipient(server);
    const ce = pickupClient(eve, server);
    await ce.requestMediation();
    expect((await ce.updateKeylist([{ recipient_did: bob.did, action: 'add' }]))[0]!.result).toBe('client_error');
    const e = await expectCode(ce.addRecipients([bob.did]), 'PLX_PICKUP_KEYLIST');
    expect(e.details.code).toBe('PLX_MEDIATOR_NOT_CONTROLLER');
  });

  it('denies mediation to a client the policy refuses', async () => {
    const mallory = await recipient(server);
    denied.did = mallory.did;
    await expectCode(pickupClient(mallory, server).requestMediation(), 'PLX_PICKUP_DENIED');
  });
});

describe('forward, then pickup 3.0', () => {
  it('delivers a forwarded message end to end, again until messages-received, then never', async () => {
    const alice = await sender();
    const bob = await recipient(server);
    const c = pickupClient(bob, server);
    await c.requestMediation();
    await c.addRecipients([bob.did]);
    for (let i = 0; i < 3; i++) expect((await send(alice, bob, event(alice, bob, i))).status).toBe(202);
    const st = await c.status();
    expect(st).toMatchObject({ messageCount: 3, liveDelivery: false });
    expect(st.totalBytes).toBeGreaterThan(0);
    expect((await c.status(bob.did)).recipientDid).toBe(bob.did);
    expect((await c.status('did:example:nobody')).messageCount).toBe(0);

    const first = await c.fetch(2);
    expect(first).toHaveLength(2);
    const opened = await Promise.all(first.map((m) => unpack(m.envelope, { resolver, keys: bob.keys })));
    expect(opened.map((o) => o.message.id)).toEqual(['send-0-c0ffee', 'send-1-c0ffee']);
    expect(opened[0]!.message.from).toBe(alice.did);
    expect(opened[0]!.message.body).toEqual({ secretPayload: 'forty-two cups of tea #0' });
    expect(opened[0]!.metadata).toMatchObject({ authenticated: true, anonymousSender: true });

    // Delivery deletes nothing: the same messages come again until acknowledged.
    const again = await c.fetch(2);
    expect(again.map((m) => m.id)).toEqual(first.map((m) => m.id));
    expect(again.map((m) => m.envelope)).toEqual(first.map((m) => m.envelope));

    expect((await c.acknowledge(first.map((m) => m.id))).messageCount).toBe(1);
    const rest = await c.fetch(10, bob.did);
    expect(rest).toHaveLength(1);
    expect((await unpack(rest[0]!.envelope, { resolver, keys: bob.keys })).message.id).toBe('send-2-c0ffee');
    // Acknowledging unknown or foreign ids changes nothing.
    expect((await c.acknowledge(['00'.repeat(16), 'nonsense'])).messageCount).toBe(1);
    await c.acknowledge([rest[0]!.id, rest[0]!.id]);
    expect(await c.fetch(10)).toEqual([]);
    expect((await c.status()).messageCount).toBe(0);
  });

  it("another client cannot acknowledge or fetch a recipient's messages", async () => {
    const alice = await sender();
    const bob = await recipient(server);
    const eve = await recipient(server);
    const cb = pickupClient(bob, server);
    const ce = pickupClient(eve, server);
    await cb.requestMediation();
    await cb.addRecipients([bob.did]);
    await ce.requestMediation();
    await ce.addRecipients([eve.did]);
    expect((await send(alice, bob, event(alice, bob, 9))).status).toBe(202);
    const [m] = await cb.fetch(1);
    expect(await ce.fetch(10)).toEqual([]);
    await ce.acknowledge([m!.id]);
    expect((await cb.fetch(10)).map((x) => x.id)).toEqual([m!.id]);
    await cb.acknowledge([m!.id]);
  });

  it("a relay sees routing data only: the mediator's stored bytes hold no event name, payload, send id or origin", async () => {
    const dir = `${tmp.dir}/relay`;
    const m = await startMediator({ keys: new InMemoryKeyManager(), dataDir: dir });
    try {
      const alice = await sender();
      const bob = await recipient(m);
      const c = pickupClient(bob, m);
      await c.requestMediation();
      await c.addRecipients([bob.did]);
      for (let i = 0; i < 3; i++) expect((await send(alice, bob, event(alice, bob, i))).status).toBe(202);
      expect((await c.status()).messageCount).toBe(3);
      const seen = (await filesUnder(dir)).map(visible).join('\n');
      // The check can fail: the routing data (the recipient's DID) is there to be found.
      expect(seen.includes(bob.did)).toBe(true);
      const secrets = [
        'order.placed',
        'https://plexus.example/events/order.placed',
        'forty-two cups of tea',
        'send-0-c0ffee',
        'c0ffee',
        alice.did,
        alice.did.slice(12, 40),
      ];
      for (const s of secrets) expect(seen.includes(s), `the relay stores ${s}`).toBe(false);
      // And the stored envelopes are exactly what the recipient opens.
      const got = await c.fetch(3);
      const ids = await Promise.all(
        got.map(async (g) => (await unpack(g.envelope, { resolver, keys: bob.keys })).message.id),
      );
      expect(ids).toEqual(['send-0-c0ffee', 'send-1-c0ffee', 'send-2-c0ffee']);
    } finally {
      await m.close();
    }
  });
});

describe('refusals', () => {
  it('queue full, oversized, wrong content type, unreadable, unknown recipient, anonymous coordination', async () => {
    const m = await startMediator({
      keys: new InMemoryKeyManager(),
      dataDir: `${tmp.dir}/small`,
      limits: { maxMessages: 2, maxMessageBytes: 16 * 1024 },
    });
    try {
      const alice = await sender();
      const bob = await recipient(m);
      const c = pickupClient(bob, m);
      await c.requestMediation();
      await c.addRecipients([bob.did]);
      expect((await send(alice, bob, event(alice, bob, 1))).status).toBe(202);
      expect((await send(alice, bob, event(alice, bob, 2))).status).toBe(202);
      const full = await send(alice, bob, event(alice, bob, 3));
      expect(full.status).toBe(429);
      expect(JSON.parse(full.body)).toMatchObject({ code: 'PLX_MEDIATOR_QUEUE_FULL' });
      // After pickup, there is room again.
      await c.acknowledge((await c.fetch(1)).map((x) => x.id));
      expect((await send(alice, bob, event(alice, bob, 4))).status).toBe(202);

      const big = { ...event(alice, bob, 5), body: { pad: 'x'.repeat(20_000) } };
      const tooLarge = await send(alice, bob, big);
      expect(tooLarge.status).toBe(413);
      expect(JSON.parse(tooLarge.body).code).toBe('PLX_MEDIATOR_TOO_LARGE');
      const huge = await post(m.url, 'x'.repeat(64 * 1024));
      expect(huge.status).toBe(413);

      const wrongType = await post(m.url, '{}', 'application/json');
      expect(wrongType.status).toBe(415);
      expect(JSON.parse(wrongType.body).code).toBe('PLX_MEDIATOR_BAD_CONTENT_TYPE');

      const garbage = await post(m.url, '{"protected":"x"}');
      expect(garbage.status).toBe(400);
      expect(JSON.parse(garbage.body).code).toBe('PLX_MEDIATOR_UNREADABLE');

      const stranger = await recipient(m);
      const unknown = await send(alice, stranger, event(alice, stranger, 6));
      expect(unknown.status).toBe(404);
      expect(JSON.parse(unknown.body).code).toBe('PLX_MEDIATOR_UNKNOWN_RECIPIENT');

      // Coordination must be authcrypted: an anoncrypted mediate-request is refused.
      const anon = await packEncrypted(
        { id: 'r1', type: MEDIATE_REQUEST, to: [m.did], body: {}, return_route: 'all' },
        { to: m.did, forward: false },
        { resolver, keys: alice.keys },
      );
      const a = await post(m.url, anon.packed);
      expect(a.status).toBe(401);
      expect(JSON.parse(a.body).code).toBe('PLX_MEDIATOR_UNAUTHENTICATED');

      // Live mode needs a WebSocket.
      const live = await expectCode(
        c.request('https://didcomm.org/messagepickup/3.0/live-delivery-change', { live_delivery: true }, []),
        'PLX_PICKUP_PROBLEM',
      );
      expect(live.details.problem).toBe('e.m.live-mode-not-supported');
      // A pickup batch is capped.
      await expectCode(c.fetch(0), 'PLX_PICKUP_BAD_INPUT');
      expect(await c.fetch(1)).toHaveLength(1);
    } finally {
      await m.close();
    }
  });

  it('caps a delivery at the batch size', async () => {
    const m = await startMediator({
      keys: new InMemoryKeyManager(),
      dataDir: `${tmp.dir}/batch`,
      limits: { maxBatch: 3 },
    });
    try {
      const alice = await sender();
      const bob = await recipient(m);
      const c = pickupClient(bob, m);
      await c.requestMediation();
      await c.addRecipients([bob.did]);
      for (let i = 0; i < 5; i++) await send(alice, bob, event(alice, bob, i));
      expect(await c.fetch(100)).toHaveLength(3);
    } finally {
      await m.close();
    }
  });
});
