// Two organisations and a mediator. The buyer (organisation A) sends order.placed to the shop's
// did:peer DID (routed to DIDComm by its scheme, as <send type="didcomm"> would); the DID
// resolves to the mediator, the message is authcrypted (sender protected) and forwarded; the shop
// (organisation B) picks it up, verifies the sender, checks its inbound grant, journals the event
// and only then acknowledges it.
//
//   npx bun examples/federation/two-orgs.ts
//
// (after `npm ci`, which builds dist/: the imports below are the package's public entry points.)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Federation, grant, InMemoryKeyManager, ResolverRegistry, startMediator } from 'plexus/federation';
import { type ActorEvent, type Chart, memoryJournal, Node } from 'plexus/runtime';

interface Orders {
  readonly events: string[];
}

/** The chart both organisations run: the buyer sends on `checkout`; every event is kept. */
const chart: Chart<Orders> = {
  initial: () => ({ events: [] }),
  transition: (s, e) => ({
    state: { events: [...s.events, e.name] },
    sends:
      e.name === 'checkout'
        ? [
            {
              target: (e.data as { shop: string }).shop,
              event: 'order.placed',
              id: 'o-1',
              data: { sku: 'tea', qty: 42 },
            },
          ]
        : [],
  }),
};

function sendIdText(id: string | undefined): string {
  return id === undefined ? 'None' : `Some(${JSON.stringify(id)})`;
}

function journaledLine(e: ActorEvent): string {
  return `shop journaled ${e.name} from ${e.origin} via ${e.origintype} (send id ${sendIdText(e.sendid)})`;
}

const dir = mkdtempSync(join(tmpdir(), 'plexus-two-orgs-'));
try {
  // The relay nobody has to trust (here in this process; `plexus federation mediator` runs one alone).
  const server = await startMediator({ keys: new InMemoryKeyManager(), dataDir: join(dir, 'mediator'), port: 0 });
  const mediator = { url: server.url, did: server.did };

  // Organisation B: the shop, receiving through the mediator. The line is printed by the node's
  // macrostep observer, i.e. once the record holding the event is durable.
  const shopFed = await Federation.create({ resolver: new ResolverRegistry() });
  const shopNode = Node.builder(memoryJournal())
    .processor(shopFed.processor())
    .onMacrostep((_iri, entry) => {
      if (entry.event.originverified) console.log(journaledLine(entry.event));
    })
    .build();
  const shop = await shopFed.provision(shopNode, chart, 'shop', { mediator }, new InMemoryKeyManager());
  const mailbox = shopFed.mailbox(shop, mediator);
  await mailbox.connect();

  // Organisation A: the buyer. Sends to DIDs that have no chart on this node go through DIDComm.
  const buyerFed = await Federation.create({ resolver: new ResolverRegistry() });
  const buyerNode = Node.builder(memoryJournal()).processor(buyerFed.processor()).routeScheme('did', 'didcomm').build();
  const buyer = await buyerFed.provision(buyerNode, chart, 'buyer', { mediator }, new InMemoryKeyManager());

  buyerFed.grants.grantOutbound(grant(buyer.did, shop.did, ['order.*']));
  shopFed.grants.grantInbound(grant(buyer.did, shop.did, ['order.*']));

  await buyerNode.send(buyer.did, 'checkout', { data: { shop: shop.did } });
  while (buyerFed.outbox.stats.delivered + buyerFed.outbox.stats.failed < 1) {
    await new Promise((r) => setTimeout(r, 5));
  }

  await mailbox.drain();
  console.log(`mediator still holds ${(await mailbox.client.status()).messageCount} message(s)`);

  await buyerNode.stop();
  await shopNode.stop();
  await server.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
