/** DIDs: methods did:key, did:peer:2 and did:web, the resolver registry and key lookup in documents. */

export { base58Decode, base58Encode } from './base58.js';
export { b64uDecode, b64uEncode } from './base64url.js';
export {
  createDidKey,
  DID_CONTEXT,
  type DidKeyMaterial,
  DidKeyResolver,
  didKeyFromPublicKey,
  ed25519PublicToX25519,
  ed25519SeedToX25519,
  resolveDidKey,
} from './did-key.js';
export {
  createDidPeer2,
  DidPeerResolver,
  didPeer3,
  type PeerKey,
  type PeerPurpose,
  resolveDidPeer2,
} from './did-peer.js';
export { absoluteId, didOf, MAX_DID_LENGTH, type ParsedDid, parseDidUrl } from './did-url.js';
export { type DidWebFetcher, DidWebResolver, didWebUrl } from './did-web.js';
export {
  type DidCommEndpoint,
  didcommEndpoints,
  findMethod,
  keyFor,
  type PublicKeyInfo,
  relationshipKeys,
} from './doc-keys.js';
export { LruTtlCache } from './lru-ttl.js';
export { decodeMultikey, encodeMultikey, type KeyType, multibaseDecode, multibaseEncode } from './multibase.js';
export { ResolverRegistry, type ResolverRegistryOptions } from './registry.js';
export type {
  DidDocument,
  DidDocumentSource,
  DidResolver,
  JsonWebKeyOkp,
  Service,
  ServiceEndpointObject,
  VerificationMethod,
} from './types.js';
