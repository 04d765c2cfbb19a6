/**
 * A256CBC-HS512's two primitives (AES-256-CBC with PKCS#7 padding, and HMAC-SHA-512) behind one
 * small interface with two implementations that give identical bytes: `noble` (@noble/ciphers
 * and @noble/hashes, pure TypeScript, the reference) and `node` (node:crypto, OpenSSL). Authcrypt
 * always uses A256CBC-HS512, so its content encryption dominates a mediator's and a receiver's
 * cost once X25519 runs on OpenSSL; the `node` backend is the default on Node.js, Bun and other
 * runtimes use `noble`. Select with `useCbcBackend` or the environment variable
 * PLEXUS_CBC=noble|node. Only the primitives move: the composition (RFC 7518 §5.2.2) stays in
 * content.ts.
 */
import { createCipheriv, createDecipheriv, createHmac } from 'node:crypto';
import { cbc } from '@noble/ciphers/aes.js';
import { hmac } from '@noble/hashes/hmac.js';
import { sha512 } from '@noble/hashes/sha2.js';
import { PlexusError } from '../../core/errors.js';

export interface CbcBackend {
  readonly name: 'noble' | 'node';
  /** AES-256-CBC with PKCS#7 padding. */
  encrypt(key: Uint8Array, iv: Uint8Array, plaintext: Uint8Array): Uint8Array;
  /** Throws on a ciphertext that is not whole blocks or whose padding is wrong. */
  decrypt(key: Uint8Array, iv: Uint8Array, ciphertext: Uint8Array): Uint8Array;
  /** HMAC-SHA-512 over the parts, in order. */
  hmacSha512(key: Uint8Array, parts: readonly Uint8Array[]): Uint8Array;
}

export const nobleCbc: CbcBackend = {
  name: 'noble',
  encrypt: (key, iv, pt) => cbc(key, iv).encrypt(pt),
  decrypt: (key, iv, ct) => cbc(key, iv).decrypt(ct),
  hmacSha512: (key, parts) => {
    const h = hmac.create(sha512, key);
    for (const p of parts) h.update(p);
    return h.digest();
  },
};

function u8(b: Buffer): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

export const nodeCbc: CbcBackend = {
  name: 'node',
  encrypt: (key, iv, pt) => {
    const c = createCipheriv('aes-256-cbc', key, iv);
    return u8(Buffer.concat([c.update(pt), c.final()]));
  },
  decrypt: (key, iv, ct) => {
    if (ct.length === 0 || ct.length % 16 !== 0)
      throw new PlexusError(
        'PLX_DIDCOMM_DECRYPT_FAILED',
        'the A256CBC-HS512 content does not decrypt: the message was altered or is not for this key',
        { enc: 'A256CBC-HS512', reason: 'AES-CBC ciphertext is not whole blocks' },
      );
    const d = createDecipheriv('aes-256-cbc', key, iv);
    return u8(Buffer.concat([d.update(ct), d.final()]));
  },
  hmacSha512: (key, parts) => {
    const h = createHmac('sha512', key);
    for (const p of parts) h.update(p);
    return u8(h.digest());
  },
};

const isNode = typeof process !== 'undefined' && process.versions?.node !== undefined && !('bun' in process.versions);
const chosen = typeof process !== 'undefined' ? process.env.PLEXUS_CBC : undefined;
let current: CbcBackend = chosen === 'noble' ? nobleCbc : chosen === 'node' || isNode ? nodeCbc : nobleCbc;

/** The A256CBC-HS512 primitives in use. */
export function cbcBackend(): CbcBackend {
  return current;
}

/** Selects the A256CBC-HS512 primitives for every DIDComm operation of this process. */
export function useCbcBackend(name: 'noble' | 'node'): void {
  current = name === 'node' ? nodeCbc : nobleCbc;
}
