/**
 * Reading keys out of a DID document: a verification method by DID URL, its raw public key
 * (Multikey, OKP JWK, or the legacy base58 types), and the keys of one relationship.
 */
import { PlexusError } from '../../core/errors.js';
import { base58Decode } from './base58.js';
import { b64uDecode } from './base64url.js';
import { absoluteId, clip } from './did-url.js';
import { decodeMultikey, type KeyType } from './multibase.js';
import type { DidDocument, Service, ServiceEndpointObject, VerificationMethod } from './types.js';

export interface PublicKeyInfo {
  /** Absolute DID URL of the key. */
  kid: string;
  type: KeyType;
  publicKey: Uint8Array;
}

type Relationship =
  | 'authentication'
  | 'assertionMethod'
  | 'keyAgreement'
  | 'capabilityInvocation'
  | 'capabilityDelegation';

function methodKey(vm: VerificationMethod, kid: string): PublicKeyInfo {
  if (typeof vm.publicKeyMultibase === 'string') {
    const { type, publicKey } = decodeMultikey(vm.publicKeyMultibase);
    return { kid, type, publicKey };
  }
  const jwk = vm.publicKeyJwk;
  if (jwk && typeof jwk === 'object') {
    if (jwk.kty !== 'OKP' || (jwk.crv !== 'Ed25519' && jwk.crv !== 'X25519')) {
      throw new PlexusError('PLX_DID_BAD_KEY', `key ${clip(kid)} is not an OKP Ed25519 or X25519 JWK`, {});
    }
    const publicKey = b64uDecode(jwk.x, 'publicKeyJwk.x', 'PLX_DID_BAD_KEY');
    if (publicKey.length !== 32) throw new PlexusError('PLX_DID_BAD_KEY', `key ${clip(kid)} is not 32 bytes`, {});
    return { kid, type: jwk.crv, publicKey };
  }
  if (typeof vm.publicKeyBase58 === 'string') {
    const type: KeyType | undefined =
      vm.type === 'Ed25519VerificationKey2018' || vm.type === 'Ed25519VerificationKey2020'
        ? 'Ed25519'
        : vm.type === 'X25519KeyAgreementKey2019' || vm.type === 'X25519KeyAgreementKey2020'
          ? 'X25519'
          : undefined;
    const publicKey = base58Decode(vm.publicKeyBase58, 'publicKeyBase58');
    if (type === undefined || publicKey.length !== 32) {
      throw new PlexusError('PLX_DID_BAD_KEY', `key ${clip(kid)} has an unsupported type ${vm.type}`, {});
    }
    return { kid, type, publicKey };
  }
  throw new PlexusError('PLX_DID_BAD_KEY', `key ${clip(kid)} has no public key plexus can read`, {});
}

/** The verification method `kid` (absolute DID URL) of `doc`, or undefined. */
export function findMethod(doc: DidDocument, kid: string): VerificationMethod | undefined {
  for (const vm of doc.verificationMethod ?? []) if (absoluteId(doc.id, vm.id) === kid) return vm;
  for (const rel of [
    'authentication',
    'assertionMethod',
    'keyAgreement',
    'capabilityInvocation',
    'capabilityDelegation',
  ] as const) {
    for (const r of doc[rel] ?? []) if (typeof r === 'object' && absoluteId(doc.id, r.id) === kid) return r;
  }
  return undefined;
}

/** The keys listed under one relationship, with absolute kids, in document order. */
export function relationshipKeys(doc: DidDocument, rel: Relationship): PublicKeyInfo[] {
  const out: PublicKeyInfo[] = [];
  for (const r of doc[rel] ?? []) {
    const kid = absoluteId(doc.id, typeof r === 'string' ? r : r.id);
    const vm = typeof r === 'string' ? findMethod(doc, kid) : r;
    if (vm === undefined) continue;
    out.push(methodKey(vm, kid));
  }
  return out;
}

/** The key `kid`, required to be listed under `rel` of its document. */
export function keyFor(doc: DidDocument, kid: string, rel: Relationship): PublicKeyInfo {
  for (const k of relationshipKeys(doc, rel)) if (k.kid === kid) return k;
  throw new PlexusError('PLX_DID_KEY_NOT_FOUND', `${clip(kid)} is not a ${rel} key of ${clip(doc.id)}`, {
    relationship: rel,
  });
}

export interface DidCommEndpoint {
  serviceId: string;
  uri: string;
  routingKeys: string[];
  accept: string[];
}

/** The DIDCommMessaging services of a document, in document order (both current and legacy forms). */
export function didcommEndpoints(doc: DidDocument): DidCommEndpoint[] {
  const out: DidCommEndpoint[] = [];
  for (const s of (doc.service ?? []) as Service[]) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    if (!types.includes('DIDCommMessaging')) continue;
    const eps = Array.isArray(s.serviceEndpoint) ? s.serviceEndpoint : [s.serviceEndpoint];
    for (const ep of eps) {
      if (typeof ep === 'string') {
        out.push({
          serviceId: absoluteId(doc.id, s.id),
          uri: ep,
          routingKeys: s.routingKeys ?? [],
          accept: s.accept ?? [],
        });
      } else if (ep && typeof ep === 'object' && typeof (ep as ServiceEndpointObject).uri === 'string') {
        const o = ep as ServiceEndpointObject;
        out.push({
          serviceId: absoluteId(doc.id, s.id),
          uri: o.uri,
          routingKeys: o.routingKeys ?? [],
          accept: o.accept ?? [],
        });
      }
    }
  }
  return out;
}
