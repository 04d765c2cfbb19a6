/**
 * The independent implementation used as interop peer: didcomm-node (the Rust didcomm crate
 * compiled to WebAssembly). It reads DID documents and secrets through resolver objects we
 * supply; these adapters present plexus documents to it as JsonWebKey2020 keys.
 */
import { createRequire } from 'node:module';
import { ed25519, x25519 } from '@noble/curves/ed25519.js';
import { b64uEncode } from '../../ts/federation/did/base64url.js';
import { absoluteId } from '../../ts/federation/did/did-url.js';
import { didcommEndpoints, relationshipKeys } from '../../ts/federation/did/doc-keys.js';
import type { KeyType } from '../../ts/federation/did/multibase.js';
import type { DidDocument, DidDocumentSource } from '../../ts/federation/did/types.js';

const require = createRequire(import.meta.url);
// biome-ignore lint/suspicious/noExplicitAny: the wasm-bindgen module has no usable ESM types here
export const didcommNode = require('didcomm-node') as any;

export function toPeerDoc(doc: DidDocument) {
  const vms = new Map<string, unknown>();
  const rel = (r: 'authentication' | 'keyAgreement') =>
    relationshipKeys(doc, r).map((k) => {
      vms.set(k.kid, {
        id: k.kid,
        type: 'JsonWebKey2020',
        controller: doc.id,
        publicKeyJwk: { kty: 'OKP', crv: k.type, x: b64uEncode(k.publicKey) },
      });
      return k.kid;
    });
  const authentication = rel('authentication');
  const keyAgreement = rel('keyAgreement');
  return {
    id: doc.id,
    authentication,
    keyAgreement,
    verificationMethod: [...vms.values()],
    service: didcommEndpoints(doc).map((e) => ({
      id: absoluteId(doc.id, e.serviceId),
      type: 'DIDCommMessaging',
      serviceEndpoint: { uri: e.uri, accept: e.accept, routing_keys: e.routingKeys },
    })),
  };
}

export function peerResolver(source: DidDocumentSource) {
  return {
    resolve: async (did: string) => {
      try {
        return toPeerDoc(await source.resolve(did));
      } catch {
        return null;
      }
    },
  };
}

/** Secrets given to the peer: the test holds the raw keys of the identities the peer plays. */
export class PeerSecrets {
  private readonly secrets = new Map<string, unknown>();
  add(kid: string, type: KeyType, secret: Uint8Array): this {
    const pub = type === 'Ed25519' ? ed25519.getPublicKey(secret) : x25519.getPublicKey(secret);
    this.secrets.set(kid, {
      id: kid,
      type: 'JsonWebKey2020',
      privateKeyJwk: { kty: 'OKP', crv: type, x: b64uEncode(pub), d: b64uEncode(secret) },
    });
    return this;
  }
  async get_secret(id: string) {
    return this.secrets.get(id) ?? null;
  }
  async find_secrets(ids: string[]) {
    return ids.filter((i) => this.secrets.has(i));
  }
}
