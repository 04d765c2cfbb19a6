// node bench/federation-mediator.mjs [--messages N] [--rounds R] [--concurrency C] [--fsync MODE]
//                                    [--modes http,ws,mailbox-poll,mailbox-live] [--json FILE]
//
// End-to-end messages per second through the plexus mediator (dist/, build first with
// `npx tsc -p tsconfig.build.json`) on loopback: N forwards (1 KiB payload, authcrypt with the
// sender protected, forward-wrapped for the mediator) are packed beforehand, then posted over
// HTTP by C concurrent senders while the recipient takes them out:
//   http: delivery-request batches of 100 over HTTP, each batch acknowledged (messages-received)
//   ws:   live mode over a WebSocket, acknowledged every 10 ms over the same socket;
// and the same forwards, carrying plexus events, received by an actor's relay mailbox on a node
// (the whole receiving side: unpack, sender verification, grant, journal append on a FileLog
// journal, acknowledgement after the append):
//   mailbox-poll: RelayMailbox.start({ mode: 'poll' }), HTTP batches of 50
//   mailbox-live: RelayMailbox.start({ mode: 'live' }), live over a WebSocket.
// A message counts once the mediator has stored it durably (fsync), delivered it and taken its
// acknowledgement. Each round uses a fresh data directory; the report gives the median over the
// rounds. There is no peer: didcomm-node (the only DIDComm implementation among the dev
// dependencies) packs, unpacks and wraps forwards but has no mediator.
//
// `npm run bench` runs it through bench/federation.mjs (`runMediatorBench`), with fewer messages.
import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Why there is no peer row: said in the output. */
export const MEDIATOR_PEER_NOTE =
  'peer: none (didcomm-node 0.4.1 packs, unpacks and wraps forwards, but has no mediator to run)';

/** The pickup modes measured. */
export const MODES = ['http', 'ws', 'mailbox-poll', 'mailbox-live'];

/** How the modes are named in reports. */
export const MEDIATOR_MODE_LABELS = {
  http: 'pickup client, HTTP batch (100)',
  ws: 'pickup client, WebSocket live',
  'mailbox-poll': 'relay mailbox + journal, HTTP batch',
  'mailbox-live': 'relay mailbox + journal, WebSocket live',
};

/** The receiving actor's chart in the mailbox modes: it counts events. */
const CHART = { initial: () => ({ n: 0 }), transition: (s) => ({ state: { n: s.n + 1 } }) };

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * Runs `rounds` rounds of each mode and returns one row per mode:
 * { case, mode, fsync, messages, concurrency, msgsPerSec (median), rounds (each round's rate) }.
 */
export async function runMediatorBench({
  messages = 2000,
  rounds = 3,
  concurrency = 32,
  fsync = 'batch',
  modes = MODES,
} = {}) {
  const fed = await import(resolve(root, 'dist/federation/index.js'));
  const runtime = await import(resolve(root, 'dist/runtime/index.js'));
  const { startMediator, createPeerIdentity, PickupClient } = fed;
  const N = messages;
  const C = concurrency;
  const resolver = new fed.ResolverRegistry({ cacheSize: 64 });
  async function round(mode) {
    const dir = await mkdtemp(join(tmpdir(), 'plexus-bench-mediator-'));
    const server = await startMediator({ keys: new fed.InMemoryKeyManager(), dataDir: dir, fsync });
    try {
      const aliceKeys = new fed.InMemoryKeyManager();
      const alice = await createPeerIdentity(aliceKeys);
      const bobKeys = new fed.InMemoryKeyManager();
      const ref = { url: server.url, did: server.did };
      const onNode = mode.startsWith('mailbox-');
      let bob;
      let client;
      let node;
      let journal;
      let mailbox;
      if (onNode) {
        // The receiving actor on a node, with its journal on disk.
        const bobFed = await fed.Federation.create({ resolver });
        journal = await runtime.openJournal(join(dir, 'journal'), { shardCount: 4 });
        node = runtime.Node.builder(journal).processor(bobFed.processor()).build();
        bob = await bobFed.provision(node, CHART, 'bob', { mediator: ref }, bobKeys);
        bobFed.grants.grantInbound(fed.grant(alice.did, bob.did, ['order.*']));
        mailbox = bobFed.mailbox(bob, ref);
        await mailbox.connect();
        client = mailbox.client;
      } else {
        bob = await createPeerIdentity(bobKeys, [{ uri: server.url, routingKeys: [`${server.did}#key-2`] }]);
        client = new PickupClient({
          mediatorUrl: server.url,
          mediatorDid: server.did,
          did: bob.did,
          resolver,
          keys: bobKeys,
        });
        await client.requestMediation();
        await client.addRecipients([bob.did]);
      }
      const packed = [];
      for (let i = 0; i < N; i++) {
        const msg = onNode
          ? {
              id: `${alice.did}#${i}.0`,
              type: fed.EVENT_MESSAGE_TYPE,
              from: alice.did,
              to: [bob.did],
              body: { name: 'order.placed', data: { pad: 'x'.repeat(1024) }, sendid: `o-${i}` },
            }
          : {
              id: `m-${i}`,
              type: 'https://plexus.example/events/order.placed',
              from: alice.did,
              to: [bob.did],
              body: { pad: 'x'.repeat(1024) },
            };
        packed.push(
          (
            await fed.packEncrypted(
              msg,
              { to: bob.did, from: alice.did, protectSender: true },
              { resolver, keys: aliceKeys },
            )
          ).packed,
        );
      }
      const t0 = performance.now();
      let next = 0;
      let resets = 0;
      const senders = Array.from({ length: C }, async () => {
        while (next < N) {
          const body = packed[next++];
          for (let attempt = 1; ; attempt++) {
            let res;
            try {
              res = await fetch(server.url, {
                method: 'POST',
                headers: { 'content-type': 'application/didcomm-encrypted+json' },
                body,
              });
              await res.arrayBuffer();
            } catch (e) {
              // A kept-alive connection reset under load: post again, as a sender's outbox would
              // (the mediator may then hold the message twice; the extra one is drained below).
              if (attempt >= 5) throw e;
              resets++;
              continue;
            }
            if (res.status === 202) break;
            if (res.status !== 429) throw new Error(`forward refused: ${res.status}`);
            await new Promise((r) => setTimeout(r, 5));
          }
        }
      });
      let done = 0;
      if (onNode) {
        mailbox.start({ mode: mode === 'mailbox-live' ? 'live' : 'poll', intervalMs: 5 });
        const receiver = (async () => {
          while (mailbox.stats.acknowledged < N) await new Promise((r) => setTimeout(r, 2));
        })();
        await Promise.all([...senders, receiver]);
      } else if (mode === 'http') {
        const receiver = (async () => {
          while (done < N) {
            const got = await client.fetch(100);
            if (got.length === 0) {
              await new Promise((r) => setTimeout(r, 2));
              continue;
            }
            await client.acknowledge(got.map((g) => g.id));
            done += got.length;
          }
        })();
        await Promise.all([...senders, receiver]);
      } else {
        let pending = [];
        const session = client.live((m) => {
          pending.push(m.id);
        });
        await session.ready;
        const acker = (async () => {
          while (done < N) {
            if (pending.length === 0) {
              await new Promise((r) => setTimeout(r, 10));
              continue;
            }
            const ids = pending.splice(0, 1000);
            await session.acknowledge(ids);
            done += ids.length;
          }
        })();
        await Promise.all([...senders, acker]);
        await session.close();
        pending = [];
      }
      const secs = (performance.now() - t0) / 1000;
      if (onNode) {
        await mailbox.stop();
        const h = await journal.history(bob.did);
        await node.stop();
        await journal.close();
        if (h.lastSeq !== N) throw new Error(`the journal holds ${h.lastSeq} events, not ${N}`);
      }
      for (let got = await client.fetch(100); resets > 0 && got.length > 0; got = await client.fetch(100)) {
        await client.acknowledge(got.map((g) => g.id));
      }
      if (server.mediator.queue.size !== 0) throw new Error('messages left in the queue');
      return N / secs;
    } finally {
      await server.close();
      await rm(dir, { recursive: true, force: true });
    }
  }

  const rows = [];
  for (const mode of modes) {
    const rates = [];
    for (let r = 0; r < rounds; r++) rates.push(await round(mode));
    rows.push({
      case: 'mediator-end-to-end',
      mode,
      fsync,
      messages: N,
      concurrency: C,
      msgsPerSec: Math.round(median(rates)),
      rounds: rates.map(Math.round).join(' '),
    });
  }
  return rows;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const { values: opts } = parseArgs({
    options: {
      messages: { type: 'string', default: '2000' },
      rounds: { type: 'string', default: '3' },
      concurrency: { type: 'string', default: '32' },
      fsync: { type: 'string', default: 'batch' },
      modes: { type: 'string', default: MODES.join(',') },
      json: { type: 'string' },
    },
  });
  const rows = await runMediatorBench({
    messages: Number(opts.messages),
    rounds: Number(opts.rounds),
    concurrency: Number(opts.concurrency),
    fsync: opts.fsync,
    modes: opts.modes.split(','),
  });
  console.table(rows);
  console.log(MEDIATOR_PEER_NOTE);
  if (opts.json) writeFileSync(opts.json, JSON.stringify(rows, null, 2));
}
