/**
 * JWE content encryption (RFC 7518 §5): A256CBC-HS512 (AES-256-CBC with HMAC-SHA-512 truncated
 * to 256 bits, §5.2.5), A256GCM (§5.3) and XC20P (XChaCha20-Poly1305, draft-amringer-jose-chacha).
 */
import { gcm } from '@noble/ciphers/aes.js';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { PlexusError } from '../../core/errors.js';
import { cbcBackend } from './cbc-backend.js';

export type ContentEncryption = 'A256CBC-HS512' | 'A256GCM' | 'XC20P';
export const CONTENT_ENCRYPTIONS: readonly ContentEncryption[] = ['A256CBC-HS512', 'A256GCM', 'XC20P'];

export const SIZES: Record<ContentEncryption, { cek: number; iv: number; tag: number }> = {
  'A256CBC-HS512': { cek: 64, iv: 16, tag: 32 },
  A256GCM: { cek: 32, iv: 12, tag: 16 },
  XC20P: { cek: 32, iv: 24, tag: 16 },
};

function cbcHmacTag(macKey: Uint8Array, aad: Uint8Array, iv: Uint8Array, ct: Uint8Array): Uint8Array {
  const al = new Uint8Array(8);
  new DataView(al.buffer).setBigUint64(0, BigInt(aad.length) * 8n);
  return cbcBackend().hmacSha512(macKey, [aad, iv, ct, al]).slice(0, 32);
}

export function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}

export function encryptContent(
  enc: ContentEncryption,
  cek: Uint8Array,
  iv: Uint8Array,
  aad: Uint8Array,
  plaintext: Uint8Array,
): { ciphertext: Uint8Array; tag: Uint8Array } {
  if (enc === 'A256CBC-HS512') {
    const ciphertext = cbcBackend().encrypt(cek.subarray(32), iv, plaintext);
    return { ciphertext, tag: cbcHmacTag(cek.subarray(0, 32), aad, iv, ciphertext) };
  }
  const sealed =
    enc === 'A256GCM' ? gcm(cek, iv, aad).encrypt(plaintext) : xchacha20poly1305(cek, iv, aad).encrypt(plaintext);
  return { ciphertext: sealed.subarray(0, sealed.length - 16), tag: sealed.subarray(sealed.length - 16) };
}

function refused(enc: string, cause?: unknown): PlexusError {
  return new PlexusError(
    'PLX_DIDCOMM_DECRYPT_FAILED',
    `the ${enc} content does not decrypt: the message was altered or is not for this key`,
    { enc },
    { cause },
  );
}

export function decryptContent(
  enc: ContentEncryption,
  cek: Uint8Array,
  iv: Uint8Array,
  aad: Uint8Array,
  ciphertext: Uint8Array,
  tag: Uint8Array,
): Uint8Array {
  const s = SIZES[enc];
  if (cek.length !== s.cek || iv.length !== s.iv || tag.length !== s.tag) throw refused(enc);
  try {
    if (enc === 'A256CBC-HS512') {
      if (!constantTimeEqual(cbcHmacTag(cek.subarray(0, 32), aad, iv, ciphertext), tag)) throw refused(enc);
      return cbcBackend().decrypt(cek.subarray(32), iv, ciphertext);
    }
    const sealed = new Uint8Array(ciphertext.length + tag.length);
    sealed.set(ciphertext, 0);
    sealed.set(tag, ciphertext.length);
    return enc === 'A256GCM' ? gcm(cek, iv, aad).decrypt(sealed) : xchacha20poly1305(cek, iv, aad).decrypt(sealed);
  } catch (e) {
    if (e instanceof PlexusError) throw e;
    throw refused(enc, e);
  }
}
