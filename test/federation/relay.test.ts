/**
 * The relay outbox (the `didcomm` Event I/O Processor) on simulated time: the outbound grant is
 * checked before anything leaves; services are tried in the DID document's order with fallback;
 * an unreachable recipient is retried with doubling backoff and the sending chart then gets
 * error.communication with the send id and the reason, without ever blocking; and key rotation
 * with messages in flight (the retired key decrypts within its grace period; past it the message
 * is recorded as undecryptable, not dropped silently).
 */
import { describe, expect, it } from 'vitest';
import { PlexusError } from '../../ts/core/errors.js';
import { AdmissionCode, EVENT_MESSAGE_TYPE } from '../../ts/federation/admission.js';
import { ResolverRegistry } from '../../ts/federation/did/registry.js';
import { packEncrypted } from '../../ts/federation/didcomm/pack.js';
import { grant } from '../../ts/federation/grants.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { createPeerIdentity } from '../../ts/federation/mediator/identity.js';
import { Federation, type ProvisionConfig, type ProvisionedActor } from '../../ts/federation/provision.js';
import type { RelayNetwork, RetryPolicy } from '../../ts/federation/relay/outbox.js';
import { memoryJournal } from '../../ts/runtime/log-journal.js';
import { Node } from '../../ts/runtime/node.js';
import type { ActorEvent, Chart, JournalStorage } from '../../ts/runtime/types.js';
import { ManualClock } from '../runtime/helpers.js';

interface Seen {
  events: ActorEvent[];
}
const chart: Chart<Seen> = {
  initial: () => ({ events: [] }),
  transition: (s, e) => {
    const next = { events: [...s.events, e] };
    if (e.name === 'go') {
      const d = e.data as { to: string; id: string };
      return {
        state: next,
        sends: [{ type: 'didcomm', target: d.to, event: 'order.placed', id: d.id, data: { n: 1 } }],
      };
    }
    return { state: next };
  },
};

/** Posts go to a party's admission by URI; unknown URIs are unreachable. Records post times. */
class Net implements RelayNetwork {
  readonly routes = new Map<string, { fed: Federation; actor: ProvisionedActor }>();
  readonly posts: { uri: string; at: number }[] = [];
  constructor(private readonly clock: ManualClock) {}
  async post(uri: string, body: string): Promise<void> {
    this.posts.push({ uri, at: this.clock.now() });
    const r = this.routes.get(uri);
    if (r === undefined) throw new PlexusError('PLX_RELAY_UNREACHABLE', `${uri} is unreachable`, { uri });
    await r.fed.admission.receive(r.actor, body);
  }
}

interface Party {
  fed: Federation;
  node: Node;
  storage: JournalStorage;
  actor: ProvisionedActor;
  keys: InMemoryKeyManager;
}

async function party(
  name: string,
  clock: ManualClock,
  net: Net,
  config: ProvisionConfig,
  retry?: Partial<RetryPolicy>,
  keys = new InMemoryKeyManager({ clock }),
): Promise<Party> {
  const fed = await Federation.create({
    resolver: new ResolverRegistry(),
    clock,
    network: net,
    ...(retry ? { retry } : {}),
  });
  const storage = memoryJournal(2);
  const node = Node.builder(storage).processor(fed.processor()).clock(clock).config({ idleAfter: 0 }).build();
  const actor = await fed.provision(node, chart, name, config, keys);
  return { fed, node, storage, actor, keys };
}

async function ticks(n = 20): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

async function events(p: Party): Promise<ActorEvent[]> {
  return (await p.storage.history(p.actor.did)).records.map((r) => r.event);
}

describe('relay outbox', () => {
  it('retries an unreachable recipient 5 times (1 s doubling) and then gives error.communication, never blocking', async () => {
    const clock = new ManualClock();
    const net = new Net(clock);
    const shop = await party('shop', clock, net, { services: [{ uri: 'http://shop.invalid/didcomm' }] });
    const buyer = await party('buyer', clock, net, {});
    buyer.fed.grants.grantOutbound(grant(buyer.actor.did, shop.actor.did, ['order.*']));
    expect(await buyer.node.send(buyer.actor.did, 'go', { data: { to: shop.actor.did, id: 'o-1' } })).toBe('processed');
    // The chart is not blocked: it takes another event while the send is being retried.
    expect(await buyer.node.send(buyer.actor.did, 'other', {})).toBe('processed');
    for (let i = 0; i < 40 && net.posts.length < 5; i++) {
      await ticks();
      clock.advance(500);
    }
    await ticks();
    expect(net.posts.length).toBe(5);
    const gaps = net.posts.slice(1).map((p, i) => p.at - (net.posts[i] as { at: number }).at);
    expect(gaps).toEqual([1000, 2000, 4000, 8000]);
    for (let i = 0; i < 50; i++) await ticks();
    const err = (await events(buyer)).find((e) => e.name === 'error.communication');
    expect(err?.sendid).toBe('o-1');
    expect(err?.data).toMatchObject({ sendid: 'o-1', code: 'PLX_RELAY_UNDELIVERABLE', target: shop.actor.did });
    expect(String((err?.data as { reason: string } | undefined)?.reason)).toContain('unreachable');
    expect(buyer.fed.outbox.stats.failed).toBe(1);
    clock.advance(120_000);
    await ticks();
    expect(net.posts.length).toBe(5);
    await buyer.node.stop();
  });

  it('follows a configured policy: attempts, first pause and the cap', async () => {
    const clock = new ManualClock();
    const net = new Net(clock);
    const shop = await party('shop', clock, net, { services: [{ uri: 'http://shop.invalid/' }] });
    const buyer = await party('buyer', clock, net, {}, { attempts: 4, initialDelayMs: 100, maxDelayMs: 250 });
    buyer.fed.grants.grantOutbound(grant(buyer.actor.did, shop.actor.did, ['*']));
    await buyer.node.send(buyer.actor.did, 'go', { data: { to: shop.actor.did, id: 'o-2' } });
    for (let i = 0; i < 40 && net.posts.length < 4; i++) {
      await ticks();
      clock.advance(50);
    }
    const gaps = net.posts.slice(1).map((p, i) => p.at - (net.posts[i] as { at: number }).at);
    expect(gaps).toEqual([100, 200, 250]);
  });

  it('tries services in order with fallback, and checks the outbound grant before anything leaves', async () => {
    const clock = new ManualClock();
    const net = new Net(clock);
    const shop = await party('shop', clock, net, {
      services: [{ uri: 'http://down.invalid/' }, { uri: 'http://shop.example/' }],
    });
    net.routes.set('http://shop.example/', { fed: shop.fed, actor: shop.actor });
    shop.fed.grants.grantInbound(grant('*', shop.actor.did, ['order.*']));
    const buyer = await party('buyer', clock, net, {});
    // No outbound grant yet: refused at the sender, nothing posted.
    await buyer.node.send(buyer.actor.did, 'go', { data: { to: shop.actor.did, id: 'o-3' } });
    for (let i = 0; i < 20; i++) await ticks();
    expect(net.posts.length).toBe(0);
    const refused = (await events(buyer)).find((e) => e.name === 'error.communication');
    expect(refused?.data).toMatchObject({ code: 'PLX_GRANT_NONE', sendid: 'o-3' });
    buyer.fed.grants.grantOutbound(grant(buyer.actor.did, shop.actor.did, ['order.*']));
    await buyer.node.send(buyer.actor.did, 'go', { data: { to: shop.actor.did, id: 'o-4' } });
    for (let i = 0; i < 50 && (await events(shop)).length === 0; i++) await ticks();
    expect(net.posts.map((p) => p.uri)).toEqual(['http://down.invalid/', 'http://shop.example/']);
    const got = await events(shop);
    expect(got).toHaveLength(1);
    expect(got[0]).toMatchObject({
      name: 'order.placed',
      sendid: 'o-4',
      origin: buyer.actor.did,
      originverified: true,
    });
  });

  it('key rotation with messages in flight: the retired key decrypts within grace, later ones are recorded', async () => {
    const clock = new ManualClock();
    const net = new Net(clock);
    const keys = new InMemoryKeyManager({ clock, graceMs: 60_000 });
    const shop = await party('shop', clock, net, {}, undefined, keys);
    const bkeys = new InMemoryKeyManager();
    const b = await createPeerIdentity(bkeys);
    shop.fed.grants.grantInbound(grant(b.did, shop.actor.did, ['order.*']));
    const resolver = new ResolverRegistry();
    const inFlight = await Promise.all(
      [1, 2].map(
        async (n) =>
          (
            await packEncrypted(
              {
                id: `f-${n}`,
                type: EVENT_MESSAGE_TYPE,
                from: b.did,
                to: [shop.actor.did],
                body: { name: 'order.placed' },
              },
              { to: shop.actor.did, from: b.did, protectSender: true },
              { resolver, keys: bkeys },
            )
          ).packed,
      ),
    );
    await keys.rotate(shop.actor.agreementKid, `${shop.actor.did}#key-3`);
    expect((await shop.fed.admission.receive(shop.actor, inFlight[0] as string)).kind).toBe('admitted');
    clock.advance(61_000);
    const late = await shop.fed.admission.receive(shop.actor, inFlight[1] as string);
    expect(late.kind === 'refused' && late.refusal.code).toBe(AdmissionCode.undecryptable);
    expect(late.kind === 'refused' && late.refusal.reason).toContain('PLX_DIDCOMM_NO_KEY');
    expect((await shop.storage.history(shop.actor.did)).lastSeq).toBe(1);
    expect((await shop.fed.inboundLog.refused(shop.actor.did)).map((r) => r.code)).toEqual([
      AdmissionCode.undecryptable,
    ]);
  });

  it('refuses sends from actors without a DID and to targets that are not DIDs', async () => {
    const clock = new ManualClock();
    const net = new Net(clock);
    const buyer = await party('buyer', clock, net, {});
    const base = { envelope: { id: 'x#1.0', target: 'did:peer:2.x', event: { name: 'a' } }, send: { event: 'a' } };
    await expect(buyer.fed.outbox.send({ ...base, from: 'vt:orders/1' })).rejects.toMatchObject({
      code: 'PLX_RELAY_NOT_PROVISIONED',
    });
    await expect(
      buyer.fed.outbox.send({ ...base, envelope: { ...base.envelope, target: 'vt:x' }, from: buyer.actor.did }),
    ).rejects.toMatchObject({ code: 'PLX_RELAY_BAD_TARGET' });
    await expect(Federation.create({ resolver: new ResolverRegistry(), retry: { attempts: 0 } })).rejects.toMatchObject(
      {
        code: 'PLX_RELAY_BAD_CONFIG',
      },
    );
  });
});

describe('routing sends to DIDs by scheme', () => {
  it('routeScheme sends untyped sends to DIDs without a chart here through didcomm; bound DIDs stay local', async () => {
    const clock = new ManualClock();
    const net = new Net(clock);
    const shop = await party('shop', clock, net, { services: [{ uri: 'http://shop.example/' }] });
    net.routes.set('http://shop.example/', { fed: shop.fed, actor: shop.actor });
    shop.fed.grants.grantInbound(grant('*', shop.actor.did, ['*']));
    const untyped: Chart<Seen> = {
      initial: () => ({ events: [] }),
      transition: (s, e) => ({
        state: { events: [...s.events, e] },
        sends: e.name === 'go' ? [{ target: (e.data as { to: string }).to, event: 'ping', id: 'p-1' }] : [],
      }),
    };
    for (const routed of [true, false]) {
      const fed = await Federation.create({ resolver: new ResolverRegistry(), clock, network: net });
      const storage = memoryJournal(2);
      const b = Node.builder(storage).processor(fed.processor()).clock(clock).config({ idleAfter: 0 });
      const node = (routed ? b.routeScheme('did', 'didcomm') : b).build();
      const me = await fed.provision(node, untyped, 'me', {}, new InMemoryKeyManager());
      fed.grants.grantOutbound(grant(me.did, shop.actor.did, ['*']));
      const before = net.posts.length;
      await node.send(me.did, 'go', { data: { to: shop.actor.did } });
      for (let i = 0; i < 50; i++) await ticks();
      const evs = (await storage.history(me.did)).records.map((r) => r.event);
      if (routed) {
        expect(net.posts.length).toBe(before + 1);
        expect(evs.map((e) => e.name)).toEqual(['go']);
      } else {
        expect(net.posts.length).toBe(before);
        expect(evs[1]).toMatchObject({ name: 'error.communication', data: { code: 'PLX_RUNTIME_NO_CHART' } });
      }
      // A DID bound on this node is delivered locally, never through the relay.
      await node.send(me.did, 'go', { data: { to: me.did } });
      for (let i = 0; i < 50; i++) await ticks();
      expect(net.posts.length).toBe(before + (routed ? 1 : 0));
      expect((await storage.history(me.did)).records.some((r) => r.event.name === 'ping')).toBe(true);
      await node.stop();
    }
    expect((await shop.storage.history(shop.actor.did)).records.map((r) => r.event.name)).toEqual(['ping']);
  });
});
