/**
 * The relay mailbox in live mode: messages pushed over the mediator's WebSocket are admitted and
 * acknowledged only once their turn is durable; when the socket drops the mailbox polls in
 * batches over HTTP and reconnects with backoff; nothing is lost and nothing is journaled twice.
 * The first test runs the mediator as its own process (`plexus federation mediator`), SIGKILLed
 * in the middle of a live stream and restarted on the same port with the same key file.
 */
import type { Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PlexusError } from '../../ts/core/errors.js';
import { AdmissionCode } from '../../ts/federation/admission.js';
import { ResolverRegistry } from '../../ts/federation/did/registry.js';
import { grant } from '../../ts/federation/grants.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { startMediator as startInProcess } from '../../ts/federation/mediator/server.js';
import { Federation, type ProvisionedActor } from '../../ts/federation/provision.js';
import type { MailboxState, RelayMailbox } from '../../ts/federation/relay/mailbox.js';
import { probeWebSocket } from '../../ts/federation/relay/ws-probe.js';
import { memoryJournal, openJournal } from '../../ts/runtime/log-journal.js';
import { Node } from '../../ts/runtime/node.js';
import type { ActorHistory, Chart, JournalStorage } from '../../ts/runtime/types.js';
import { until } from '../helpers/until.js';
import { freePort, tempDir } from './mediator-fixtures.js';
import { FlakyJournal, MediatorProcesses, postForwarder } from './relay-fixtures.js';

let tmp: { dir: string; remove: () => Promise<void> };
const mediators = new MediatorProcesses('live pickup');
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  await mediators.setup();
  tmp = await tempDir('mailbox-live');
}, 60_000);
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  await mediators.teardown();
  await tmp?.remove();
});

/** The buyer sends `order.placed` (send id `o-<n>`) to `to` on each `go`; the shop counts. */
const chart: Chart<{ n: number }> = {
  initial: () => ({ n: 0 }),
  transition: (s, e) => {
    if (e.name !== 'go') return { state: { n: s.n + 1 } };
    const d = e.data as { to: string; n: number };
    return { state: s, sends: [{ type: 'didcomm', target: d.to, event: 'order.placed', id: `o-${d.n}` }] };
  },
};

/** How many times each send id was journaled as `order.placed`. */
function journaledSendIds(h: ActorHistory): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of h.records) {
    if (r.event.name !== 'order.placed') continue;
    const id = String(r.event.sendid);
    out.set(id, (out.get(id) ?? 0) + 1);
  }
  return out;
}

interface Parties {
  buyerFed: Federation;
  buyerNode: Node;
  buyer: ProvisionedActor;
  shopFed: Federation;
  shopNode: Node;
  shop: ProvisionedActor;
}

async function parties(mediator: { url: string; did: string }, shopJournal: JournalStorage): Promise<Parties> {
  const shopFed = await Federation.create({ resolver: new ResolverRegistry() });
  const shopNode = Node.builder(shopJournal).processor(shopFed.processor()).build();
  const shop = await shopFed.provision(shopNode, chart, 'shop', { mediator }, new InMemoryKeyManager());
  const buyerFed = await Federation.create({ resolver: new ResolverRegistry(), retry: { initialDelayMs: 20 } });
  const buyerNode = Node.builder(memoryJournal(2)).processor(buyerFed.processor()).build();
  const buyer = await buyerFed.provision(buyerNode, chart, 'buyer', {}, new InMemoryKeyManager());
  buyerFed.grants.grantOutbound(grant(buyer.did, shop.did, ['order.*']));
  shopFed.grants.grantInbound(grant(buyer.did, shop.did, ['order.*']));
  cleanups.push(async () => {
    await buyerNode.stop();
    await shopNode.stop();
  });
  return { buyerFed, buyerNode, buyer, shopFed, shopNode, shop };
}

/** Sends `order.placed` o-<from>..o-<to-1>, one at a time (so the mediator queues them in order). */
async function sendOrders(p: Parties, from: number, to: number): Promise<void> {
  const base = p.buyerFed.outbox.stats.delivered;
  for (let n = from; n < to; n++) {
    await p.buyerNode.send(p.buyer.did, 'go', { data: { to: p.shop.did, n } });
    await until(() => p.buyerFed.outbox.stats.delivered >= base + n - from + 1, {
      timeoutMs: 10_000,
      what: `o-${n} at the mediator`,
    });
  }
  expect(p.buyerFed.outbox.stats.failed).toBe(0);
}

describe('relay mailbox, live mode', () => {
  it('takes live deliveries, polls while the mediator process is SIGKILLed mid-stream, reconnects, and journals every message exactly once', async () => {
    const port = await freePort();
    const args = MediatorProcesses.args(port, tmp.dir);
    let mediator = await mediators.start(args);
    cleanups.push(() => mediators.stop(mediator, 'SIGKILL'));
    const ref = { url: mediator.url, did: mediator.did };
    const journal = await openJournal(join(tmp.dir, 'shop-journal'), { shardCount: 2 });
    cleanups.push(() => journal.close());
    const p = await parties(ref, journal);

    const FIRST = 30;
    const SECOND = 10;
    const sendIdOf = new Map<string, string>();
    let acked = 0;
    let killed = false;
    const lateAcks: string[] = [];
    const mailbox: RelayMailbox = p.shopFed.mailbox(p.shop, ref, {
      onOutcome: (o, m) => {
        if (o.kind === 'admitted') sendIdOf.set(m.id, String(o.envelope.event.sendid));
      },
      beforeAcknowledge: async (ids) => {
        // Every id about to be acknowledged is already in the journal.
        const inJournal = journaledSendIds(await journal.history(p.shop.did));
        for (const id of ids) {
          const sendid = sendIdOf.get(id);
          if (sendid !== undefined && !inJournal.has(sendid)) lateAcks.push(id);
        }
        acked += ids.length;
        if (!killed && acked >= 8) {
          // Mid-stream: some turns are durable and not acknowledged, more are still queued.
          killed = true;
          await mediators.stop(mediator, 'SIGKILL');
        }
      },
    });
    await mailbox.connect();
    // Queued while the shop's mailbox is not started; pushed live as soon as it starts.
    await sendOrders(p, 0, FIRST);
    const states: MailboxState[] = [];
    const errors: string[] = [];
    mailbox.start({
      intervalMs: 50,
      backoffMs: 200,
      maxBackoffMs: 800,
      onState: (s) => states.push(s),
      onError: (e) => errors.push(e instanceof PlexusError ? e.code : String(e)),
    });
    cleanups.push(() => mailbox.stop());

    await until(() => killed, { timeoutMs: 15_000, what: 'the kill in the middle of the live stream' });
    expect(mailbox.stats.liveDelivered).toBeGreaterThan(0);
    await until(() => mailbox.state === 'polling', { timeoutMs: 5_000, what: 'the fallback to polling' });
    const liveBefore = mailbox.stats.liveDelivered;
    const polledBefore = mailbox.stats.polled;
    await until(() => errors.includes('PLX_PICKUP_UNREACHABLE'), {
      timeoutMs: 5_000,
      what: 'a failed poll while the mediator is down',
    });

    mediator = await mediators.start(args);
    expect(mediator.did).toBe(ref.did);
    await until(() => mailbox.state === 'live', { timeoutMs: 15_000, what: 'the live connection again' });
    // What was left came again after the restart: in a poll, or pushed on the new connection,
    // whichever was first (the next test makes the socket-down poll deterministic).
    expect(mailbox.stats.polled + mailbox.stats.liveDelivered).toBeGreaterThan(polledBefore + liveBefore);
    expect(mailbox.stats.liveConnects).toBeGreaterThanOrEqual(2);
    expect(mailbox.stats.liveDrops).toBeGreaterThanOrEqual(1);

    // New messages now arrive live.
    await sendOrders(p, FIRST, FIRST + SECOND);
    await until(async () => (await journal.history(p.shop.did)).lastSeq >= FIRST + SECOND, {
      timeoutMs: 15_000,
      what: 'every order journaled',
    });
    await until(() => mailbox.stats.acknowledged >= FIRST + SECOND, {
      timeoutMs: 10_000,
      what: 'every order acknowledged',
    });
    expect(mailbox.stats.liveDelivered).toBeGreaterThanOrEqual(liveBefore + SECOND);
    expect(mailbox.state).toBe('live');
    await mailbox.stop();

    const counts = journaledSendIds(await journal.history(p.shop.did));
    expect(counts.size).toBe(FIRST + SECOND);
    for (let n = 0; n < FIRST + SECOND; n++) expect(counts.get(`o-${n}`)).toBe(1);
    expect((await journal.history(p.shop.did)).lastSeq).toBe(FIRST + SECOND);
    // Messages durable before the kill and not acknowledged came back and were only acknowledged.
    const refusedDup = (await p.shopFed.inboundLog.refused(p.shop.did)).filter(
      (r) => r.code === AdmissionCode.duplicate,
    ).length;
    expect(mailbox.stats.redelivered + refusedDup).toBeGreaterThan(0);
    expect((await p.shopFed.inboundLog.refused(p.shop.did)).filter((r) => r.code !== AdmissionCode.duplicate)).toEqual(
      [],
    );
    expect(lateAcks).toEqual([]);
    expect((await mailbox.client.status()).messageCount).toBe(0);
    expect(states.slice(0, 4)).toEqual(['polling', 'live', 'polling', 'live']);

    await mediators.stop(mediator, 'SIGTERM');
  }, 60_000);

  it('polls over HTTP while only the WebSocket is down, and goes live again when it is back', async () => {
    const t = await tempDir('mailbox-ws-down');
    cleanups.push(t.remove);
    const server = await startInProcess({ keys: new InMemoryKeyManager(), dataDir: t.dir, port: 0 });
    cleanups.push(() => server.close());
    const mediatorPort = Number(new URL(server.url).port);
    // A front for the mediator: POSTs pass through; WebSocket upgrades are piped through while
    // `wsAllowed`, answered 503 (as a mediator that is starting) otherwise; `dropSockets()` cuts them.
    let wsAllowed = true;
    const piped = new Set<Socket>();
    const front: Server = postForwarder(server.url);
    front.on('upgrade', (req, socket: Socket, head: Buffer) => {
      if (!wsAllowed) {
        socket.end('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      const up = connect(mediatorPort, '127.0.0.1', () => {
        let raw = `${req.method} ${req.url} HTTP/1.1\r\n`;
        for (let i = 0; i < req.rawHeaders.length; i += 2) raw += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
        up.write(`${raw}\r\n`);
        if (head.length > 0) up.write(head);
        socket.pipe(up).pipe(socket);
      });
      for (const s of [socket, up]) {
        piped.add(s);
        s.on('error', () => {});
        s.on('close', () => {
          piped.delete(s);
          socket.destroy();
          up.destroy();
        });
      }
    });
    const dropSockets = () => {
      for (const s of piped) s.destroy();
    };
    await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
    cleanups.push(
      () =>
        new Promise((r) => {
          dropSockets();
          front.close(r);
        }),
    );
    const ref = { url: `http://127.0.0.1:${(front.address() as { port: number }).port}/`, did: server.did };

    const journal = memoryJournal(2);
    const p = await parties(ref, journal);
    const mailbox = p.shopFed.mailbox(p.shop, ref);
    await mailbox.connect();
    const states: MailboxState[] = [];
    mailbox.start({ mode: 'live', intervalMs: 30, backoffMs: 200, maxBackoffMs: 200, onState: (s) => states.push(s) });
    cleanups.push(() => mailbox.stop());
    await until(() => mailbox.state === 'live', { timeoutMs: 10_000, what: 'live' });

    await sendOrders(p, 0, 3);
    await until(() => mailbox.stats.acknowledged >= 3, { timeoutMs: 10_000, what: 'o-0..o-2 acknowledged' });
    expect(mailbox.stats).toMatchObject({ liveDelivered: 3, polled: 0 });

    // The socket drops and cannot come back; HTTP still works: the mailbox polls.
    wsAllowed = false;
    dropSockets();
    await until(() => mailbox.state === 'polling', { timeoutMs: 10_000, what: 'polling' });
    await sendOrders(p, 3, 6);
    await until(() => mailbox.stats.acknowledged >= 6, { timeoutMs: 10_000, what: 'o-3..o-5 acknowledged' });
    expect(mailbox.stats).toMatchObject({ liveDelivered: 3, polled: 3, liveConnects: 1, liveDrops: 1 });
    expect(mailbox.state).toBe('polling');

    // The socket is back: live again.
    wsAllowed = true;
    await until(() => mailbox.state === 'live', { timeoutMs: 10_000, what: 'live again' });
    await sendOrders(p, 6, 8);
    await until(() => mailbox.stats.acknowledged >= 8, { timeoutMs: 10_000, what: 'o-6 and o-7 acknowledged' });
    expect(mailbox.stats).toMatchObject({ liveDelivered: 5, polled: 3, liveConnects: 2, admitted: 8, refused: 0 });
    await mailbox.stop();
    expect(states).toEqual(['polling', 'live', 'polling', 'live', 'stopped']);
    expect(journaledSendIds(await journal.history(p.shop.did))).toEqual(
      new Map(Array.from({ length: 8 }, (_, n) => [`o-${n}`, 1])),
    );
    expect((await mailbox.client.status()).messageCount).toBe(0);
  }, 30_000);

  it('catches up over HTTP after a live delivery whose append failed, then goes on live', async () => {
    const t = await tempDir('mailbox-live-flaky');
    cleanups.push(t.remove);
    const server = await startInProcess({ keys: new InMemoryKeyManager(), dataDir: t.dir, port: 0 });
    cleanups.push(() => server.close());
    const ref = { url: server.url, did: server.did };
    const journal = new FlakyJournal(memoryJournal(2));
    const p = await parties(ref, journal);
    const mailbox = p.shopFed.mailbox(p.shop, ref);
    await mailbox.connect();
    const errors: string[] = [];
    mailbox.start({ mode: 'live', intervalMs: 20, onError: (e) => errors.push((e as PlexusError).code) });
    cleanups.push(() => mailbox.stop());
    await until(() => mailbox.state === 'live', { timeoutMs: 10_000, what: 'live' });

    journal.failNext = true;
    await sendOrders(p, 0, 3);
    await until(() => errors.includes('PLX_RUNTIME_JOURNAL_FAILED'), { timeoutMs: 10_000, what: 'the failed append' });
    await until(async () => (await journal.history(p.shop.did)).lastSeq >= 3, {
      timeoutMs: 15_000,
      what: 'o-0..o-2 journaled',
    });
    const h = await journal.history(p.shop.did);
    // In order, once each; the first one after its failed append.
    expect(h.records.map((r) => r.event.sendid)).toEqual(['o-0', 'o-1', 'o-2']);
    expect(mailbox.stats.polled).toBeGreaterThanOrEqual(1);
    await until(() => mailbox.state === 'live', { timeoutMs: 10_000, what: 'live again after catching up' });

    const live = mailbox.stats.liveDelivered;
    await sendOrders(p, 3, 5);
    await until(() => mailbox.stats.acknowledged >= 5 && mailbox.stats.admitted >= 5, {
      timeoutMs: 10_000,
      what: 'o-3 and o-4',
    });
    expect(mailbox.stats.liveDelivered).toBeGreaterThanOrEqual(live + 2);
    await mailbox.stop();
    expect(journaledSendIds(await journal.history(p.shop.did))).toEqual(
      new Map(['o-0', 'o-1', 'o-2', 'o-3', 'o-4'].map((s) => [s, 1])),
    );
    expect((await mailbox.client.status()).messageCount).toBe(0);
  }, 30_000);

  it('auto mode polls in batches when the mediator refuses the WebSocket upgrade', async () => {
    const t = await tempDir('mailbox-http-only');
    cleanups.push(t.remove);
    const server = await startInProcess({ keys: new InMemoryKeyManager(), dataDir: t.dir, port: 0 });
    cleanups.push(() => server.close());
    // An HTTP-only front for the mediator: POSTs pass through, upgrades are refused.
    const front: Server = postForwarder(server.url);
    front.on('upgrade', (_req, socket) => socket.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n'));
    await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => front.close(r)));
    const frontUrl = `http://127.0.0.1:${(front.address() as { port: number }).port}/`;
    const ref = { url: frontUrl, did: server.did };

    expect(await probeWebSocket(frontUrl.replace('http', 'ws'), 2000)).toBe('no');
    expect(await probeWebSocket(server.wsUrl, 2000)).toBe('yes');

    const journal = memoryJournal(2);
    const p = await parties(ref, journal);
    const mailbox = p.shopFed.mailbox(p.shop, ref);
    await mailbox.connect();
    mailbox.start({ intervalMs: 20 });
    cleanups.push(() => mailbox.stop());
    await sendOrders(p, 0, 4);
    await until(() => mailbox.stats.acknowledged >= 4, { timeoutMs: 10_000, what: 'four acknowledged' });
    expect(mailbox.state).toBe('polling');
    expect(mailbox.stats).toMatchObject({ liveConnects: 0, liveDelivered: 0, polled: 4, admitted: 4 });
    await mailbox.stop();
    expect(mailbox.state).toBe('stopped');
    expect((await journal.history(p.shop.did)).lastSeq).toBe(4);
  }, 30_000);

  it('refuses bad start options with PLX_RELAY_MAILBOX_OPTIONS; an unreachable WebSocket is unknown', async () => {
    const fed = await Federation.create({ resolver: new ResolverRegistry() });
    const node = Node.builder(memoryJournal(2)).processor(fed.processor()).build();
    cleanups.push(() => node.stop());
    const port = await freePort();
    const ref = { url: `http://127.0.0.1:${port}/`, did: 'did:example:mediator' };
    const shop = await fed.provision(node, chart, 'shop', {}, new InMemoryKeyManager());
    const mailbox = fed.mailbox(shop, ref);
    expect(() => mailbox.start({ mode: 'push' as 'live' })).toThrow(PlexusError);
    expect(() => mailbox.start({ intervalMs: 0 })).toThrow(/intervalMs must be/);
    expect(() => mailbox.start({ backoffMs: Number.NaN })).toThrow(/backoffMs/);
    expect(() => fed.mailbox(shop, ref, { rememberIds: 0 })).toThrow(
      expect.objectContaining({ code: 'PLX_RELAY_MAILBOX_OPTIONS' }),
    );
    expect(mailbox.state).toBe('stopped');
    expect(await probeWebSocket(`ws://127.0.0.1:${port}/`, 2000)).toBe('unknown');
  });
});
