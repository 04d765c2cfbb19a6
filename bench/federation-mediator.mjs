// node bench/federation-mediator.mjs [--messages N] [--rounds R] [--concurrency C] [--fsync MODE] [--json FILE]
//
// End-to-end messages per second through the plexus mediator (dist/, build first with
// `npx tsc -p tsconfig.build.json`) on loopback: N forwards (1 KiB payload, authcrypt with the
// sender protected, forward-wrapped for the mediator) are packed beforehand, then posted over
// HTTP by C concurrent senders while the recipient takes them out:
//   http: delivery-request batches of 100 over HTTP, each batch acknowledged (messages-received)
//   ws:   live mode over a WebSocket, acknowledged every 10 ms over the same socket.
// A message counts once the mediator has stored it durably (fsync), delivered it and taken its
// acknowledgement. Each round uses a fresh data directory; the report gives the median over the
// rounds.
import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const fed = await import(resolve(root, 'dist/federation/index.js'));
const { startMediator, createPeerIdentity } = await import(resolve(root, 'dist/federation/mediator/index.js'));
const { PickupClient } = await import(resolve(root, 'dist/federation/pickup/index.js'));

const { values: opts } = parseArgs({
  options: {
    messages: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '32' },
    fsync: { type: 'string', default: 'batch' },
    json: { type: 'string' },
  },
});
const N = Number(opts.messages);
const ROUNDS = Number(opts.rounds);
const C = Number(opts.concurrency);
const resolver = new fed.ResolverRegistry({ cacheSize: 64 });

async function round(mode) {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-bench-mediator-'));
  const server = await startMediator({ keys: new fed.InMemoryKeyManager(), dataDir: dir, fsync: opts.fsync });
  try {
    const aliceKeys = new fed.InMemoryKeyManager();
    const alice = await createPeerIdentity(aliceKeys);
    const bobKeys = new fed.InMemoryKeyManager();
    const bob = await createPeerIdentity(bobKeys, [{ uri: server.url, routingKeys: [`${server.did}#key-2`] }]);
    const client = new PickupClient({
      mediatorUrl: server.url,
      mediatorDid: server.did,
      did: bob.did,
      resolver,
      keys: bobKeys,
    });
    await client.requestMediation();
    await client.addRecipients([bob.did]);
    const packed = [];
    for (let i = 0; i < N; i++) {
      const msg = {
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
    const senders = Array.from({ length: C }, async () => {
      while (next < N) {
        const body = packed[next++];
        for (;;) {
          const res = await fetch(server.url, {
            method: 'POST',
            headers: { 'content-type': 'application/didcomm-encrypted+json' },
            body,
          });
          await res.arrayBuffer();
          if (res.status === 202) break;
          if (res.status !== 429) throw new Error(`forward refused: ${res.status}`);
          await new Promise((r) => setTimeout(r, 5));
        }
      }
    });
    let done = 0;
    if (mode === 'http') {
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
    if (server.mediator.queue.size !== 0) throw new Error('messages left in the queue');
    return N / secs;
  } finally {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rows = [];
for (const mode of ['http', 'ws']) {
  const rates = [];
  for (let r = 0; r < ROUNDS; r++) rates.push(await round(mode));
  rows.push({
    case: 'mediator-end-to-end',
    mode,
    fsync: opts.fsync,
    messages: N,
    concurrency: C,
    msgsPerSec: Math.round(median(rates)),
    rounds: rates.map(Math.round).join(' '),
  });
}
console.table(rows);
if (opts.json) writeFileSync(opts.json, JSON.stringify(rows, null, 2));
