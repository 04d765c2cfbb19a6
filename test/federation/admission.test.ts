/**
 * The inbound admission pipeline on a real node (journal in memory, and the inbound log on a
 * FileLog): an admitted event carries the verified origin and is journaled with it; every refusal
 * path (undecryptable, unverifiable sender, anonymous under deny, no grant, expired grant, wrong
 * payload type, duplicate id) is recorded in the actor's inbound log with its reason and costs no
 * journal append; error.communication answers only a verified sender that had contacted the actor.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeInboundEntry } from '../../ts/codec/inbound-record.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { AdmissionCode, DIDCOMM_PROCESSOR_TYPE, EVENT_MESSAGE_TYPE } from '../../ts/federation/admission.js';
import { encodeMultikey } from '../../ts/federation/did/multibase.js';
import { ResolverRegistry } from '../../ts/federation/did/registry.js';
import type { DidDocument } from '../../ts/federation/did/types.js';
import type { DidCommMessage } from '../../ts/federation/didcomm/message.js';
import { packEncrypted } from '../../ts/federation/didcomm/pack.js';
import { grant } from '../../ts/federation/grants.js';
import { graphName, InboundLog } from '../../ts/federation/inbound-log.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { createPeerIdentity } from '../../ts/federation/mediator/identity.js';
import { Federation, type ProvisionedActor } from '../../ts/federation/provision.js';
import type { RelayNetwork } from '../../ts/federation/relay/outbox.js';
import { memoryJournal } from '../../ts/runtime/log-journal.js';
import { Node } from '../../ts/runtime/node.js';
import type { ActorEvent, Chart, JournalStorage } from '../../ts/runtime/types.js';
import { openLog } from '../../ts/storage/file-log.js';
import { until } from '../helpers/until.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

interface Seen {
  events: ActorEvent[];
}
/** Keeps every event it consumes; sends `order.placed` to the DID in `data.to` on `go`. */
const recorder: Chart<Seen> = {
  initial: () => ({ events: [] }),
  transition: (s, e) => {
    if (e.name === 'order.boom') throw new Error('the chart refuses booms');
    const next = { events: [...s.events, e] };
    if (e.name === 'go') {
      const d = e.data as { to: string; id: string; event?: string };
      return {
        state: next,
        sends: [
          { type: 'didcomm', target: d.to, event: d.event ?? 'order.placed', id: d.id, data: { sku: 'A1', qty: 1 } },
        ],
      };
    }
    return { state: next };
  },
};

/** A network that hands posted envelopes straight to a party's admission (no relay). */
class Loopback implements RelayNetwork {
  readonly routes = new Map<string, () => { fed: Federation; actor: ProvisionedActor }>();
  posts: string[] = [];
  /** Posts whose receiving side has finished with them (admitted, refused or failed). */
  settled = 0;
  async post(uri: string, body: string): Promise<void> {
    this.posts.push(uri);
    try {
      const r = this.routes.get(uri);
      if (r === undefined) throw Object.assign(new Error(`no route ${uri}`), {});
      const { fed, actor } = r();
      await fed.admission.receive(actor, body);
    } finally {
      this.settled++;
    }
  }
}

interface Org {
  fed: Federation;
  node: Node;
  storage: JournalStorage;
  keys: InMemoryKeyManager;
  actor: ProvisionedActor;
  log: InboundLog;
}

const now = Date.parse('2026-06-01T00:00:00Z');
const clock = {
  now: () => now,
  setTimeout: (f: () => void, ms: number) => setTimeout(f, ms),
  clearTimeout: (h: unknown) => clearTimeout(h as NodeJS.Timeout),
};

async function org(
  name: string,
  net: Loopback,
  config: Parameters<Federation['provision']>[3] = {},
  resolver = new ResolverRegistry(),
): Promise<Org> {
  const dir = await mkdtemp(join(tmpdir(), `plexus-admission-${name}-`));
  dirs.push(dir);
  const log = await InboundLog.open(await openLog(join(dir, 'inbound'), { fsync: 'never' }));
  const fed = await Federation.create({ resolver, clock, inboundLog: log, network: net, retry: { attempts: 1 } });
  const storage = memoryJournal(4);
  const node = Node.builder(storage).processor(fed.processor()).clock(clock).build();
  const keys = new InMemoryKeyManager({ clock: { now: () => now } });
  const actor = await fed.provision(node, recorder, name, { services: [{ uri: `loop://${name}` }], ...config }, keys);
  net.routes.set(`loop://${name}`, () => ({ fed, actor }));
  return { fed, node, storage, keys, actor, log };
}

function eventMessage(from: string | undefined, to: string, name: string, data: unknown, id: string): DidCommMessage {
  return {
    id,
    type: EVENT_MESSAGE_TYPE,
    ...(from === undefined ? {} : { from }),
    to: [to],
    body: { name, data, sendid: `s-${id}` },
  };
}

async function journaled(o: Org): Promise<number> {
  return (await o.storage.history(o.actor.did)).lastSeq;
}

describe('admission', () => {
  it('admits a granted, verified message: origin and originverified are journaled with the event', async () => {
    const net = new Loopback();
    const shop = await org('shop', net);
    const buyer = await createPeerIdentity(new InMemoryKeyManager());
    const bkeys = new InMemoryKeyManager();
    const b = await createPeerIdentity(bkeys);
    shop.fed.grants.grantInbound(grant(b.did, shop.actor.did, ['order.*']));
    const resolver = new ResolverRegistry();
    const packed = await packEncrypted(
      eventMessage(b.did, shop.actor.did, 'order.placed', { sku: 'A1' }, 'm-1'),
      { to: shop.actor.did, from: b.did, protectSender: true },
      { resolver, keys: bkeys },
    );
    const o = await shop.fed.admission.receive(shop.actor, packed.packed);
    expect(o.kind).toBe('admitted');
    const h = await shop.storage.history(shop.actor.did);
    expect(h.lastSeq).toBe(1);
    const ev = h.records[0]?.event;
    expect(ev).toMatchObject({
      name: 'order.placed',
      origin: b.did,
      originverified: true,
      origintype: DIDCOMM_PROCESSOR_TYPE,
      sendid: 's-m-1',
      data: { sku: 'A1' },
    });
    expect(shop.log.hasContact(shop.actor.did, b.did)).toBe(true);
    expect(shop.log.hasContact(shop.actor.did, buyer.did)).toBe(false);
    // The admission outcome is journaled: reading back needs no resolver or key.
    const again = await memoryJournalReplay(shop);
    expect(again.originverified).toBe(true);
  });

  it('records every refusal with its reason and appends nothing to the journal', async () => {
    const net = new Loopback();
    const shop = await org('shop', net, {
      eventTypes: {
        'order.placed': {
          type: 'object',
          required: ['sku', 'qty'],
          properties: { sku: { type: 'string', maxLength: 16 }, qty: { type: 'integer', minimum: 1 } },
          additionalProperties: false,
        },
        'order.note': (d) => (typeof d === 'string' && d.length < 10 ? true : 'a note is a short string'),
      },
    });
    const bkeys = new InMemoryKeyManager();
    const b = await createPeerIdentity(bkeys);
    const resolver = new ResolverRegistry();
    shop.fed.grants.grantInbound(grant(b.did, shop.actor.did, ['order.placed', 'order.note']));
    shop.fed.grants.grantInbound(grant(b.did, shop.actor.did, ['order.cancel'], now - 1));
    const pack = async (m: DidCommMessage, from: string | null = b.did, keys = bkeys, res = resolver) =>
      (
        await packEncrypted(
          m,
          { to: shop.actor.did, ...(from ? { from, protectSender: true } : {}) },
          { resolver: res, keys },
        )
      ).packed;

    // One admitted message first, so later refusals are of a contact.
    expect(
      (
        await shop.fed.admission.receive(
          shop.actor,
          await pack(eventMessage(b.did, shop.actor.did, 'order.placed', { sku: 'A', qty: 2 }, 'ok-1')),
        )
      ).kind,
    ).toBe('admitted');
    expect(await journaled(shop)).toBe(1);

    // Undecryptable: encrypted to somebody else's key.
    const other = await createPeerIdentity(new InMemoryKeyManager());
    const notOurs = (
      await packEncrypted(
        { ...eventMessage(b.did, other.did, 'order.placed', { sku: 'A', qty: 1 }, 'u-1') },
        { to: other.did, from: b.did },
        { resolver, keys: bkeys },
      )
    ).packed;
    // Unverifiable: the sender's DID method is one only the sender's own resolver knows.
    const xkeys = new InMemoryKeyManager();
    const xdid = 'did:example:buyer';
    const xk = await xkeys.generate(`${xdid}#agree`, 'X25519');
    const xdoc: DidDocument = {
      id: xdid,
      verificationMethod: [
        {
          id: `${xdid}#agree`,
          type: 'Multikey',
          controller: xdid,
          publicKeyMultibase: encodeMultikey('X25519', xk.publicKey),
        },
      ],
      keyAgreement: [`${xdid}#agree`],
    } as DidDocument;
    const xres = new ResolverRegistry();
    xres.register({ method: 'example', resolve: async () => xdoc });
    shop.fed.grants.grantInbound(grant(xdid, shop.actor.did, ['*']));
    const unverifiable = await pack(
      eventMessage(xdid, shop.actor.did, 'order.placed', { sku: 'A', qty: 1 }, 'x-1'),
      xdid,
      xkeys,
      xres,
    );

    const dup = await pack(eventMessage(b.did, shop.actor.did, 'order.placed', { sku: 'A', qty: 2 }, 'ok-1'));
    const cases: [string, string][] = [
      [AdmissionCode.undecryptable, notOurs],
      [AdmissionCode.unverified, unverifiable],
      [
        AdmissionCode.anonymous,
        await pack(eventMessage(undefined, shop.actor.did, 'order.placed', { sku: 'A', qty: 1 }, 'a-1'), null),
      ],
      [AdmissionCode.noGrant, await pack(eventMessage(b.did, shop.actor.did, 'refund.asked', {}, 'g-1'))],
      [AdmissionCode.grantExpired, await pack(eventMessage(b.did, shop.actor.did, 'order.cancel', {}, 'e-1'))],
      [
        AdmissionCode.payload,
        await pack(eventMessage(b.did, shop.actor.did, 'order.placed', { sku: 'A', qty: 'two' }, 'p-1')),
      ],
      [
        AdmissionCode.payload,
        await pack(eventMessage(b.did, shop.actor.did, 'order.note', 'far too long a note', 'p-2')),
      ],
      [AdmissionCode.duplicate, dup],
    ];
    for (const [code, envelope] of cases) {
      const o = await shop.fed.admission.receive(shop.actor, envelope);
      expect(o.kind, code).toBe('refused');
      if (o.kind === 'refused') expect(o.refusal.code).toBe(code);
    }
    expect(await journaled(shop)).toBe(1);
    const refused = await shop.log.refused(shop.actor.did);
    expect(refused.map((r) => r.code)).toEqual(cases.map((c) => c[0]));
    for (const r of refused) expect(r.reason.length).toBeGreaterThan(10);
    expect(refused[0]?.envelopeSha256).toMatch(/^[0-9a-f]{64}$/);
    expect(refused[0]?.sender).toBeUndefined();
    expect(refused[1]?.reason).toContain('PLX_DID_');
    expect(refused[3]).toMatchObject({ sender: b.did, senderVerified: true, event: 'refund.asked', messageId: 'g-1' });
    expect(refused[5]?.reason).toContain('$.qty');
    // The log is a file: reopened, the graph is the same.
    expect(graphName(shop.actor.did)).toBe(`${shop.actor.did}/inbound`);
  });

  it('deduplicates across a restart of the federation by the journal (runtime dedup), still without an append', async () => {
    const net = new Loopback();
    const shop = await org('shop', net);
    const bkeys = new InMemoryKeyManager();
    const b = await createPeerIdentity(bkeys);
    shop.fed.grants.grantInbound(grant(b.did, shop.actor.did, ['order.*']));
    const packed = (
      await packEncrypted(
        eventMessage(b.did, shop.actor.did, 'order.placed', {}, `${b.did}#1.0`),
        { to: shop.actor.did, from: b.did },
        { resolver: new ResolverRegistry(), keys: bkeys },
      )
    ).packed;
    expect((await shop.fed.admission.receive(shop.actor, packed)).kind).toBe('admitted');
    const fresh = await Federation.create({ resolver: new ResolverRegistry(), clock, inboundLog: shop.log });
    fresh.grants.grantInbound(grant(b.did, shop.actor.did, ['order.*']));
    const o = await fresh.admission.receive(shop.actor, packed);
    expect(o.kind === 'refused' && o.refusal.code).toBe(AdmissionCode.duplicate);
    expect(o.kind === 'refused' && o.refusal.reason).toContain('already journaled');
    expect(await journaled(shop)).toBe(1);
  });

  it('takes anonymous messages under allow, with a grant for *, and without an origin', async () => {
    const net = new Loopback();
    const shop = await org('shop', net, { anonymous: 'allow' });
    shop.fed.grants.grantInbound(grant('*', shop.actor.did, ['feedback']));
    const packed = (
      await packEncrypted(
        eventMessage(undefined, shop.actor.did, 'feedback', { stars: 5 }, 'anon-1'),
        { to: shop.actor.did },
        { resolver: new ResolverRegistry(), keys: new InMemoryKeyManager() },
      )
    ).packed;
    expect((await shop.fed.admission.receive(shop.actor, packed)).kind).toBe('admitted');
    const ev = (await shop.storage.history(shop.actor.did)).records[0]?.event;
    expect(ev?.name).toBe('feedback');
    expect(ev?.origin).toBeUndefined();
    expect(ev?.originverified).toBeUndefined();
  });

  it('answers error.communication only to a verified sender that had contacted the actor', async () => {
    const net = new Loopback();
    const shop = await org('shop', net);
    const buyer = await org('buyer', net);
    const stranger = await org('stranger', net);
    for (const from of [buyer, stranger]) {
      from.fed.grants.grantOutbound(grant(from.actor.did, shop.actor.did, ['*']));
    }
    shop.fed.grants.grantInbound(grant(buyer.actor.did, shop.actor.did, ['order.placed']));
    shop.fed.grants.grantOutbound(grant(shop.actor.did, buyer.actor.did, ['*']));
    // The buyer contacts the shop (granted), then sends an ungranted event with send id o-2.
    await buyer.node.send(buyer.actor.did, 'go', { data: { to: shop.actor.did, id: 'o-1' } });
    await until(async () => (await journaled(shop)) === 1, { timeoutMs: 5_000, what: '(await journaled(shop)) === 1' });
    await buyer.node.send(buyer.actor.did, 'go', { data: { to: shop.actor.did, id: 'o-2', event: 'order.refund' } });
    await until(async () => (await buyer.storage.history(buyer.actor.did)).lastSeq === 3, {
      timeoutMs: 5_000,
      what: '(await buyer.storage.history(buyer.actor.did)).lastSeq === 3',
    });
    const events = (await buyer.storage.history(buyer.actor.did)).records.map((r) => r.event);
    const err = events.find((e) => e.name === 'error.communication');
    expect(err).toMatchObject({ sendid: 'o-2', origin: shop.actor.did, originverified: true });
    expect((err?.data as { code: string } | undefined)?.code).toBe(AdmissionCode.noGrant);
    // A stranger (never admitted) gets nothing back; its refusal is still recorded.
    await stranger.node.send(stranger.actor.did, 'go', { data: { to: shop.actor.did, id: 's-1' } });
    await until(async () => (await shop.log.refused(shop.actor.did)).length === 2, {
      timeoutMs: 5_000,
      what: '(await shop.log.refused(shop.actor.did)).length === 2',
    });
    // Every post has been handled on its receiving side: an answer to the stranger would be
    // one of them.
    await until(() => net.settled === net.posts.length, { timeoutMs: 5_000, what: 'every post handled' });
    expect((await stranger.storage.history(stranger.actor.did)).lastSeq).toBe(1);
    expect(await journaled(shop)).toBe(1);
  });

  it('refuses an over-long message id without an append; a throwing chart is still an outcome', async () => {
    const net = new Loopback();
    const shop = await org('shop', net);
    const bkeys = new InMemoryKeyManager();
    const b = await createPeerIdentity(bkeys);
    shop.fed.grants.grantInbound(grant(b.did, shop.actor.did, ['order.*']));
    const pack = async (name: string, id: string) =>
      (
        await packEncrypted(
          eventMessage(b.did, shop.actor.did, name, {}, id),
          { to: shop.actor.did, from: b.did },
          {
            resolver: new ResolverRegistry(),
            keys: bkeys,
          },
        )
      ).packed;
    const long = await shop.fed.admission.receive(shop.actor, await pack('order.placed', 'x'.repeat(9000)));
    expect(long.kind === 'refused' && long.refusal.code).toBe(AdmissionCode.malformed);
    expect(await journaled(shop)).toBe(0);
    // The chart throws: the event is consumed by a durable macrostep, so the relay may be acknowledged.
    const boom = await shop.fed.admission.receive(shop.actor, await pack('order.boom', 'b-1'));
    expect(boom.kind).toBe('admitted');
    expect(await journaled(shop)).toBe(1);
  });

  it('refuses bad schemas when provisioning', async () => {
    const net = new Loopback();
    await expect(org('bad', net, { eventTypes: { 'a.b': { type: 'object', oneOf: [] } } })).rejects.toMatchObject({
      code: AdmissionCode.badSchema,
    });
  });

  it('reads back only inbound entries or refuses with PLX_ADMISSION_LOG_CORRUPT', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        try {
          const e = decodeInboundEntry(bytes);
          expect(['refused', 'contact']).toContain(e.kind);
        } catch (e) {
          expect(isPlexusError(e, 'PLX_ADMISSION_LOG_CORRUPT')).toBe(true);
        }
      }),
      { seed: 7, numRuns: 500 },
    );
  });
});

async function memoryJournalReplay(o: Org): Promise<ActorEvent> {
  await o.node.stop();
  const node = Node.builder(o.storage).build();
  node.bindChart(o.actor.did, recorder);
  await node.send(o.actor.did, 'ping', { id: 'ping-1' });
  const st = node.activation(o.actor.did)?.currentState as Seen;
  await node.stop();
  return st.events[0] as ActorEvent;
}
