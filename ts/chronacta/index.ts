/**
 * plexus/chronacta: the event store on one node (standalone mode), its gRPC server and
 * typed client. docs/chronacta.md describes the API, the record in the log and the data
 * directory.
 */
export {
  ChronactaClient,
  type ClientOptions,
  type ClientSubscription,
  type MembershipResult,
  type NewMember,
  type ReadConsistency,
  type ReadInfo,
  type SubscribeOptions,
} from './client.js';
export {
  type ClientPortSecurityOptions,
  exposureWarning,
  isLoopback,
  MAX_TOKEN_LENGTH,
  MAX_TOKENS,
  MIN_TOKEN_LENGTH,
} from './client-auth.js';
export { type ClientSecurityFiles, type ClientTls, clientSecurityFromFiles, TOKEN_ENV } from './client-credentials.js';
export { ChronactaCode, type ChronactaCodeName, isWrongExpectedVersion } from './errors.js';
export { type ChronactaServer, type ServerOptions, startServer } from './server.js';
export { DEFAULT_IDEMPOTENCY_TTL_MS, EventStore, type StoreObserver, type StoreOptions } from './store.js';
export type { SubscriptionLimits, SubscriptionStats } from './subscription.js';
export type * from './types.js';
export {
  MAX_BATCH_BYTES,
  MAX_BATCH_EVENTS,
  MAX_EVENT_BYTES,
  MAX_KEY_BYTES,
  MAX_READ_COUNT,
  MAX_STREAM_NAME_BYTES,
  MAX_TYPE_BYTES,
} from './validate.js';
