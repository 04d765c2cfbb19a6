/**
 * did:key (W3C CCG did:key method) for Ed25519 and X25519 keys. An Ed25519 did:key also has
 * an X25519 key-agreement key derived from it (Edwards to Montgomery, RFC 7748 birational
 * map), listed under `keyAgreement` with its own multibase as fragment. Resolution is offline.
 */
import { ed25519, x25519 } from '@noble/curves/ed25519.js';
import { sha512 } from '@noble/hashes/sha2.js';
import { PlexusError } from '../../core/errors.js';
import { parseDidUrl } from './did-url.js';
import { decodeMultikey, encodeMultikey, type KeyType } from './multibase.js';
import type { DidDocument, DidResolver, VerificationMethod } from './types.js';

export const DID_CONTEXT = ['https://www.w3.org/ns/did/v1', 'https://w3id.org/security/multikey/v1'];

export function didKeyFromPublicKey(type: KeyType, publicKey: Uint8Array): string {
  return `did:key:${encodeMultikey(type, publicKey)}`;
}

/** The X25519 public key of an Ed25519 public key. */
export function ed25519PublicToX25519(publicKey: Uint8Array): Uint8Array {
  return ed25519.utils.toMontgomery(publicKey);
}

/** The X25519 private key of an Ed25519 seed: clamp(SHA-512(seed)[0:32]) (RFC 8032 §5.1.5, RFC 7748 §5). */
export function ed25519SeedToX25519(seed: Uint8Array): Uint8Array {
  const h = sha512(seed).slice(0, 32);
  h[0]! &= 248;
  h[31]! &= 127;
  h[31]! |= 64;
  return h;
}

export interface DidKeyMaterial {
  did: string;
  /** The Ed25519 signing key's DID URL. */
  signingKid: string;
  /** The X25519 key-agreement key's DID URL. */
  agreementKid: string;
  ed25519Seed: Uint8Array;
  x25519Secret: Uint8Array;
}

/** Creates a did:key from an Ed25519 seed (random when omitted). Secrets go to a KeyManager. */
export function createDidKey(seed?: Uint8Array): DidKeyMaterial {
  const ed25519Seed = seed ?? ed25519.utils.randomSecretKey();
  const pub = ed25519.getPublicKey(ed25519Seed);
  const did = didKeyFromPublicKey('Ed25519', pub);
  const x25519Secret = ed25519SeedToX25519(ed25519Seed);
  const xMb = encodeMultikey('X25519', x25519.getPublicKey(x25519Secret));
  return { did, signingKid: `${did}#${did.slice(8)}`, agreementKid: `${did}#${xMb}`, ed25519Seed, x25519Secret };
}

export function resolveDidKey(did: string): DidDocument {
  const p = parseDidUrl(did);
  if (p.method !== 'key' || p.did !== did) {
    throw new PlexusError('PLX_DID_INVALID', `'${did.slice(0, 80)}' is not a did:key DID`, {});
  }
  const mb = p.id;
  const { type, publicKey } = decodeMultikey(mb, 'did:key identifier');
  const vm = (m: string): VerificationMethod => ({
    id: `${did}#${m}`,
    type: 'Multikey',
    controller: did,
    publicKeyMultibase: m,
  });
  if (type === 'X25519') {
    return { '@context': DID_CONTEXT, id: did, verificationMethod: [vm(mb)], keyAgreement: [`${did}#${mb}`] };
  }
  let xPub: Uint8Array;
  try {
    xPub = ed25519PublicToX25519(publicKey);
  } catch (e) {
    throw new PlexusError(
      'PLX_DID_BAD_KEY',
      `'${did.slice(0, 80)}' does not hold a valid Ed25519 public key`,
      {},
      { cause: e },
    );
  }
  const xMb = encodeMultikey('X25519', xPub);
  const sig = `${did}#${mb}`;
  return {
    '@context': DID_CONTEXT,
    id: did,
    verificationMethod: [vm(mb), vm(xMb)],
    authentication: [sig],
    assertionMethod: [sig],
    capabilityInvocation: [sig],
    capabilityDelegation: [sig],
    keyAgreement: [`${did}#${xMb}`],
  };
}

export class DidKeyResolver implements DidResolver {
  readonly method = 'key';
  async resolve(did: string): Promise<DidDocument> {
    return resolveDidKey(did);
  }
}
