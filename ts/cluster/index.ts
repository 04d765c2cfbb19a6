/**
 * plexus cluster core: ClusterMeta, the Membership seam with static membership and its
 * MemoryAuthority, leases with fencing epochs, the failure detector, ClusterStorage, the
 * receive-side epoch gate and dead-letter log; and the glue that joins a runtime Node to the
 * cluster (placement, the `cluster` processor, the journal, ClusterNode). docs/cluster.md
 * describes them.
 */

export { HASH_VERSION, META_FILE } from '../codec/cluster-meta.js';
export { type AuthorityOptions, type AuthorityReady, MemoryAuthority, rankedOwner } from './authority.js';
export { BUILTIN_CHARTS, counterChart, relayChart } from './charts.js';
export {
  ActorClient,
  type ActorClientOptions,
  CLIENT_TAG,
  type ClientReply,
  type ClientRequest,
  decodeClientRequest,
  encodeClientRequest,
  isClientDeadline,
  MAX_CLIENT_REQUEST,
  serveClients,
} from './client.js';
export { type ClientCertFiles, writeClientCertificate } from './client-cert.js';
export { decodeReply, decodeRequest, encodeReply, encodeRequest, serveAuthority } from './codec.js';
export {
  type ClusterConfig,
  clusterConfig,
  DEFAULT_CLUSTER_CONFIG,
  DEFAULT_DETECTOR_CONFIG,
  DEFAULT_LEASE_CONFIG,
  type DetectorConfig,
  detectorConfig,
  type LeaseConfig,
  leaseConfig,
} from './config.js';
export { runClusterDemo } from './demo.js';
export { FailureDetector, type Health, type HealthChange } from './detector.js';
export { type DrainHooks, drainAndLeave } from './drain.js';
export { ClusterCode, clusterError } from './errors.js';
export { DEAD_LETTER_LOG, type DeadLetter, DeadLetters, EpochGate, listDeadLetters } from './fencing.js';
export { checkHistory, type HistoryReport, readShard, type ShardHistory } from './history.js';
export { AuthorityHost, type AuthorityHostOptions } from './host.js';
export { type InitOptions, initCluster } from './init.js';
export { ClusterJournal, type ClusterJournalOptions } from './journal.js';
export type { AuthorityCall, AuthorityReply, AuthorityRequest, LeaseAuthority } from './lease-authority.js';
export {
  type LeaveOptions,
  type LeaveStep,
  leaveCluster,
  perNodeHandOver,
  type ShardHandOver,
  sharedStoreHandOver,
} from './leave.js';
export { BoundedMailbox } from './mailbox.js';
export {
  type ClusterMeta,
  checkJoinMeta,
  clusterMeta,
  metaDifference,
  readClusterMeta,
  shardOfIri,
  writeClusterMeta,
} from './meta.js';
export {
  assembleClusterNode,
  ClusterNode,
  type ClusterNodeConfig,
  type ClusterNodeParts,
  launchClusterNode,
  readNodeConfig,
  startClaiming,
} from './node.js';
export { nodeStatus, runNodeProcess } from './node-main.js';
export { isLoopbackHost, NodeMetrics, startNodeMetrics } from './node-metrics.js';
export { ClusterPlacement, REPLY_PREFIX, type Redirect } from './placement.js';
export { ClusterProcessor, type ClusterStats, NOTICE_TARGET } from './processor.js';
export { fencedReceiver } from './receive.js';
export {
  SHIP_DEFAULT_CHUNK,
  SHIP_DEFAULT_WINDOW,
  type ShipReceived,
  ShipReceiver,
  type ShipReceiverOptions,
  ShipSender,
  type ShipSenderOptions,
  type ShipSent,
  type ShipSource,
} from './shipping.js';
export {
  canStart,
  type StaticConfig,
  StaticMembership,
  type StaticMembershipOptions,
  unexpired,
} from './static.js';
export { ClusterStorage, type ClusterStorageOptions } from './storage.js';
export { RemoteLog, STORE_TAG, StoreHost } from './store-host.js';
export * from './types.js';
export {
  type AnyChart,
  type ChartChoice,
  type ChartModule,
  type ChartTable,
  chartsForNode,
  checkChartModule,
  loadChartModule,
  nodeCharts,
} from './user-charts.js';
