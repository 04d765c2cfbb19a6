/** The Raft core: a pure state machine driven through RaftNode (docs/raft.md). */

export {
  decodeRaftMessage,
  encodeRaftMessage,
  RAFT_HEADER_BYTES,
  type RaftDecoded,
  RaftMessageStream,
} from '../codec/raft-wire.js';
export { type ConfChange, type ConfChangeType, decodeConfChange, encodeConfChange } from './confchange.js';
export { RaftErrorCode } from './errors.js';
export { FileRaftStorage } from './file-storage.js';
export { type RaftApplier, RaftDriver, type RaftDriverOptions } from './net/driver.js';
export {
  RaftTcpTransport,
  type RaftTlsOptions,
  type RaftTransportOptions,
  type RaftTransportStats,
} from './net/tcp-transport.js';
export { type Proposed, RaftNode } from './node.js';
export { assertSimulationOk, replayHint, runSimulation, type SimRunResult } from './simulation/cluster.js';
export type { SimRunOptions } from './simulation/options.js';
export { MemoryRaftStorage, type RaftInitialState, type RaftStorage, type RaftStorageWriter } from './storage.js';
export type * from './types.js';
