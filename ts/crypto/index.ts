/**
 * plexus/crypto: the cryptography of SPERLI, composed from audited libraries.
 *
 * - `CompositeSig`: ML-DSA-44 + Ed25519 + SHA-512 composite signatures (IETF LAMPS draft).
 * - The job CA and the Ed25519 rank certificates for mutually authenticated TLS 1.3, and the
 *   checks of a peer certificate's common name and subjectAltName.
 *
 * Refusals are PlexusError with a stable `code` (docs/crypto.md).
 */
export {
  type CompositeContext,
  type CompositeKeyPair,
  CompositeSig,
  SPERLI_COMMIT_CONTEXT,
  SPERLI_JOIN_CONTEXT,
} from './composite.js';
export {
  type CertificateInput,
  type CreateJobCaOptions,
  certificateHasHost,
  certificateIdentity,
  createJobCa,
  type IssueRankOptions,
  isDottedIPv4,
  issueRankCertificate,
  type JobCa,
  type JobId,
  jobIdHex,
  MAX_COMMON_NAME_LENGTH,
  MAX_RANKS,
  normalizeHost,
  parseRankCommonName,
  type RankCredentials,
  type RankIdentity,
  rankCommonName,
  serverIdentityCheck,
  type ValidityOptions,
} from './x509.js';
