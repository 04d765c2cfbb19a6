/** The Raft core: a pure state machine driven through RaftNode (docs/raft.md). */

export {
  type ConfChange,
  type ConfChangeType,
  decodeConfChange,
  encodeConfChange,
} from '../codec/raft-confchange.js';
export {
  decodeRaftMessage,
  encodeRaftMessage,
  RAFT_HEADER_BYTES,
  type RaftDecoded,
  RaftMessageStream,
} from '../codec/raft-wire.js';
export { RaftErrorCode } from './errors.js';
export { type Proposed, RaftNode } from './node.js';
export { MemoryRaftStorage, type RaftInitialState, type RaftStorage, type RaftStorageWriter } from './storage.js';
export type * from './types.js';
