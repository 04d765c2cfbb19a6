// Two organisations and a mediator. The buyer (organisation A) sends order.placed to the shop's
// did:peer DID (routed to DIDComm by its scheme, as <send type="didcomm"> would); the DID
// resolves to the mediator, the message is authcrypted (sender protected) and forwarded; the shop
// (organisation B) picks it up, verifies the sender, checks its inbound grant, journals the event
// and only then acknowledges it.
//   npx tsc -p tsconfig.build.json && node examples/federation/two-orgs.mjs
// (with the package installed, import from 'plexus/federation' and 'plexus/runtime' instead)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Federation, grant, InMemoryKeyManager, ResolverRegistry, startMediator } from '../../dist/federation/index.js';
import { memoryJournal, Node } from '../../dist/runtime/index.js';

const dir = mkdtempSync(join(tmpdir(), 'plexus-two-orgs-'));

// The relay nobody has to trust (here in this process; `plexus federation mediator` runs one alone).
const server = await startMediator({ keys: new InMemoryKeyManager(), dataDir: join(dir, 'mediator'), port: 0 });
const mediator = { url: server.url, did: server.did };

// The chart both organisations run: the buyer sends on `checkout`; every event is kept.
const chart = {
  initial: () => ({ events: [] }),
  transition: (s, e) => ({
    state: { events: [...s.events, e.name] },
    sends:
      e.name === 'checkout'
        ? [{ target: e.data.shop, event: 'order.placed', id: 'o-1', data: { sku: 'tea', qty: 42 } }]
        : [],
  }),
};

function sendIdText(id) {
  return id === undefined ? 'None' : `Some(${JSON.stringify(id)})`;
}

// Organisation B: the shop, receiving through the mediator.
const b = { fed: await Federation.create({ resolver: new ResolverRegistry() }) };
b.node = Node.builder(memoryJournal())
  .processor(b.fed.processor())
  .onMacrostep((_iri, entry) => {
    const e = entry.event;
    if (e.originverified) {
      console.log(`shop journaled ${e.name} from ${e.origin} via ${e.origintype} (send id ${sendIdText(e.sendid)})`);
    }
  })
  .build();
const shop = await b.fed.provision(b.node, chart, 'shop', { mediator }, new InMemoryKeyManager());
const mailbox = b.fed.mailbox(shop, mediator);
await mailbox.connect();

// Organisation A: the buyer.
const a = { fed: await Federation.create({ resolver: new ResolverRegistry() }) };
// Sends to DIDs that have no chart on this node go through DIDComm (the relay outbox).
a.node = Node.builder(memoryJournal()).processor(a.fed.processor()).routeScheme('did', 'didcomm').build();
const buyer = await a.fed.provision(a.node, chart, 'buyer', { mediator }, new InMemoryKeyManager());

a.fed.grants.grantOutbound(grant(buyer.did, shop.did, ['order.*']));
b.fed.grants.grantInbound(grant(buyer.did, shop.did, ['order.*']));

await a.node.send(buyer.did, 'checkout', { data: { shop: shop.did } });
while (a.fed.outbox.stats.delivered + a.fed.outbox.stats.failed < 1) await new Promise((r) => setTimeout(r, 5));

await mailbox.drain();
console.log(`mediator still holds ${(await mailbox.client.status()).messageCount} message(s)`);

await a.node.stop();
await b.node.stop();
await server.close();
rmSync(dir, { recursive: true, force: true });
