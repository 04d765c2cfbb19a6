/**
 * plexus/federation: identities and messages across trust boundaries.
 * - DIDs (`did:key`, `did:peer:2`, `did:web` through a supplied fetcher) and the ResolverRegistry;
 * - the KeyManager seam (InMemoryKeyManager, FileKeyManager): private keys stay behind it;
 * - DIDComm v2 pack and unpack.
 * Refusals are PlexusError with codes PLX_DID_*, PLX_KEYS_*, PLX_DIDCOMM_* (docs/federation.md).
 */

export * from '../codec/inbound-record.js';
export * from './admission.js';
export * from './did/index.js';
export * from './didcomm/index.js';
export * from './grants.js';
export * from './inbound-log.js';
export * from './keys/index.js';
export * from './mediator/index.js';
export * from './pickup/index.js';
export * from './provision.js';
export * from './relay/index.js';
