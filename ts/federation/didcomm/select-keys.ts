/**
 * Choosing keys for packing: the recipient's X25519 key-agreement keys, the sender's key the
 * KeyManager holds, the signer's Ed25519 authentication key.
 */
import { PlexusError } from '../../core/errors.js';
import { clip, parseDidUrl } from '../did/did-url.js';
import { keyFor, type PublicKeyInfo, relationshipKeys } from '../did/doc-keys.js';
import type { DidDocumentSource } from '../did/types.js';
import type { KeyManager } from '../keys/types.js';

/** `to` is a DID (every X25519 keyAgreement key) or a DID URL (that key only). */
export async function recipientKeys(resolver: DidDocumentSource, to: string): Promise<PublicKeyInfo[]> {
  const p = parseDidUrl(to);
  const doc = await resolver.resolve(p.did);
  const keys = p.fragment !== undefined ? [keyFor(doc, to, 'keyAgreement')] : relationshipKeys(doc, 'keyAgreement');
  const x = keys.filter((k) => k.type === 'X25519');
  if (x.length === 0) {
    throw new PlexusError('PLX_DIDCOMM_NO_RECIPIENT', `${clip(to)} has no X25519 keyAgreement key to encrypt to`, {});
  }
  return x;
}

/** The sender's X25519 key-agreement kid held (active) by `keys`. */
export async function senderAgreementKid(resolver: DidDocumentSource, keys: KeyManager, from: string): Promise<string> {
  const p = parseDidUrl(from);
  const doc = await resolver.resolve(p.did);
  for (const k of p.fragment !== undefined
    ? [keyFor(doc, from, 'keyAgreement')]
    : relationshipKeys(doc, 'keyAgreement')) {
    const info = keys.info(k.kid);
    if (k.type === 'X25519' && info?.status === 'active' && info.type === 'X25519') return k.kid;
  }
  throw new PlexusError(
    'PLX_DIDCOMM_NO_SENDER_KEY',
    `no active X25519 keyAgreement key of ${clip(from)} in the key manager`,
    {},
  );
}

/** The signer's Ed25519 authentication kid held (active) by `keys`. */
export async function signerKid(resolver: DidDocumentSource, keys: KeyManager, signBy: string): Promise<string> {
  const p = parseDidUrl(signBy);
  const doc = await resolver.resolve(p.did);
  for (const k of p.fragment !== undefined
    ? [keyFor(doc, signBy, 'authentication')]
    : relationshipKeys(doc, 'authentication')) {
    const info = keys.info(k.kid);
    if (k.type === 'Ed25519' && info?.status === 'active' && info.type === 'Ed25519') return k.kid;
  }
  throw new PlexusError(
    'PLX_DIDCOMM_NO_SENDER_KEY',
    `no active Ed25519 authentication key of ${clip(signBy)} in the key manager`,
    {},
  );
}
