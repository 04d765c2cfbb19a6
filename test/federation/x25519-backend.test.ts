import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createDidKey,
  InMemoryKeyManager,
  nobleX25519,
  nodeX25519,
  packEncrypted,
  ResolverRegistry,
  unpack,
  useX25519Backend,
  x25519Backend,
} from '../../ts/federation/index.js';
import { didcommVectors, exampleDocs, expectCode, importJwk, StaticResolver } from './fixtures.js';
import { didcommNode, PeerSecrets, peerResolver } from './peer-node.js';

const initial = x25519Backend().name;
afterEach(() => useX25519Backend(initial));

describe('X25519 backends: noble (reference) and node:crypto give identical bytes', () => {
  it('public keys and shared secrets agree on random keys', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        (a, b) => {
          const pb = nobleX25519.publicKey(b);
          expect(nodeX25519.publicKey(a)).toEqual(nobleX25519.publicKey(a));
          expect(nodeX25519.sharedSecret(a, pb)).toEqual(nobleX25519.sharedSecret(a, pb));
        },
      ),
      { numRuns: 50 },
    );
    for (const be of [nobleX25519, nodeX25519]) {
      const k = be.generate();
      expect(nobleX25519.publicKey(k.secretKey)).toEqual(k.publicKey);
    }
  });

  it('both refuse a low-order peer key', async () => {
    const sk = nobleX25519.generate().secretKey;
    for (const be of [nobleX25519, nodeX25519]) {
      await expectCode(() => be.sharedSecret(sk, new Uint8Array(32)), 'PLX_KEYS_BAD_KEY');
    }
  });

  it('on Node.js the node backend is the default', () => {
    expect(initial).toBe(process.env.PLEXUS_X25519 === 'noble' ? 'noble' : 'node');
  });

  it('with the other backend the specification vectors still decrypt, and didcomm-node opens what plexus packs', async () => {
    const other = initial === 'node' ? 'noble' : 'node';
    useX25519Backend(other);
    expect(x25519Backend().name).toBe(other);
    const V = didcommVectors();
    const reg = new ResolverRegistry().register(new StaticResolver('example', exampleDocs(V.keys)));
    for (const v of V.vectors.filter((x) => x.kind !== 'signed')) {
      const km = new InMemoryKeyManager();
      await importJwk(km, V.keys.find((k) => k.kid === v.recipient_kids![2])!);
      expect((await unpack(JSON.stringify(v.message), { resolver: reg, keys: km })).message).toEqual(
        V.expected_plaintext,
      );
    }
    const registry = new ResolverRegistry();
    const [a, b] = [createDidKey(), createDidKey()];
    const km = new InMemoryKeyManager();
    const peer = new PeerSecrets();
    for (const m of [a, b]) {
      await km.importKey(m.agreementKid, 'X25519', m.x25519Secret);
      peer.add(m.agreementKid, 'X25519', m.x25519Secret);
    }
    const msg = { id: '1', type: 't', from: a.did, to: [b.did], body: { k: 'v' } };
    const r = await packEncrypted(msg, { to: b.did, from: a.did }, { resolver: registry, keys: km });
    const [out] = await didcommNode.Message.unpack(r.packed, peerResolver(registry), peer, {});
    expect(out.as_value().body).toEqual({ k: 'v' });
  });
});
