/**
 * Two organisations' nodes and a mediator running as its own process (`plexus federation
 * mediator`): the buyer's didcomm send to the shop's did:peer is resolved to the mediator,
 * authcrypted (sender protected) and forwarded; the mediator stores routing data only; the shop
 * picks it up, verifies the sender, checks the grant and journals the event before acknowledging.
 * The mediator is SIGKILLed after the pickup and before the acknowledgement: after its restart the
 * message is delivered again, deduplicated, and journaled exactly once.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdmissionCode, DIDCOMM_PROCESSOR_TYPE } from '../../ts/federation/admission.js';
import { ResolverRegistry } from '../../ts/federation/did/registry.js';
import { grant } from '../../ts/federation/grants.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { Federation } from '../../ts/federation/provision.js';
import { openJournal } from '../../ts/runtime/log-journal.js';
import { Node } from '../../ts/runtime/node.js';
import type { ActorEvent, Chart } from '../../ts/runtime/types.js';
import { ROOT } from '../helpers/paths.js';
import { until } from '../helpers/until.js';
import { filesUnder, freePort, tempDir, visible } from './mediator-fixtures.js';
import { MediatorProcesses } from './relay-fixtures.js';

let tmp: { dir: string; remove: () => Promise<void> };
const mediators = new MediatorProcesses('two orgs and a relay');
/** Every process this file started: the mediators and the example's run. */
const children = mediators.children;

beforeAll(async () => {
  await mediators.setup();
  tmp = await tempDir('two-orgs');
}, 60_000);
afterAll(async () => {
  await mediators.teardown();
  await tmp?.remove();
});

interface Seen {
  events: ActorEvent[];
}
const SECRET = 'forty-two cups of oolong';
/** Long enough that it cannot turn up by chance in ciphertext or in decoded base64url runs (a 3-character id did). */
const SEND_ID = 'order-send-7f3a9c2e-41d6';
const chart: Chart<Seen> = {
  initial: () => ({ events: [] }),
  transition: (s, e) => {
    const next = { events: [...s.events, e] };
    if (e.name === 'checkout') {
      const to = (e.data as { shop: string }).shop;
      return {
        state: next,
        sends: [{ target: to, event: 'order.placed', id: SEND_ID, data: { item: SECRET } }],
      };
    }
    return { state: next };
  },
};

describe('two organisations through a mediator process', () => {
  it('delivers, journals before acknowledging, and survives a mediator SIGKILL between pickup and acknowledgement', async () => {
    const port = await freePort();
    const args = MediatorProcesses.args(port, tmp.dir);
    let mediator = await mediators.start(args);
    const ref = { url: mediator.url, did: mediator.did };

    // Organisation B: the shop, receiving through the mediator.
    const shopFed = await Federation.create({ resolver: new ResolverRegistry() });
    const shopStore = await openJournal(join(tmp.dir, 'shop-journal'), { shardCount: 4 });
    const shopNode = Node.builder(shopStore).processor(shopFed.processor()).build();
    const shop = await shopFed.provision(shopNode, chart, 'shop', { mediator: ref }, new InMemoryKeyManager());

    // Organisation A: the buyer.
    const buyerFed = await Federation.create({ resolver: new ResolverRegistry(), retry: { initialDelayMs: 20 } });
    const buyerStore = await openJournal(join(tmp.dir, 'buyer-journal'), { shardCount: 4 });
    // An untyped send to a DID without a chart here goes through DIDComm.
    const buyerNode = Node.builder(buyerStore).processor(buyerFed.processor()).routeScheme('did', 'didcomm').build();
    const buyer = await buyerFed.provision(buyerNode, chart, 'buyer', {}, new InMemoryKeyManager());

    buyerFed.grants.grantOutbound(grant(buyer.did, shop.did, ['order.*']));
    shopFed.grants.grantInbound(grant(buyer.did, shop.did, ['order.*']));

    let killed = false;
    const mailbox = shopFed.mailbox(shop, ref, {
      beforeAcknowledge: async () => {
        if (killed) return;
        killed = true;
        // The event is durable here: the mediator dies before it hears messages-received.
        expect((await shopStore.history(shop.did)).lastSeq).toBe(1);
        await mediators.stop(mediator, 'SIGKILL');
      },
    });
    await mailbox.connect();

    await buyerNode.send(buyer.did, 'checkout', { data: { shop: shop.did } });
    await until(() => buyerFed.outbox.stats.delivered >= 1, { what: 'the buyer delivering to the mediator' });

    // The relay sees routing data only.
    const seen = (await filesUnder(join(tmp.dir, 'mediator'))).map(visible).join('\n');
    expect(seen).toContain(shop.did);
    for (const hidden of ['order.placed', SECRET, SEND_ID, buyer.did]) expect(seen).not.toContain(hidden);

    // Pickup, admission, journal; then the mediator is killed before the acknowledgement.
    await expect(mailbox.pump()).rejects.toThrow();
    expect(killed).toBe(true);

    mediator = await mediators.start(args);
    expect(mediator.did).toBe(ref.did);
    const again = await mailbox.pump();
    // The mailbox remembers that this message's turn is durable: it is acknowledged, not admitted again.
    expect(again).toMatchObject({ picked: 1, admitted: 0, refused: 0, redelivered: 1 });
    expect(again.acknowledged).toHaveLength(1);
    expect((await mailbox.client.status()).messageCount).toBe(0);

    const h = await shopStore.history(shop.did);
    expect(h.lastSeq).toBe(1);
    expect(h.records[0]?.event).toMatchObject({
      name: 'order.placed',
      origin: buyer.did,
      originverified: true,
      origintype: DIDCOMM_PROCESSOR_TYPE,
      sendid: SEND_ID,
      data: { item: SECRET },
    });
    expect(await shopFed.inboundLog.refused(shop.did)).toEqual([]);

    // A node whose mailbox restarted (it remembers nothing) gets the next redelivery deduplicated
    // by admission: recorded as a duplicate, acknowledged, and never journaled again.
    await buyerNode.send(buyer.did, 'checkout', { data: { shop: shop.did } });
    await until(() => buyerFed.outbox.stats.delivered >= 2, { what: 'the second checkout reaching the mediator' });
    let killedAgain = false;
    const first = shopFed.mailbox(shop, ref, {
      beforeAcknowledge: async () => {
        killedAgain = true;
        await mediators.stop(mediator, 'SIGKILL');
      },
    });
    await expect(first.pump()).rejects.toThrow();
    expect(killedAgain).toBe(true);
    mediator = await mediators.start(args);
    const restarted = await shopFed.mailbox(shop, ref).pump();
    expect(restarted).toMatchObject({ picked: 1, admitted: 0, refused: 1, redelivered: 0 });
    expect((await shopFed.inboundLog.refused(shop.did)).map((r) => r.code)).toEqual([AdmissionCode.duplicate]);
    expect((await shopStore.history(shop.did)).lastSeq).toBe(2);

    await mediators.stop(mediator, 'SIGTERM');
    await buyerNode.stop();
    await shopNode.stop();
    await buyerStore.close();
    await shopStore.close();
  }, 60_000);
});

// The example is TypeScript importing the package's public entry points ('plexus/federation',
// 'plexus/runtime', resolved through package.json "exports" to dist/), run as the README says:
// `npx bun examples/federation/two-orgs.ts` (here the same bun binary npx finds, so the test
// holds its PID). Skipped without a build of dist/ or without bun installed.
const built = existsSync(join(ROOT, 'dist/federation/index.js')) && existsSync(join(ROOT, 'dist/runtime/index.js'));
const BUN = join(ROOT, 'node_modules/.bin/bun');
const EXAMPLE = 'examples/federation/two-orgs.ts';

async function run(cmd: string, args: string[]): Promise<{ code: unknown; out: string; err: string }> {
  // bun, not node: processes.ts starts node only. The PID is held in `children` and stopped by the suite.
  const child = spawn(cmd, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  const out: string[] = [];
  const err: string[] = [];
  child.stdout?.setEncoding('utf8').on('data', (d: string) => out.push(d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => err.push(d));
  const code = await new Promise((resolve) => child.once('exit', resolve));
  children.delete(child);
  return { code, out: out.join(''), err: err.join('') };
}

describe.skipIf(!built || !existsSync(BUN))(EXAMPLE, () => {
  it('prints what the shop journaled and that the mediator holds nothing', async () => {
    const { code, out, err } = await run(BUN, [EXAMPLE]);
    expect(err).toBe('');
    expect(code).toBe(0);
    expect(out).toMatch(
      /^shop journaled order\.placed from did:peer:2\.Vz6Mk\S+\.Ez6LS\S+\.SeyJ\S+ via https:\/\/w3id\.org\/vertep\/vt-id#DIDCommEventProcessor \(send id Some\("o-1"\)\)\nmediator still holds 0 message\(s\)\n$/,
    );
  }, 30_000);

  it('type-checks against the published declarations (tsconfig.examples.json)', async () => {
    const { code, out } = await run(process.execPath, [
      join(ROOT, 'node_modules/typescript/bin/tsc'),
      '-p',
      'tsconfig.examples.json',
      '--noEmit',
    ]);
    expect(out).toBe('');
    expect(code).toBe(0);
  }, 60_000);
});
