/**
 * X25519 (RFC 7748) behind one small interface with two implementations that give identical
 * bytes: `noble` (@noble/curves, pure TypeScript, the reference) and `node` (node:crypto,
 * OpenSSL). The scalar multiplication dominates the cost of DIDComm encryption; the `node`
 * backend is several times faster, so it is the default on Node.js; Bun and other runtimes
 * use `noble`. Both refuse a shared secret of all zeros (a low-order peer key). Select with
 * `useX25519Backend` or the environment variable PLEXUS_X25519=noble|node.
 */
import { createPrivateKey, createPublicKey, diffieHellman, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { x25519 } from '@noble/curves/ed25519.js';
import { PlexusError } from '../../core/errors.js';

export interface X25519Backend {
  readonly name: 'noble' | 'node';
  generate(): { secretKey: Uint8Array; publicKey: Uint8Array };
  publicKey(secretKey: Uint8Array): Uint8Array;
  sharedSecret(secretKey: Uint8Array, publicKey: Uint8Array): Uint8Array;
}

function lowOrder(cause?: unknown): PlexusError {
  return new PlexusError('PLX_KEYS_BAD_KEY', 'the peer X25519 key is invalid (low order)', {}, { cause });
}

export const nobleX25519: X25519Backend = {
  name: 'noble',
  generate: () => x25519.keygen(),
  publicKey: (sk) => x25519.getPublicKey(sk),
  sharedSecret: (sk, pk) => {
    try {
      return x25519.getSharedSecret(sk, pk);
    } catch (e) {
      throw lowOrder(e);
    }
  },
};

// DER prefixes of X25519 keys (RFC 8410): PKCS#8 private key and SubjectPublicKeyInfo.
const PKCS8_PREFIX = Buffer.from('302e020100300506032b656e04220420', 'hex');
const SPKI_PREFIX = Buffer.from('302a300506032b656e032100', 'hex');

// OpenSSL key import is far slower than the scalar multiplication, so key objects are cached:
// private keys by the identity of their byte array (the key ring keeps one array per key), public
// keys by value in a bounded map.
const privateObjects = new WeakMap<Uint8Array, KeyObject>();
const publicObjects = new Map<string, KeyObject>();
const MAX_PUBLIC_OBJECTS = 4096;

function privateKeyObject(sk: Uint8Array): KeyObject {
  let k = privateObjects.get(sk);
  if (k === undefined) {
    k = createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, sk]), format: 'der', type: 'pkcs8' });
    privateObjects.set(sk, k);
  }
  return k;
}
function publicKeyObject(pk: Uint8Array): KeyObject {
  const id = Buffer.from(pk.buffer, pk.byteOffset, pk.byteLength).toString('base64');
  let k = publicObjects.get(id);
  if (k === undefined) {
    k = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, pk]), format: 'der', type: 'spki' });
    if (publicObjects.size >= MAX_PUBLIC_OBJECTS) publicObjects.clear();
    publicObjects.set(id, k);
  }
  return k;
}
function rawPublic(k: KeyObject): Uint8Array {
  const der = k.export({ format: 'der', type: 'spki' });
  return new Uint8Array(der.subarray(der.length - 32));
}

export const nodeX25519: X25519Backend = {
  name: 'node',
  generate: () => {
    const { privateKey, publicKey } = generateKeyPairSync('x25519');
    const der = privateKey.export({ format: 'der', type: 'pkcs8' });
    const secretKey = new Uint8Array(der.subarray(der.length - 32));
    privateObjects.set(secretKey, privateKey);
    return { secretKey, publicKey: rawPublic(publicKey) };
  },
  publicKey: (sk) => rawPublic(createPublicKey(privateKeyObject(sk))),
  sharedSecret: (sk, pk) => {
    if (pk.length !== 32) throw lowOrder();
    let out: Buffer;
    try {
      out = diffieHellman({ privateKey: privateKeyObject(sk), publicKey: publicKeyObject(pk) });
    } catch (e) {
      throw lowOrder(e);
    }
    if (out.every((b) => b === 0)) throw lowOrder();
    return new Uint8Array(out);
  },
};

const isNode = typeof process !== 'undefined' && process.versions?.node !== undefined && !('bun' in process.versions);
const chosen = typeof process !== 'undefined' ? process.env.PLEXUS_X25519 : undefined;
let current: X25519Backend = chosen === 'noble' ? nobleX25519 : chosen === 'node' || isNode ? nodeX25519 : nobleX25519;

/** The X25519 implementation in use. */
export function x25519Backend(): X25519Backend {
  return current;
}

/** Selects the X25519 implementation for every key manager and DIDComm operation of this process. */
export function useX25519Backend(name: 'noble' | 'node'): void {
  current = name === 'node' ? nodeX25519 : nobleX25519;
}
