/**
 * Multibase (base58btc, prefix `z`) and the multicodec prefixes of the keys plexus uses.
 * Multicodec table: ed25519-pub = 0xed, x25519-pub = 0xec, sha2-256 = 0x12 (each an unsigned
 * varint, so 0xed becomes the two bytes 0xed 0x01).
 */
import { PlexusError } from '../../core/errors.js';
import { base58Decode, base58Encode } from './base58.js';

export type KeyType = 'Ed25519' | 'X25519';

const ED25519_PUB = Uint8Array.of(0xed, 0x01);
const X25519_PUB = Uint8Array.of(0xec, 0x01);

export function multibaseEncode(bytes: Uint8Array): string {
  return `z${base58Encode(bytes)}`;
}

export function multibaseDecode(text: string, what = 'multibase value'): Uint8Array {
  if (typeof text !== 'string' || text[0] !== 'z') {
    throw new PlexusError('PLX_DID_BAD_ENCODING', `${what} must be base58btc multibase (start with 'z')`, {});
  }
  return base58Decode(text.slice(1), what);
}

/** `z` + base58btc(multicodec ‖ key): the publicKeyMultibase of a Multikey. */
export function encodeMultikey(type: KeyType, publicKey: Uint8Array): string {
  if (publicKey.length !== 32) {
    throw new PlexusError('PLX_DID_BAD_KEY', `an ${type} public key has 32 bytes, not ${publicKey.length}`, {});
  }
  const prefix = type === 'Ed25519' ? ED25519_PUB : X25519_PUB;
  const out = new Uint8Array(34);
  out.set(prefix, 0);
  out.set(publicKey, 2);
  return multibaseEncode(out);
}

export function decodeMultikey(text: string, what = 'publicKeyMultibase'): { type: KeyType; publicKey: Uint8Array } {
  const raw = multibaseDecode(text, what);
  if (raw.length === 34 && raw[1] === 0x01 && (raw[0] === 0xed || raw[0] === 0xec)) {
    return { type: raw[0] === 0xed ? 'Ed25519' : 'X25519', publicKey: raw.slice(2) };
  }
  throw new PlexusError(
    'PLX_DID_BAD_KEY',
    `${what} is not an Ed25519 (0xed01) or X25519 (0xec01) multicodec key of 32 bytes`,
    { length: raw.length },
  );
}
