import { describe, expect, it } from 'vitest';
import {
  createDidKey,
  type DidDocument,
  type DidResolver,
  DidWebResolver,
  didWebUrl,
  LruTtlCache,
  ResolverRegistry,
} from '../../ts/federation/index.js';
import { expectCode } from './fixtures.js';

class CountingResolver implements DidResolver {
  readonly method = 'test';
  calls = 0;
  version = 1;
  async resolve(did: string): Promise<DidDocument> {
    this.calls++;
    return { id: did, alsoKnownAs: [`v${this.version}`] };
  }
}

describe('did:web URL mapping (did:web method spec)', () => {
  it.each([
    ['did:web:w3c-ccg.github.io', 'https://w3c-ccg.github.io/.well-known/did.json'],
    ['did:web:w3c-ccg.github.io:user:alice', 'https://w3c-ccg.github.io/user/alice/did.json'],
    ['did:web:example.com%3A3000', 'https://example.com:3000/.well-known/did.json'],
    ['did:web:example.com%3A3000:user:alice', 'https://example.com:3000/user/alice/did.json'],
  ])('%s -> %s', (did, url) => expect(didWebUrl(did)).toBe(url));

  it('refuses bad hosts and path segments', async () => {
    await expectCode(() => didWebUrl('did:web:exa/mple.com'), 'PLX_DID_INVALID');
    await expectCode(() => didWebUrl('did:web:example.com::x'), 'PLX_DID_INVALID');
    await expectCode(() => didWebUrl('did:key:z6Mk'), 'PLX_DID_INVALID');
  });

  it('resolves through the supplied fetcher and checks the document id', async () => {
    const seen: string[] = [];
    const docs: Record<string, string> = {
      'https://example.com/.well-known/did.json': JSON.stringify({ id: 'did:web:example.com' }),
      'https://example.com/u/bob/did.json': JSON.stringify({ id: 'did:web:elsewhere.com' }),
    };
    const r = new DidWebResolver(async (url) => {
      seen.push(url);
      const d = docs[url];
      if (d === undefined) throw new Error('404');
      return d;
    });
    expect((await r.resolve('did:web:example.com')).id).toBe('did:web:example.com');
    await expectCode(r.resolve('did:web:example.com:u:bob'), 'PLX_DID_BAD_DOCUMENT');
    await expectCode(r.resolve('did:web:example.com:u:nobody'), 'PLX_DID_NOT_FOUND');
    expect(seen).toHaveLength(3);
    const big = new DidWebResolver(async () => 'x'.repeat(300_000));
    await expectCode(big.resolve('did:web:example.com'), 'PLX_DID_BAD_DOCUMENT');
  });
});

describe('ResolverRegistry', () => {
  it('caches within the TTL, resolves again after it, and after invalidate(did)', async () => {
    let now = 0;
    const t = new CountingResolver();
    const reg = new ResolverRegistry({ ttlMs: 1000, clock: { now: () => now } }).register(t);
    await reg.resolve('did:test:a');
    await reg.resolve('did:test:a#key-1');
    expect(t.calls).toBe(1);
    now = 1000;
    await reg.resolve('did:test:a');
    expect(t.calls).toBe(2);
    t.version = 2;
    expect((await reg.resolve('did:test:a')).alsoKnownAs).toEqual(['v1']);
    expect(reg.invalidate('did:test:a')).toBe(true);
    expect((await reg.resolve('did:test:a')).alsoKnownAs).toEqual(['v2']);
    expect(t.calls).toBe(3);
  });

  it('is bounded: the least recently used document goes first', async () => {
    const t = new CountingResolver();
    const reg = new ResolverRegistry({ cacheSize: 2 }).register(t);
    await reg.resolve('did:test:a');
    await reg.resolve('did:test:b');
    await reg.resolve('did:test:a');
    await reg.resolve('did:test:c'); // evicts b
    await reg.resolve('did:test:a');
    expect(t.calls).toBe(3);
    await reg.resolve('did:test:b');
    expect(t.calls).toBe(4);
  });

  it('shares one resolution between concurrent callers', async () => {
    const t = new CountingResolver();
    const reg = new ResolverRegistry().register(t);
    await Promise.all([reg.resolve('did:test:x'), reg.resolve('did:test:x'), reg.resolve('did:test:x')]);
    expect(t.calls).toBe(1);
  });

  it('lets an application override a built-in method, and refuses unknown methods and bad DIDs', async () => {
    const reg = new ResolverRegistry();
    const { did } = createDidKey();
    expect((await reg.resolve(did)).keyAgreement).toHaveLength(1);
    reg.register({ method: 'key', resolve: async (d) => ({ id: d, keyAgreement: [] }) });
    expect((await reg.resolve(did)).keyAgreement).toEqual([]);
    await expectCode(reg.resolve('did:nope:1'), 'PLX_DID_UNSUPPORTED_METHOD');
    await expectCode(reg.resolve('not-a-did'), 'PLX_DID_INVALID');
    await expectCode(reg.resolve(`did:key:${'z'.repeat(9000)}`), 'PLX_DID_INVALID');
    reg.register({ method: 'liar', resolve: async () => ({ id: 'did:liar:other' }) });
    await expectCode(reg.resolve('did:liar:me'), 'PLX_DID_BAD_DOCUMENT');
  });

  it('web is registered when a fetcher is supplied', async () => {
    const reg = new ResolverRegistry({ webFetcher: async () => JSON.stringify({ id: 'did:web:a.example' }) });
    expect(reg.methods()).toContain('web');
    expect((await reg.resolve('did:web:a.example')).id).toBe('did:web:a.example');
  });

  it('LruTtlCache refuses nonsense sizes', () => {
    expect(() => new LruTtlCache(0, 1)).toThrow(RangeError);
    expect(() => new LruTtlCache(1, 0)).toThrow(RangeError);
  });
});
