/**
 * Registration at the mediator needs proof of control: a client registers only its own DID and
 * key ids of its own DID document (the keylist-update is authcrypted from that DID), and a
 * registration cannot be replayed. Three clients, alice, mallory and carol, over real HTTP on
 * loopback: mallory's attempts to take alice's DID, one of her key ids, or to replay her
 * registration are all refused with codes; alice and carol register their own; forwards to
 * alice's DID and to her key id reach alice only, and mallory's pickup gets nothing of hers.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wrapInForward } from '../../ts/federation/didcomm/forward.js';
import { packEncrypted } from '../../ts/federation/didcomm/pack.js';
import { unpack } from '../../ts/federation/didcomm/unpack.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { Mediator } from '../../ts/federation/mediator/mediator.js';
import { KEYLIST_UPDATE } from '../../ts/federation/mediator/protocol.js';
import { ReplayGuard } from '../../ts/federation/mediator/replay.js';
import { RouteTable } from '../../ts/federation/mediator/routes.js';
import { type MediatorServer, startMediator } from '../../ts/federation/mediator/server.js';
import type { PickupClient } from '../../ts/federation/pickup/client.js';
import { MemoryLog, MemoryLogState } from '../../ts/storage/memory-log.js';
import { expectCode } from './fixtures.js';
import {
  event,
  type Party,
  pickupClient,
  post,
  recipient,
  resolver,
  send,
  sender,
  tempDir,
} from './mediator-fixtures.js';

let tmp: { dir: string; remove: () => Promise<void> };
let server: MediatorServer;

beforeAll(async () => {
  tmp = await tempDir('registration');
  server = await startMediator({ keys: new InMemoryKeyManager(), dataDir: `${tmp.dir}/m` });
});
afterAll(async () => {
  await server?.close();
  await tmp?.remove();
});

/** A keylist-update from `p`, packed by its own client (authcrypt from its DID). */
async function keylistUpdate(
  c: PickupClient,
  p: Party,
  updates: { recipient_did: string; action: 'add' | 'remove' }[],
  createdTime: number | null = Math.floor(Date.now() / 1000),
): Promise<string> {
  return c.pack({
    id: randomUUID(),
    type: KEYLIST_UPDATE,
    from: p.did,
    to: [server.did],
    ...(createdTime !== null ? { created_time: createdTime } : {}),
    body: { updates },
    return_route: 'all',
  });
}

/** Posts `msg` for `to` addressed to `next` (a DID or one of its key ids) through the mediator. */
async function sendTo(from: Party, to: Party, next: string, n: number): Promise<number> {
  const inner = await packEncrypted(
    event(from, to, n),
    { to: next, from: from.did, protectSender: true, forward: false },
    { resolver, keys: from.keys },
  );
  const fwd = await wrapInForward(JSON.parse(inner.packed), next, [`${server.did}#key-2`], 'XC20P', resolver);
  return (await post(server.url, JSON.stringify(fwd))).status;
}

describe('registration needs proof of control (alice, mallory, carol)', () => {
  it("mallory gets nothing of alice's: her registrations of alice's DID, key id and replays are refused", async () => {
    const alice = await recipient(server);
    const mallory = await recipient(server);
    const carol = await recipient(server);
    const bob = await sender();
    const ca = pickupClient(alice, server);
    const cm = pickupClient(mallory, server);
    const cc = pickupClient(carol, server);
    for (const c of [ca, cm, cc]) await c.requestMediation();

    // Mallory goes first, before alice registered anything: every attempt is refused with a code.
    const own = await expectCode(cm.addRecipients([alice.did]), 'PLX_PICKUP_KEYLIST');
    expect(own.details.code).toBe('PLX_MEDIATOR_NOT_CONTROLLER');
    const key = await expectCode(cm.addRecipients([`${alice.did}#key-2`]), 'PLX_PICKUP_KEYLIST');
    expect(key.details.code).toBe('PLX_MEDIATOR_NOT_CONTROLLER');
    const r = await cm.updateKeylist([
      { recipient_did: `${alice.did}#key-1`, action: 'add' },
      { recipient_did: `${mallory.did}#key-9`, action: 'add' },
      { recipient_did: `${mallory.did}/path#key-2`, action: 'add' },
      { recipient_did: mallory.did, action: 'add' },
    ]);
    expect(r.map((x) => [x.result, x.code])).toEqual([
      ['client_error', 'PLX_MEDIATOR_NOT_CONTROLLER'],
      ['client_error', 'PLX_MEDIATOR_UNKNOWN_KEY'],
      ['client_error', 'PLX_MEDIATOR_UNKNOWN_KEY'],
      ['success', undefined],
    ]);
    expect((await cm.queryKeylist()).keys).toEqual([mallory.did]);
    // Nothing routes to alice yet.
    expect(await sendTo(bob, alice, alice.did, 0)).toBe(404);

    // Alice registers her DID with a request she packed; mallory captured it and replays it.
    const aliceReg = await keylistUpdate(ca, alice, [{ recipient_did: alice.did, action: 'add' }]);
    expect((await post(server.url, aliceReg)).status).toBe(200);
    const replay = await post(server.url, aliceReg);
    expect(replay.status).toBe(409);
    expect(JSON.parse(replay.body)).toMatchObject({ code: 'PLX_MEDIATOR_REPLAY' });
    // A replayed removal would unregister alice: it is refused the same way.
    const removal = await keylistUpdate(ca, alice, [{ recipient_did: alice.did, action: 'remove' }]);
    const stale = await keylistUpdate(ca, alice, [{ recipient_did: alice.did, action: 'remove' }], 1_000_000_000);
    expect(JSON.parse((await post(server.url, stale)).body)).toMatchObject({ code: 'PLX_MEDIATOR_REPLAY' });
    const noTime = await keylistUpdate(ca, alice, [{ recipient_did: alice.did, action: 'remove' }], null);
    expect(JSON.parse((await post(server.url, noTime)).body)).toMatchObject({ code: 'PLX_MEDIATOR_REPLAY' });
    expect((await ca.queryKeylist()).keys).toEqual([alice.did]);
    expect((await post(server.url, removal)).status).toBe(200);
    expect((await ca.queryKeylist()).keys).toEqual([]);
    expect((await post(server.url, removal)).status).toBe(409);

    // Alice and carol register their own DIDs and key ids through their pickup clients.
    await ca.addRecipients([alice.did, `${alice.did}#key-2`]);
    await cc.addRecipients([carol.did]);
    expect((await ca.queryKeylist()).keys).toEqual([alice.did, `${alice.did}#key-2`]);
    // Mallory still cannot take alice's key id, now registered.
    const taken = await expectCode(cm.addRecipients([`${alice.did}#key-2`]), 'PLX_PICKUP_KEYLIST');
    expect(taken.details.code).toBe('PLX_MEDIATOR_NOT_CONTROLLER');

    // Forwards to alice's DID and to her key id reach alice, those to carol reach carol.
    expect(await sendTo(bob, alice, alice.did, 1)).toBe(202);
    expect(await sendTo(bob, alice, `${alice.did}#key-2`, 2)).toBe(202);
    expect(await sendTo(bob, carol, carol.did, 3)).toBe(202);
    expect((await send(bob, alice, event(bob, alice, 4))).status).toBe(202);

    expect(await cm.fetch(100)).toEqual([]);
    expect((await cm.status()).messageCount).toBe(0);
    const got = await ca.fetch(100);
    const ids = await Promise.all(
      got.map(async (m) => (await unpack(m.envelope, { resolver, keys: alice.keys })).message.id),
    );
    expect(ids).toEqual(['send-1-c0ffee', 'send-2-c0ffee', 'send-4-c0ffee']);
    const carols = await cc.fetch(100);
    expect(carols).toHaveLength(1);
    expect((await unpack(carols[0]!.envelope, { resolver, keys: carol.keys })).message.id).toBe('send-3-c0ffee');
    // Mallory cannot acknowledge (delete) alice's messages either.
    await cm.acknowledge(got.map((m) => m.id));
    expect((await ca.status()).messageCount).toBe(3);
  });

  it('refuses replays over a WebSocket too, and the pickup client registers again with a fresh request', async () => {
    const alice = await recipient(server);
    const ca = pickupClient(alice, server);
    await ca.requestMediation();
    await ca.addRecipients([alice.did]);
    // A second registration is a fresh request (new id and time): no_change, not a replay.
    await ca.addRecipients([alice.did]);
    expect((await ca.updateKeylist([{ recipient_did: alice.did, action: 'add' }]))[0]!.result).toBe('no_change');
    const reg = await keylistUpdate(ca, alice, [{ recipient_did: `${alice.did}#key-2`, action: 'add' }]);
    expect((await post(server.url, reg)).status).toBe(200);
    const { WebSocket } = await import('ws');
    const ws = new WebSocket(server.wsUrl);
    const answer = await new Promise<string>((resolve, reject) => {
      ws.once('open', () => ws.send(reg));
      ws.once('message', (d) => resolve(String(d)));
      ws.once('error', reject);
    });
    ws.close();
    expect(JSON.parse(answer)).toMatchObject({ code: 'PLX_MEDIATOR_REPLAY' });
  });
});

describe('the replay guard and routes from before the rule', () => {
  it('remembers ids within the window, forgets them after, and raises a floor when full', () => {
    let now = 1_700_000_000_000;
    const g = new ReplayGuard(60_000, 3, { now: () => now });
    const t = Math.floor(now / 1000);
    g.check('a', 'm1', t, 'x');
    expect(() => g.check('a', 'm1', t, 'x')).toThrow(/already taken/);
    g.check('b', 'm1', t, 'x'); // ids are per client
    expect(() => g.check('a', 'm2', t - 61, 'x')).toThrow(/more than 60 s/);
    expect(() => g.check('a', 'm2', t + 61, 'x')).toThrow(/more than 60 s/);
    expect(() => g.check('a', 'm2', '1', 'x')).toThrow(/created_time/);
    expect(() => g.check('a', '', t, 'x')).toThrow(/an id/);
    g.check('a', 'm3', t + 1, 'x');
    // Full (3): the oldest (created t) is forgotten and the floor rises to t.
    g.check('a', 'm4', t + 2, 'x');
    expect(g.size).toBe(3);
    expect(() => g.check('a', 'm1', t, 'x')).toThrow(/older than the ids/);
    expect(() => g.check('a', 'm5', t, 'x')).toThrow(/older than the ids/);
    g.check('a', 'm5', t + 2, 'x');
    // After 2 x skew every id is forgotten; a replay is then refused by its time.
    now += 121_000;
    expect(() => g.check('a', 'm4', t + 2, 'x')).toThrow(/more than 60 s/);
    g.check('a', 'm6', Math.floor(now / 1000), 'x');
    expect(g.size).toBe(1);
  });

  it("drops registrations of another client's DID found in an old routes log", async () => {
    const state = new MemoryLogState();
    const t = await RouteTable.open(new MemoryLog(state));
    await t.grant('did:example:mallory');
    await t.grant('did:example:alice');
    // An older mediator took these (first come, no proof).
    await t.add('did:example:mallory', 'did:example:alice');
    await t.add('did:example:mallory', 'did:example:alice#key-2');
    await t.add('did:example:mallory', 'did:example:mallory#key-1');
    await t.add('did:example:alice', 'did:example:alice#key-1');
    const reopened = await RouteTable.open(new MemoryLog(state));
    expect(reopened.dropped).toBe(2);
    expect(reopened.route('did:example:alice')).toBeUndefined();
    expect(reopened.route('did:example:alice#key-2')).toBeUndefined();
    expect(reopened.route('did:example:alice#key-1')).toEqual({
      client: 'did:example:alice',
      recipient: 'did:example:alice#key-1',
    });
    expect(reopened.keys('did:example:mallory')).toEqual(['did:example:mallory#key-1']);
    expect(await reopened.add('did:example:alice', 'did:example:alice')).toBe('success');
  });

  it('checks the new limits', async () => {
    const logs = { queue: new MemoryLog(), routes: new MemoryLog() };
    await expectCode(
      Mediator.open({
        keys: new InMemoryKeyManager(),
        url: 'http://127.0.0.1:1/',
        logs,
        limits: { maxClockSkewMs: 0 },
      }),
      'PLX_MEDIATOR_BAD_INPUT',
    );
  });
});
