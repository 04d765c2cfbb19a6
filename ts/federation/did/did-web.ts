/**
 * did:web (W3C CCG did:web method): the DID names an HTTPS URL, fetched through a fetcher the
 * application supplies (plexus opens no connection itself). Mapping: `did:web:example.com` ->
 * `https://example.com/.well-known/did.json`; `did:web:example.com:u:alice` ->
 * `https://example.com/u/alice/did.json`; a port is percent-encoded (`example.com%3A8443`).
 */
import { PlexusError } from '../../core/errors.js';
import { clip, parseDidUrl } from './did-url.js';
import type { DidDocument, DidResolver } from './types.js';

/** Fetches a URL and returns the response body as text; throws when the fetch fails. */
export type DidWebFetcher = (url: string) => Promise<string>;

/** The largest did.json accepted. */
export const MAX_DID_WEB_DOCUMENT = 256 * 1024;

export function didWebUrl(did: string): string {
  const p = parseDidUrl(did);
  if (p.method !== 'web' || p.did !== did) {
    throw new PlexusError('PLX_DID_INVALID', `'${clip(did)}' is not a did:web DID`, {});
  }
  const segments = p.id.split(':').map((s) => decodeURIComponent(s));
  const host = segments[0]!;
  if (!/^[A-Za-z0-9.-]+(:[0-9]{1,5})?$/.test(host) || segments.some((s) => s.length === 0 || s.includes('/'))) {
    throw new PlexusError('PLX_DID_INVALID', `'${clip(did)}' has a bad host or path for did:web`, {});
  }
  const path = segments.slice(1);
  return path.length === 0 ? `https://${host}/.well-known/did.json` : `https://${host}/${path.join('/')}/did.json`;
}

export class DidWebResolver implements DidResolver {
  readonly method = 'web';
  constructor(private readonly fetcher: DidWebFetcher) {}

  async resolve(did: string): Promise<DidDocument> {
    const url = didWebUrl(did);
    let body: string;
    try {
      body = await this.fetcher(url);
    } catch (e) {
      throw new PlexusError(
        'PLX_DID_NOT_FOUND',
        `fetching ${url} for ${clip(did)} failed: retry later`,
        { url },
        {
          cause: e,
        },
      );
    }
    if (typeof body !== 'string' || body.length > MAX_DID_WEB_DOCUMENT) {
      throw new PlexusError('PLX_DID_BAD_DOCUMENT', `${url} is not a text of at most ${MAX_DID_WEB_DOCUMENT} bytes`, {
        url,
      });
    }
    let doc: unknown;
    try {
      doc = JSON.parse(body);
    } catch {
      throw new PlexusError('PLX_DID_BAD_DOCUMENT', `${url} is not JSON`, { url });
    }
    if (doc === null || typeof doc !== 'object' || (doc as DidDocument).id !== did) {
      throw new PlexusError('PLX_DID_BAD_DOCUMENT', `${url} does not hold the document of ${clip(did)} (id differs)`, {
        url,
      });
    }
    return doc as DidDocument;
  }
}
