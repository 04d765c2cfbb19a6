/**
 * Parsing of DIDs and DID URLs (W3C DID Core §3), with a length cap before any work.
 */
import { PlexusError } from '../../core/errors.js';

/** The longest DID URL accepted (did:peer:2 with services can be long; 8 KiB is ample). */
export const MAX_DID_LENGTH = 8192;

const DID_RE = /^did:([a-z0-9]+):([A-Za-z0-9._:%-]+)$/;

export interface ParsedDid {
  did: string;
  method: string;
  id: string;
  /** The fragment without `#`, when a DID URL had one. */
  fragment?: string;
}

export function parseDidUrl(url: string): ParsedDid {
  if (typeof url !== 'string' || url.length === 0 || url.length > MAX_DID_LENGTH) {
    throw new PlexusError('PLX_DID_INVALID', `a DID must be a string of 1..${MAX_DID_LENGTH} characters`, {
      length: typeof url === 'string' ? url.length : undefined,
    });
  }
  const hash = url.indexOf('#');
  const base = hash < 0 ? url : url.slice(0, hash);
  const q = base.search(/[?/]/);
  const did = q < 0 ? base : base.slice(0, q);
  const m = DID_RE.exec(did);
  if (!m) {
    throw new PlexusError('PLX_DID_INVALID', `'${clip(url)}' is not a DID (did:<method>:<method-specific-id>)`, {});
  }
  const out: ParsedDid = { did, method: m[1]!, id: m[2]! };
  if (hash >= 0) out.fragment = url.slice(hash + 1);
  return out;
}

/** The DID of a DID URL (`did:x:y#k` -> `did:x:y`). */
export function didOf(url: string): string {
  return parseDidUrl(url).did;
}

/** An absolute DID URL for a possibly relative id (`#key-1`) in the document of `did`. */
export function absoluteId(did: string, id: string): string {
  return id.startsWith('#') ? `${did}${id}` : id;
}

export function clip(s: string, n = 80): string {
  return s.length > n ? `${s.slice(0, n)}…` : s;
}
