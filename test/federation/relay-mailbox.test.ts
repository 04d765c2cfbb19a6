/**
 * The receiving relay mailbox acknowledges to the mediator only once the outcome is durable: a
 * journal append that fails leaves the message at the mediator (redelivered on the next pump and
 * then journaled once); a refusal is recorded and acknowledged; an in-process mediator over real
 * HTTP on loopback.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { AdmissionCode } from '../../ts/federation/admission.js';
import { ResolverRegistry } from '../../ts/federation/did/registry.js';
import { grant } from '../../ts/federation/grants.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { startMediator } from '../../ts/federation/mediator/server.js';
import { Federation } from '../../ts/federation/provision.js';
import { memoryJournal } from '../../ts/runtime/log-journal.js';
import { Node } from '../../ts/runtime/node.js';
import type { Chart } from '../../ts/runtime/types.js';
import { until } from '../helpers/until.js';
import { tempDir } from './mediator-fixtures.js';
import { FlakyJournal } from './relay-fixtures.js';

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

const chart: Chart<{ n: number }> = {
  initial: () => ({ n: 0 }),
  transition: (s, e) =>
    e.name === 'go'
      ? {
          state: s,
          sends: [
            { type: 'didcomm', target: (e.data as { to: string }).to, event: (e.data as { ev: string }).ev, id: 'x' },
          ],
        }
      : { state: { n: s.n + 1 } },
};

describe('relay mailbox', () => {
  it('acknowledges only after the journal append; a failed append leaves the message for redelivery', async () => {
    const tmp = await tempDir('relay-mailbox');
    cleanups.push(tmp.remove);
    const server = await startMediator({ keys: new InMemoryKeyManager(), dataDir: tmp.dir, port: 0 });
    cleanups.push(() => server.close());
    const ref = { url: server.url, did: server.did };

    const shopFed = await Federation.create({ resolver: new ResolverRegistry() });
    const journal = new FlakyJournal(memoryJournal(2));
    const shopNode = Node.builder(journal).processor(shopFed.processor()).build();
    const shop = await shopFed.provision(shopNode, chart, 'shop', { mediator: ref }, new InMemoryKeyManager());
    const mailbox = shopFed.mailbox(shop, ref);
    await mailbox.connect();

    const buyerFed = await Federation.create({ resolver: new ResolverRegistry() });
    const buyerNode = Node.builder(memoryJournal(2)).processor(buyerFed.processor()).build();
    const buyer = await buyerFed.provision(buyerNode, chart, 'buyer', {}, new InMemoryKeyManager());
    buyerFed.grants.grantOutbound(grant(buyer.did, shop.did, ['*']));
    shopFed.grants.grantInbound(grant(buyer.did, shop.did, ['order.*']));

    // One at a time, so the mediator queues them in this order.
    for (const [i, ev] of ['order.placed', 'spam.sent'].entries()) {
      await buyerNode.send(buyer.did, 'go', { data: { to: shop.did, ev } });
      await until(() => buyerFed.outbox.stats.delivered >= i + 1, { what: `${ev} delivered to the mediator` });
    }
    expect((await mailbox.client.status()).messageCount).toBe(2);

    journal.failNext = true;
    await expect(mailbox.pump()).rejects.toMatchObject({ code: 'PLX_RUNTIME_JOURNAL_FAILED' });
    expect((await mailbox.client.status()).messageCount).toBe(2);
    expect((await journal.history(shop.did)).lastSeq).toBe(0);

    const r = await mailbox.drain();
    expect(r).toMatchObject({ picked: 2, admitted: 1, refused: 1 });
    expect((await mailbox.client.status()).messageCount).toBe(0);
    const h = await journal.history(shop.did);
    expect(h.lastSeq).toBe(1);
    expect(h.records[0]?.event).toMatchObject({ name: 'order.placed', origin: buyer.did, originverified: true });
    expect((await shopFed.inboundLog.refused(shop.did)).map((x) => x.code)).toEqual([AdmissionCode.noGrant]);

    // A chart binding is exact and cannot be replaced by another chart.
    expect(() => shopNode.bindChart(shop.did, { ...chart })).toThrow(/already bound/);
    await buyerNode.stop();
    await shopNode.stop();
  });
});
