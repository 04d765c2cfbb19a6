/**
 * ResolverRegistry: one resolver per DID method, registered or overridden by the application,
 * in front of a bounded LRU cache with a time to live. An expired entry is resolved again; a
 * caller that found a DID's endpoint failing calls `invalidate(did)` so the next resolution
 * fetches a fresh document. Concurrent resolutions of one DID share a single fetch.
 */
import type { Clock } from '../../core/clock.js';
import { PlexusError } from '../../core/errors.js';
import { DidKeyResolver } from './did-key.js';
import { DidPeerResolver } from './did-peer.js';
import { clip, parseDidUrl } from './did-url.js';
import { type DidWebFetcher, DidWebResolver } from './did-web.js';
import { LruTtlCache } from './lru-ttl.js';
import type { DidDocument, DidDocumentSource, DidResolver } from './types.js';

export interface ResolverRegistryOptions {
  /** Most documents cached (default 1024). */
  cacheSize?: number;
  /** Time to live of a cached document in ms (default 5 minutes). */
  ttlMs?: number;
  /** Time in ms for cache expiry (default the system clock). */
  clock?: Clock;
  /** When given, did:web is registered with this fetcher. */
  webFetcher?: DidWebFetcher;
}

export class ResolverRegistry implements DidDocumentSource {
  private readonly resolvers = new Map<string, DidResolver>();
  private readonly cache: LruTtlCache<DidDocument>;
  private readonly inflight = new Map<string, Promise<DidDocument>>();
  /** Resolutions that went to a method resolver (cache misses), for tests and metrics. */
  misses = 0;

  constructor(opts: ResolverRegistryOptions = {}) {
    this.cache = new LruTtlCache(opts.cacheSize ?? 1024, opts.ttlMs ?? 300_000, opts.clock);
    this.register(new DidKeyResolver());
    this.register(new DidPeerResolver());
    if (opts.webFetcher) this.register(new DidWebResolver(opts.webFetcher));
  }

  /** Registers a resolver for its method, replacing any earlier one (and dropping cached documents of it). */
  register(resolver: DidResolver): this {
    if (!/^[a-z0-9]+$/.test(resolver.method)) {
      throw new PlexusError('PLX_DID_INVALID', `'${resolver.method}' is not a DID method name`, {});
    }
    this.resolvers.set(resolver.method, resolver);
    this.cache.clear();
    return this;
  }

  methods(): string[] {
    return [...this.resolvers.keys()];
  }

  /** Resolves a DID (a DID URL resolves its DID). */
  async resolve(didOrUrl: string): Promise<DidDocument> {
    const { did, method } = parseDidUrl(didOrUrl);
    const cached = this.cache.get(did);
    if (cached !== undefined) return cached;
    const pending = this.inflight.get(did);
    if (pending !== undefined) return pending;
    const resolver = this.resolvers.get(method);
    if (resolver === undefined) {
      throw new PlexusError(
        'PLX_DID_UNSUPPORTED_METHOD',
        `no resolver for did:${method} (${clip(did)}): register one in the ResolverRegistry`,
        { method },
      );
    }
    this.misses++;
    const p = resolver.resolve(did).then(
      (doc) => {
        this.inflight.delete(did);
        if (doc?.id !== did) {
          throw new PlexusError(
            'PLX_DID_BAD_DOCUMENT',
            `the resolver for did:${method} returned another DID's document`,
            {
              did: clip(did),
            },
          );
        }
        this.cache.set(did, doc);
        return doc;
      },
      (e: unknown) => {
        this.inflight.delete(did);
        throw e;
      },
    );
    this.inflight.set(did, p);
    return p;
  }

  /** Drops the cached document of a DID, e.g. after one of its endpoints failed. */
  invalidate(didOrUrl: string): boolean {
    return this.cache.delete(parseDidUrl(didOrUrl).did);
  }
}
