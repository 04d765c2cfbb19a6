/** Chronacta cluster mode: the replicated log (docs/chronacta-ha.md). */
export { checkMember, type HaConfig, type HaMember, parseHaConfig } from './config.js';
export { HaErrorCode } from './errors.js';
export {
  checkMemberCertificate,
  createMemberCa,
  issueMemberCertificate,
  issueMemberFiles,
  loadMemberTls,
  MEMBER_URI_PREFIX,
  memberOfCertificate,
  memberTlsPaths,
} from './member-tls.js';
export {
  type AppliedBatch,
  type FollowerStatus,
  ReplicatedLog,
  type ReplicatedLogOptions,
  type ReplicatedLogStatus,
} from './replicated-log.js';
export { decodeDescriptor, encodeDescriptor, type SnapshotDescriptor } from './snapshot.js';
