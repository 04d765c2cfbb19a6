import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { x25519 } from '@noble/curves/ed25519.js';
import { describe, expect, it } from 'vitest';
import {
  createDidKey,
  createDidPeer2,
  DidKeyResolver,
  DidPeerResolver,
  DidWebResolver,
  encodeMultikey,
  InMemoryKeyManager,
  packEncrypted,
  ResolverRegistry,
  unpack,
} from '../../ts/federation/index.js';
import { resolverSuite } from '../compliance/resolver.suite.js';

const peerDid = () =>
  createDidPeer2([
    { purpose: 'E', publicKeyMultibase: encodeMultikey('X25519', x25519.getPublicKey(x25519.utils.randomSecretKey())) },
  ]);

/** A real HTTP server on loopback serving did.json files; the fetcher maps https:// to it. */
async function webServer(
  docs: Map<string, unknown>,
): Promise<{ server: Server; fetcher: (url: string) => Promise<string> }> {
  const server = createServer((req, res) => {
    const doc = docs.get(req.url ?? '');
    res.statusCode = doc ? 200 : 404;
    res.end(doc ? JSON.stringify(doc) : 'not found');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const fetcher = async (url: string) => {
    const u = new URL(url);
    const res = await fetch(`http://127.0.0.1:${port}${u.pathname}`);
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    return res.text();
  };
  return { server, fetcher };
}

resolverSuite('did:key', {
  setup: async () => ({
    resolver: new DidKeyResolver(),
    valid: [createDidKey().did, `did:key:${encodeMultikey('X25519', new Uint8Array(32).fill(9))}`],
    invalid: ['did:key:abc', 'did:peer:2.Ez6LS', 'did:key:z6Mk', 'nonsense'],
  }),
  teardown: async () => {},
});

resolverSuite('did:peer:2', {
  setup: async () => ({
    resolver: new DidPeerResolver(),
    valid: [peerDid(), createDidPeer2([], [{ type: 'DIDCommMessaging', serviceEndpoint: 'https://x.example' }])],
    invalid: ['did:peer:0z6Mk', 'did:peer:2.Qz6Mk', 'did:peer:2.S!!', 'did:peer:2.SeyJ9'],
  }),
  teardown: async () => {},
});

resolverSuite('did:web over loopback HTTP', {
  setup: async () => {
    const docs = new Map<string, unknown>([
      [
        '/.well-known/did.json',
        {
          id: 'did:web:example.com',
          verificationMethod: [{ id: '#k', type: 'Multikey', controller: 'did:web:example.com' }],
        },
      ],
      ['/u/alice/did.json', { id: 'did:web:example.com:u:alice' }],
      ['/u/mallory/did.json', { id: 'did:web:example.com:u:alice' }],
    ]);
    const s = await webServer(docs);
    return {
      server: s.server,
      resolver: new DidWebResolver(s.fetcher),
      valid: ['did:web:example.com', 'did:web:example.com:u:alice'],
      invalid: ['did:web:example.com:u:mallory', 'did:web:example.com:u:nobody', 'did:web:bad/host'],
    };
  },
  teardown: (h) => new Promise<void>((r) => h.server.close(() => r())),
});

resolverSuite('ResolverRegistry', {
  setup: async () => ({
    resolver: Object.assign(new ResolverRegistry(), { method: '*' }),
    valid: [createDidKey().did, peerDid()],
    invalid: ['did:unknown:x', 'did:key:zz', ''],
  }),
  teardown: async () => {},
});

describe('DIDComm to a did:web served over loopback HTTP', () => {
  it('packs to the keys of the fetched document and re-fetches after invalidate()', async () => {
    const bob = createDidKey();
    const did = 'did:web:bob.example';
    let hits = 0;
    const doc = {
      id: did,
      verificationMethod: [
        {
          id: `${did}#ka`,
          type: 'JsonWebKey2020',
          controller: did,
          publicKeyJwk: {
            kty: 'OKP',
            crv: 'X25519',
            x: Buffer.from(x25519.getPublicKey(bob.x25519Secret)).toString('base64url'),
          },
        },
      ],
      keyAgreement: [`${did}#ka`],
    };
    const s = await webServer(new Map([['/.well-known/did.json', doc]]));
    try {
      const registry = new ResolverRegistry({
        webFetcher: async (url) => {
          hits++;
          return s.fetcher(url);
        },
      });
      const km = new InMemoryKeyManager();
      await km.importKey(`${did}#ka`, 'X25519', bob.x25519Secret);
      const r = await packEncrypted(
        { id: '1', type: 't', to: [did], body: {} },
        { to: did },
        { resolver: registry, keys: km },
      );
      expect(r.toKids).toEqual([`${did}#ka`]);
      expect((await unpack(r.packed, { resolver: registry, keys: km })).metadata.recipientKid).toBe(`${did}#ka`);
      expect(hits).toBe(1);
      registry.invalidate(did);
      await registry.resolve(did);
      expect(hits).toBe(2);
    } finally {
      await new Promise<void>((r) => s.server.close(() => r()));
    }
  });
});
