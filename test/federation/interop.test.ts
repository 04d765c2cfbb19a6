/**
 * Interoperability with didcomm-node, both ways, for every algorithm it supports: plexus packs
 * and the peer unpacks, the peer packs and plexus unpacks.
 */

import { x25519 } from '@noble/curves/ed25519.js';
import { describe, expect, it } from 'vitest';
import {
  type ContentEncryption,
  createDidKey,
  createDidPeer2,
  type DidCommMessage,
  encodeMultikey,
  FORWARD_TYPE,
  InMemoryKeyManager,
  packEncrypted,
  packFromPrior,
  packSigned,
  parseForward,
  ResolverRegistry,
  unpack,
} from '../../ts/federation/index.js';
import { didcommNode, PeerSecrets, peerResolver } from './peer-node.js';

const { Message } = didcommNode;

async function world() {
  const registry = new ResolverRegistry();
  const alice = createDidKey();
  const bob = createDidKey();
  const mediator = createDidKey();
  const km = new InMemoryKeyManager(); // plexus side holds every key it plays
  const peer = new PeerSecrets(); // the peer holds the same keys for the identities it plays
  for (const m of [alice, bob, mediator]) {
    await km.importKey(m.signingKid, 'Ed25519', m.ed25519Seed);
    await km.importKey(m.agreementKid, 'X25519', m.x25519Secret);
    peer.add(m.signingKid, 'Ed25519', m.ed25519Seed).add(m.agreementKid, 'X25519', m.x25519Secret);
  }
  // Carol is a did:peer:2 behind the mediator: her service names the mediator's key as routing key.
  const carolX = x25519.utils.randomSecretKey();
  const carolEd = createDidKey();
  const carol = createDidPeer2(
    [
      { purpose: 'V', publicKeyMultibase: carolEd.did.slice(8) },
      { purpose: 'E', publicKeyMultibase: encodeMultikey('X25519', x25519.getPublicKey(carolX)) },
    ],
    [
      {
        type: 'DIDCommMessaging',
        serviceEndpoint: {
          uri: 'https://mediator.example/didcomm',
          accept: ['didcomm/v2'],
          routingKeys: [mediator.agreementKid],
        },
      },
    ],
  );
  await km.importKey(`${carol}#key-2`, 'X25519', carolX);
  peer.add(`${carol}#key-2`, 'X25519', carolX);
  return { registry, alice, bob, mediator, carol, km, peer, resolver: peerResolver(registry) };
}

const msg = (from: string, to: string, extra: Partial<DidCommMessage> = {}): DidCommMessage => ({
  id: `m-${Math.random().toString(36).slice(2)}`,
  type: 'https://example.org/protocols/order/1.0/placed',
  from,
  to: [to],
  created_time: 1_700_000_000,
  body: { item: 'tea', count: 3, note: 'x'.repeat(200) },
  ...extra,
});

describe('plexus -> didcomm-node', () => {
  it('signed (EdDSA)', async () => {
    const w = await world();
    const m = msg(w.alice.did, w.bob.did);
    const { packed } = await packSigned(m, w.alice.did, { resolver: w.registry, keys: w.km });
    const [out, meta] = await Message.unpack(packed, w.resolver, w.peer, {});
    expect(out.as_value()).toMatchObject({ id: m.id, body: m.body, from: m.from });
    expect(meta.non_repudiation).toBe(true);
    expect(meta.sign_from).toBe(w.alice.signingKid);
  });

  for (const enc of ['XC20P', 'A256GCM', 'A256CBC-HS512'] as ContentEncryption[]) {
    it(`anoncrypt ECDH-ES+A256KW / ${enc}`, async () => {
      const w = await world();
      const m = msg(w.alice.did, w.bob.did);
      const { packed } = await packEncrypted(m, { to: w.bob.did, enc }, { resolver: w.registry, keys: w.km });
      const [out, meta] = await Message.unpack(packed, w.resolver, w.peer, {});
      expect(out.as_value().body).toEqual(m.body);
      expect(meta.anonymous_sender).toBe(true);
      expect(meta.encrypted_to_kids).toEqual([w.bob.agreementKid]);
    });
  }

  it('authcrypt ECDH-1PU+A256KW / A256CBC-HS512, signed inside, sender protected', async () => {
    const w = await world();
    const m = msg(w.alice.did, w.bob.did);
    const r = await packEncrypted(
      m,
      { to: w.bob.did, from: w.alice.did, signBy: w.alice.did, protectSender: true },
      { resolver: w.registry, keys: w.km },
    );
    const [out, meta] = await Message.unpack(r.packed, w.resolver, w.peer, {});
    expect(out.as_value().body).toEqual(m.body);
    // The sender is hidden from relays by the outer anoncrypt: both sides call that an anonymous sender.
    expect(meta).toMatchObject({ encrypted: true, authenticated: true, non_repudiation: true, anonymous_sender: true });
    expect(meta.encrypted_from_kid).toBe(w.alice.agreementKid);
  });

  it('authcrypt plain, and from_prior is verified by the peer', async () => {
    const w = await world();
    const fromPrior = await packFromPrior(
      { iss: w.bob.did, sub: w.alice.did, iat: 1_700_000_000 },
      w.bob.signingKid,
      w.km,
    );
    const m = msg(w.alice.did, w.bob.did, { from_prior: fromPrior });
    const r = await packEncrypted(m, { to: w.bob.did, from: w.alice.did }, { resolver: w.registry, keys: w.km });
    const [out, meta] = await Message.unpack(r.packed, w.resolver, w.peer, {});
    expect(out.as_value().body).toEqual(m.body);
    expect(meta.from_prior).toMatchObject({ iss: w.bob.did, sub: w.alice.did });
    expect(meta.from_prior_issuer_kid).toBe(w.bob.signingKid);
  });

  it('forward through a mediator: the peer unwraps the forward, then the inner message', async () => {
    const w = await world();
    const m = msg(w.alice.did, w.carol);
    const r = await packEncrypted(m, { to: w.carol, from: w.alice.did }, { resolver: w.registry, keys: w.km });
    expect(r.service?.uri).toBe('https://mediator.example/didcomm');
    const [fwd] = await Message.unpack(r.packed, w.resolver, w.peer, {});
    const f = fwd.as_value();
    expect(f.type).toBe(FORWARD_TYPE);
    expect(f.body.next).toBe(w.carol);
    const inner = JSON.stringify(f.attachments[0].data.json);
    const [out, meta] = await Message.unpack(inner, w.resolver, w.peer, {});
    expect(out.as_value().body).toEqual(m.body);
    expect(meta.authenticated).toBe(true);
  });
});

describe('didcomm-node -> plexus', () => {
  const peerMsg = (m: DidCommMessage) => new Message(m);

  it('signed (EdDSA)', async () => {
    const w = await world();
    const m = msg(w.alice.did, w.bob.did);
    const [packed] = await peerMsg(m).pack_signed(w.alice.did, w.resolver, w.peer);
    const { message, metadata } = await unpack(packed, { resolver: w.registry, keys: w.km });
    expect(message).toMatchObject({ id: m.id, body: m.body });
    expect(metadata).toMatchObject({ nonRepudiation: true, signFrom: w.alice.signingKid });
  });

  const anonAlgs: [string, string][] = [
    ['Xc20pEcdhEsA256kw', 'XC20P'],
    ['A256gcmEcdhEsA256kw', 'A256GCM'],
    ['A256cbcHs512EcdhEsA256kw', 'A256CBC-HS512'],
  ];
  for (const [alg, enc] of anonAlgs) {
    it(`anoncrypt ${alg}`, async () => {
      const w = await world();
      const m = msg(w.alice.did, w.bob.did);
      const [packed] = await peerMsg(m).pack_encrypted(w.bob.did, null, null, w.resolver, w.peer, {
        enc_alg_anon: alg,
        forward: false,
      });
      const { message, metadata } = await unpack(packed, { resolver: w.registry, keys: w.km });
      expect(message.body).toEqual(m.body);
      expect(metadata).toMatchObject({
        anonymousSender: true,
        encAlgAnon: `ECDH-ES+A256KW/${enc}`,
        recipientKid: w.bob.agreementKid,
      });
    });
  }

  it('authcrypt A256cbcHs512Ecdh1puA256kw, signed, sender protected', async () => {
    const w = await world();
    const m = msg(w.alice.did, w.bob.did);
    const [packed] = await peerMsg(m).pack_encrypted(w.bob.did, w.alice.did, w.alice.did, w.resolver, w.peer, {
      protect_sender: true,
      forward: false,
    });
    const { message, metadata } = await unpack(packed, { resolver: w.registry, keys: w.km });
    expect(message.body).toEqual(m.body);
    expect(metadata).toMatchObject({
      encrypted: true,
      authenticated: true,
      nonRepudiation: true,
      anonymousSender: true,
      encryptedFromKid: w.alice.agreementKid,
      signFrom: w.alice.signingKid,
    });
  });

  it('forward: the peer wraps for the mediator; plexus unwraps as mediator, then as recipient', async () => {
    // didcomm-node 0.4.1 leaves messaging_service empty in pack_encrypted for these documents,
    // so the test wraps with its explicit Message.wrap_in_forward (same routing-key order).
    const w = await world();
    const m = msg(w.alice.did, w.carol);
    const [inner] = await peerMsg(m).pack_encrypted(w.carol, w.alice.did, null, w.resolver, w.peer, { forward: false });
    const packed = await Message.wrap_in_forward(
      inner,
      {},
      w.carol,
      [w.mediator.agreementKid],
      'Xc20pEcdhEsA256kw',
      w.resolver,
    );
    const outer = await unpack(packed, { resolver: w.registry, keys: w.km });
    expect(outer.metadata.recipientKid).toBe(w.mediator.agreementKid);
    const { next, forwarded } = parseForward(outer.message);
    expect(next).toBe(w.carol);
    const { message, metadata } = await unpack(JSON.stringify(forwarded), { resolver: w.registry, keys: w.km });
    expect(message.body).toEqual(m.body);
    expect(metadata.encryptedFromKid).toBe(w.alice.agreementKid);
    expect(metadata.recipientKid).toBe(`${w.carol}#key-2`);
  });
});
