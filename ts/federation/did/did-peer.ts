/**
 * did:peer numalgo 2 (Peer DID Method Specification, method 2): keys and services inline in
 * the DID. Each element is `.` + purpose code + value; keys are multibase Multikeys, services
 * base64url of compact JSON with abbreviated names. The JSON key order is kept, so a DID is
 * reproduced byte for byte. Also computes the did:peer:3 short form.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { PlexusError } from '../../core/errors.js';
import { base58Encode } from './base58.js';
import { b64uDecodeText, b64uEncodeText } from './base64url.js';
import { DID_CONTEXT } from './did-key.js';
import { MAX_DID_LENGTH } from './did-url.js';
import { decodeMultikey } from './multibase.js';
import type { DidDocument, DidResolver, Service, VerificationMethod } from './types.js';

/** Purpose codes of numalgo 2 and the relationship each one populates. */
const PURPOSES = {
  A: 'assertionMethod',
  E: 'keyAgreement',
  V: 'authentication',
  I: 'capabilityInvocation',
  D: 'capabilityDelegation',
} as const;
export type PeerPurpose = keyof typeof PURPOSES;

const ABBREVIATE: Record<string, string> = {
  type: 't',
  serviceEndpoint: 's',
  routingKeys: 'r',
  accept: 'a',
  DIDCommMessaging: 'dm',
};
const EXPAND: Record<string, string> = Object.fromEntries(Object.entries(ABBREVIATE).map(([k, v]) => [v, k]));

/** The most elements (keys plus services) one did:peer:2 may hold. */
export const MAX_PEER_ELEMENTS = 64;

export interface PeerKey {
  purpose: PeerPurpose;
  publicKeyMultibase: string;
}

function abbreviate(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(abbreviate);
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      out[ABBREVIATE[k] ?? k] = k === 'type' && typeof x === 'string' ? (ABBREVIATE[x] ?? x) : abbreviate(x);
    }
    return out;
  }
  return v;
}

function expand(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(expand);
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      const key = EXPAND[k] ?? k;
      out[key] = key === 'type' && typeof x === 'string' ? (EXPAND[x] ?? x) : expand(x);
    }
    return out;
  }
  return v;
}

/** Creates a did:peer:2 from keys (in order) and services (given unabbreviated, without ids). */
export function createDidPeer2(keys: PeerKey[], services: Record<string, unknown>[] = []): string {
  if (keys.length + services.length > MAX_PEER_ELEMENTS) {
    throw new PlexusError('PLX_DID_INVALID', `a did:peer:2 holds at most ${MAX_PEER_ELEMENTS} keys and services`, {});
  }
  let did = 'did:peer:2';
  for (const k of keys) {
    if (!(k.purpose in PURPOSES)) {
      throw new PlexusError(
        'PLX_DID_INVALID',
        `unknown did:peer:2 key purpose '${k.purpose}' (use A, E, V, I or D)`,
        {},
      );
    }
    decodeMultikey(k.publicKeyMultibase);
    did += `.${k.purpose}${k.publicKeyMultibase}`;
  }
  for (const s of services) did += `.S${b64uEncodeText(JSON.stringify(abbreviate(s)))}`;
  return did;
}

/** `did:peer:3z` + base58btc(sha2-256 multihash of the did:peer:2 DID without `did:peer:2`). */
export function didPeer3(did: string): string {
  const digest = sha256(new TextEncoder().encode(did.slice('did:peer:2'.length)));
  const mh = new Uint8Array(34);
  mh[0] = 0x12;
  mh[1] = 0x20;
  mh.set(digest, 2);
  return `did:peer:3z${base58Encode(mh)}`;
}

export function resolveDidPeer2(did: string): DidDocument {
  if (typeof did !== 'string' || !did.startsWith('did:peer:2.') || did.length > MAX_DID_LENGTH) {
    throw new PlexusError('PLX_DID_INVALID', 'not a did:peer:2 DID (did:peer:2.<elements>)', {});
  }
  const parts = did.slice('did:peer:2.'.length).split('.');
  if (parts.length > MAX_PEER_ELEMENTS) {
    throw new PlexusError('PLX_DID_INVALID', `a did:peer:2 holds at most ${MAX_PEER_ELEMENTS} elements`, {});
  }
  const doc: DidDocument = { '@context': [...DID_CONTEXT], id: did };
  const vms: VerificationMethod[] = [];
  const services: Service[] = [];
  for (const part of parts) {
    const code = part[0];
    const value = part.slice(1);
    if (code === 'S') {
      let parsed: unknown;
      try {
        parsed = JSON.parse(b64uDecodeText(value, 'did:peer:2 service', 'PLX_DID_INVALID'));
      } catch (e) {
        if (e instanceof PlexusError) throw e;
        throw new PlexusError('PLX_DID_INVALID', 'a did:peer:2 service is not JSON', {});
      }
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
        throw new PlexusError('PLX_DID_INVALID', 'a did:peer:2 service must be a JSON object', {});
      }
      const svc = expand(parsed) as Service;
      if (typeof svc.type !== 'string' || svc.serviceEndpoint === undefined) {
        throw new PlexusError('PLX_DID_INVALID', 'a did:peer:2 service needs a type and a serviceEndpoint', {});
      }
      if (svc.id === undefined) svc.id = services.length === 0 ? '#service' : `#service-${services.length}`;
      services.push(svc);
    } else if (code !== undefined && code in PURPOSES) {
      decodeMultikey(value, 'did:peer:2 key');
      const id = `#key-${vms.length + 1}`;
      vms.push({ id, controller: did, type: 'Multikey', publicKeyMultibase: value });
      const rel = PURPOSES[code as PeerPurpose];
      const list = (doc[rel] ??= []) as string[];
      list.push(id);
    } else {
      throw new PlexusError('PLX_DID_INVALID', `unknown did:peer:2 element purpose '${code ?? ''}'`, {});
    }
  }
  doc.verificationMethod = vms;
  if (services.length > 0) doc.service = services;
  doc.alsoKnownAs = [didPeer3(did)];
  return doc;
}

export class DidPeerResolver implements DidResolver {
  readonly method = 'peer';
  async resolve(did: string): Promise<DidDocument> {
    if (did.startsWith('did:peer:2')) return resolveDidPeer2(did);
    throw new PlexusError('PLX_DID_UNSUPPORTED_METHOD', 'only did:peer numalgo 2 is supported', {
      did: did.slice(0, 80),
    });
  }
}
