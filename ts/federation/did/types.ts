/**
 * The DID document model plexus reads (W3C DID Core), and the resolver seam. A document is
 * plain JSON; plexus reads only what it needs: verification methods, their relationships and
 * services.
 */

export interface JsonWebKeyOkp {
  kty: 'OKP';
  crv: 'Ed25519' | 'X25519';
  x: string;
  kid?: string;
}

export interface VerificationMethod {
  /** Absolute (`did:...#frag`) or relative (`#frag`) to the document's id. */
  id: string;
  type: string;
  controller: string;
  publicKeyMultibase?: string;
  publicKeyJwk?: JsonWebKeyOkp;
  publicKeyBase58?: string;
}

export interface ServiceEndpointObject {
  uri: string;
  accept?: string[];
  routingKeys?: string[];
  [extra: string]: unknown;
}

export interface Service {
  id: string;
  type: string | string[];
  serviceEndpoint: string | ServiceEndpointObject | (string | ServiceEndpointObject)[];
  /** Legacy did:peer form, where routing keys and accept sit beside a string endpoint. */
  routingKeys?: string[];
  accept?: string[];
  [extra: string]: unknown;
}

export type VerificationRelationship = string | VerificationMethod;

export interface DidDocument {
  '@context'?: string | (string | Record<string, unknown>)[];
  id: string;
  alsoKnownAs?: string[];
  controller?: string | string[];
  verificationMethod?: VerificationMethod[];
  authentication?: VerificationRelationship[];
  assertionMethod?: VerificationRelationship[];
  keyAgreement?: VerificationRelationship[];
  capabilityInvocation?: VerificationRelationship[];
  capabilityDelegation?: VerificationRelationship[];
  service?: Service[];
  [extra: string]: unknown;
}

/** One DID method. Resolution is async because some methods (did:web) fetch. */
export interface DidResolver {
  /** The method name, e.g. `key`, `peer`, `web`. */
  readonly method: string;
  resolve(did: string): Promise<DidDocument>;
}

/** What DIDComm needs from resolution: a document for a DID, or a PlexusError. */
export interface DidDocumentSource {
  resolve(did: string): Promise<DidDocument>;
}
