// node bench/federation.mjs [--time MS] [--rounds N] [--json FILE]
//                           [--mediator-messages N] [--mediator-rounds R] [--skip-mediator]
//
// DIDComm v2 pack and unpack per second for a 1 KiB message, plexus (dist/, build first with
// `npx tsc -p tsconfig.build.json`) next to didcomm-node (the Rust didcomm crate as WebAssembly)
// in the same process run. Cases: anoncrypt (ECDH-ES+A256KW, XC20P and A256CBC-HS512) and
// authcrypt (ECDH-1PU+A256KW, A256CBC-HS512), one X25519 recipient. Both sides get the same DID
// documents from memory (plexus through its ResolverRegistry cache). plexus runs twice: with
// its default X25519 (@noble/curves) and with the node:crypto X25519 backend. Each round runs every task
// with tinybench and takes its median rate; the report gives the median over the rounds and
// the ratio plexus / didcomm-node.
//
// Then the mediator end to end (bench/federation-mediator.mjs): delivered messages per second
// through a plexus mediator on loopback, picked up in HTTP batches and live over a WebSocket, by
// the pickup client alone and by an actor's relay mailbox on a node (admission and journal),
// median of --mediator-rounds rounds of --mediator-messages messages. No target and no peer:
// didcomm-node has no mediator (the output says so). The JSON rows of this part carry
// `kind: 'mediator'`.
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ed25519, x25519 } from '@noble/curves/ed25519.js';
import { Bench } from 'tinybench';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const fed = await import(resolve(root, 'dist/federation/index.js'));
const require = createRequire(import.meta.url);
const { Message } = require('didcomm-node');

const { values: opts } = parseArgs({
  options: {
    time: { type: 'string', default: '500' },
    rounds: { type: 'string', default: '5' },
    json: { type: 'string' },
    'mediator-messages': { type: 'string', default: '300' },
    'mediator-rounds': { type: 'string', default: '3' },
    'skip-mediator': { type: 'boolean', default: false },
  },
});
const TIME = Number(opts.time);
const ROUNDS = Number(opts.rounds);

// ---------- identities, shared by both implementations ----------
const registry = new fed.ResolverRegistry();
const km = new fed.InMemoryKeyManager();
const secrets = new Map();
const b64u = (b) => Buffer.from(b).toString('base64url');
const parties = [fed.createDidKey(), fed.createDidKey()];
for (const p of parties) {
  await km.importKey(p.signingKid, 'Ed25519', p.ed25519Seed);
  await km.importKey(p.agreementKid, 'X25519', p.x25519Secret);
  for (const [kid, crv, d, pub] of [
    [p.signingKid, 'Ed25519', p.ed25519Seed, ed25519.getPublicKey(p.ed25519Seed)],
    [p.agreementKid, 'X25519', p.x25519Secret, x25519.getPublicKey(p.x25519Secret)],
  ]) {
    secrets.set(kid, { id: kid, type: 'JsonWebKey2020', privateKeyJwk: { kty: 'OKP', crv, x: b64u(pub), d: b64u(d) } });
  }
}
const [alice, bob] = parties;
const peerDocs = new Map();
for (const p of parties) {
  const doc = await registry.resolve(p.did);
  const vm = (rel) =>
    fed.relationshipKeys(doc, rel).map((k) => ({
      id: k.kid,
      type: 'JsonWebKey2020',
      controller: doc.id,
      publicKeyJwk: { kty: 'OKP', crv: k.type, x: b64u(k.publicKey) },
    }));
  const auth = vm('authentication');
  const ka = vm('keyAgreement');
  peerDocs.set(p.did, {
    id: doc.id,
    authentication: auth.map((v) => v.id),
    keyAgreement: ka.map((v) => v.id),
    verificationMethod: [...auth, ...ka],
    service: [],
  });
}
const peerResolver = { resolve: async (did) => peerDocs.get(did) ?? null };
const peerSecrets = {
  get_secret: async (id) => secrets.get(id) ?? null,
  find_secrets: async (ids) => ids.filter((i) => secrets.has(i)),
};

const message = {
  id: 'bench-1',
  type: 'https://plexus.example/bench/1.0/msg',
  typ: 'application/didcomm-plain+json',
  from: alice.did,
  to: [bob.did],
  created_time: 1_700_000_000,
  body: { data: 'x'.repeat(1024) },
};
const ctx = { resolver: registry, keys: km };
const peerMsg = new Message(message);

const cases = [
  {
    name: 'anoncrypt XC20P',
    plexus: { to: bob.did, enc: 'XC20P' },
    peer: [null, { enc_alg_anon: 'Xc20pEcdhEsA256kw', forward: false }],
  },
  {
    name: 'anoncrypt A256CBC-HS512',
    plexus: { to: bob.did, enc: 'A256CBC-HS512' },
    peer: [null, { enc_alg_anon: 'A256cbcHs512EcdhEsA256kw', forward: false }],
  },
  { name: 'authcrypt A256CBC-HS512', plexus: { to: bob.did, from: alice.did }, peer: [alice.did, { forward: false }] },
];

const rows = [];
for (const c of cases) {
  const plexusPacked = (await fed.packEncrypted(message, c.plexus, ctx)).packed;
  const [peerPacked] = await peerMsg.pack_encrypted(bob.did, c.peer[0], null, peerResolver, peerSecrets, c.peer[1]);
  // Sanity: each side opens the other's envelope before anything is measured.
  await fed.unpack(peerPacked, ctx);
  const [m] = await Message.unpack(plexusPacked, peerResolver, peerSecrets, {});
  m.free();
  const withBackend = (name, fn) => async () => {
    fed.useX25519Backend(name);
    return fn();
  };
  const tasks = {
    'plexus pack': withBackend('node', () => fed.packEncrypted(message, c.plexus, ctx)),
    'plexus+noble-x25519 pack': withBackend('noble', () => fed.packEncrypted(message, c.plexus, ctx)),
    'didcomm-node pack': async () =>
      peerMsg.pack_encrypted(bob.did, c.peer[0], null, peerResolver, peerSecrets, c.peer[1]),
    'plexus unpack': withBackend('node', () => fed.unpack(plexusPacked, ctx)),
    'plexus+noble-x25519 unpack': withBackend('noble', () => fed.unpack(plexusPacked, ctx)),
    'didcomm-node unpack': async () => {
      const [u] = await Message.unpack(peerPacked, peerResolver, peerSecrets, {});
      u.free();
    },
  };
  const samples = Object.fromEntries(Object.keys(tasks).map((k) => [k, []]));
  for (let r = 0; r < ROUNDS; r++) {
    const bench = new Bench({ time: TIME, warmupTime: 100, warmupIterations: 5, iterations: 10 });
    for (const [k, fn] of Object.entries(tasks)) bench.add(k, fn);
    await bench.run();
    for (const t of bench.tasks) {
      if (t.result?.state !== 'completed')
        throw new Error(`${c.name} ${t.name}: ${t.result?.error?.message ?? t.result?.state}`);
      samples[t.name].push(t.result.throughput.p50);
    }
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  for (const op of ['pack', 'unpack']) {
    const d = med(samples[`didcomm-node ${op}`]);
    for (const impl of ['plexus', 'plexus+noble-x25519']) {
      const p = med(samples[`${impl} ${op}`]);
      rows.push({ case: c.name, op, impl, opsPerSec: p, didcommNode: d, ratio: p / d });
    }
  }
}

console.log(`DIDComm v2, 1 KiB body, one recipient; medians of ${ROUNDS} rounds x ${TIME} ms (ops/s)`);
console.log(
  'plexus = default X25519 on Node.js (node:crypto, OpenSSL); plexus+noble-x25519 = useX25519Backend("noble")',
);
console.log('case                      op     impl                   ops/s  didcomm-node   ratio');
for (const r of rows) {
  console.log(
    `${r.case.padEnd(25)} ${r.op.padEnd(6)} ${r.impl.padEnd(19)} ${r.opsPerSec.toFixed(0).padStart(8)} ${r.didcommNode.toFixed(0).padStart(13)} ${r.ratio.toFixed(2).padStart(7)}x`,
  );
}

if (!opts['skip-mediator']) {
  const { runMediatorBench, MEDIATOR_PEER_NOTE, MEDIATOR_MODE_LABELS } = await import('./federation-mediator.mjs');
  const mrows = await runMediatorBench({
    messages: Number(opts['mediator-messages']),
    rounds: Number(opts['mediator-rounds']),
  });
  console.log(
    `\nmediator end to end: ${mrows[0].messages} forwards of 1 KiB posted by ${mrows[0].concurrency} senders, stored (fsync ${mrows[0].fsync}), delivered and acknowledged; median of ${mrows[0].rounds.split(' ').length} rounds (messages/s)`,
  );
  console.log('pickup                                   msgs/s   rounds');
  for (const r of mrows) {
    const label = MEDIATOR_MODE_LABELS[r.mode] ?? r.mode;
    console.log(`${label.padEnd(38)} ${String(r.msgsPerSec).padStart(8)}   ${r.rounds}`);
    rows.push({ kind: 'mediator', label, ...r });
  }
  console.log(MEDIATOR_PEER_NOTE);
}
if (opts.json) writeFileSync(opts.json, `${JSON.stringify(rows, null, 1)}\n`);
