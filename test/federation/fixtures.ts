import { readFileSync } from 'node:fs';
import { PlexusError } from '../../ts/core/errors.js';
import { b64uDecode } from '../../ts/federation/did/base64url.js';
import type { DidDocument, DidResolver } from '../../ts/federation/did/types.js';
import type { KeyManager } from '../../ts/federation/keys/types.js';
import { externalVectors } from '../helpers/paths.js';

export interface VectorJwk {
  kid: string;
  kty: 'OKP';
  crv: 'Ed25519' | 'X25519';
  x: string;
  d: string;
}

export const didcommVectors = () =>
  JSON.parse(readFileSync(externalVectors('didcomm-v2.json'), 'utf8')) as {
    keys: VectorJwk[];
    expected_plaintext: Record<string, unknown>;
    vectors: {
      name: string;
      kind: 'signed' | 'anoncrypt' | 'authcrypt';
      enc?: string;
      signer_kid?: string;
      sender_kid?: string;
      recipient_kids?: string[];
      message: Record<string, unknown>;
    }[];
  };

// biome-ignore lint/suspicious/noExplicitAny: the vector file is plain JSON
export const didMethodVectors = () => JSON.parse(readFileSync(externalVectors('did-methods.json'), 'utf8')) as any;

/** A resolver for a fixed set of documents, registered as one DID method. */
export class StaticResolver implements DidResolver {
  constructor(
    readonly method: string,
    private readonly docs: Map<string, DidDocument>,
  ) {}
  async resolve(did: string): Promise<DidDocument> {
    const d = this.docs.get(did);
    if (!d) throw new PlexusError('PLX_DID_NOT_FOUND', `no document for ${did}`, {});
    return structuredClone(d);
  }
}

/** did:example documents built from the spec's keys: Ed25519 keys authenticate, X25519 keys agree. */
export function exampleDocs(keys: VectorJwk[]): Map<string, DidDocument> {
  const docs = new Map<string, DidDocument>();
  for (const k of keys) {
    const did = k.kid.slice(0, k.kid.indexOf('#'));
    const doc = docs.get(did) ?? { id: did, verificationMethod: [], authentication: [], keyAgreement: [] };
    doc.verificationMethod!.push({
      id: k.kid,
      type: 'JsonWebKey2020',
      controller: did,
      publicKeyJwk: { kty: 'OKP', crv: k.crv, x: k.x },
    });
    (k.crv === 'Ed25519' ? doc.authentication! : doc.keyAgreement!).push(k.kid);
    docs.set(did, doc);
  }
  return docs;
}

export async function importJwk(km: KeyManager, k: VectorJwk): Promise<void> {
  await km.importKey(k.kid, k.crv, b64uDecode(k.d, 'd'));
}

/** The shared refusal assertion (test/helpers/refusal.ts) under the name these tests use. */
export { expectRefusal as expectCode } from '../helpers/refusal.js';
