/** The replicated log: a LogStorage replicated over Raft (docs/replication.md). */
export { checkAddress, checkMember, type HaMember } from './config.js';
export {
  type ReplicationCode,
  type ReplicationErrorAliases,
  ReplicationErrorCode,
  replicationError,
  translateError,
} from './errors.js';
export {
  checkMemberCertificate,
  issueMemberCertificate,
  type MemberIdentity,
  type MemberTlsFiles,
  memberIdentity,
  memberOfCertificate,
  memberTlsOptions,
  memberUri,
  type PemPair,
} from './member-tls.js';
export {
  type ReplicaDeps,
  type ReplicaDriver,
  type ReplicaRaft,
  type ReplicaRaftStorage,
  type ReplicaTransport,
  realReplicaDeps,
  tcpRaft,
} from './raft-edge.js';
export {
  type AppliedBatch,
  type FollowerStatus,
  openReplicatedLog,
  ReplicatedLog,
  type ReplicatedLogOptions,
  type ReplicatedLogStatus,
} from './replicated-log.js';
export { decodeDescriptor, encodeDescriptor, type SnapshotDescriptor } from './snapshot.js';
