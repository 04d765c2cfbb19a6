/**
 * plexus runtime: virtual actors. Charts (pure `(state, event) -> (state, sends)`) run
 * as actors addressed by IRI; every macrostep is one atomic journal record on the log
 * engine, sends leave after it is durable, and replay rebuilds an actor without running
 * its effects again. docs/runtime.md describes the model, the record format and the API.
 */

export {
  DEFAULT_LANE_COMPACT_RECORDS,
  type LaneCompaction as NodeLogCompaction,
  MultiplexedLog as NodeLog,
} from '../storage/multiplexed-log.js';
export { Activation, messageIdOf } from './actor.js';
export { systemClock } from './clock.js';
export { DedupWindow } from './dedup.js';
export { JournalStoreCode, RuntimeCode } from './errors.js';
export { journalStoreMode, NODE_LOG_DIR, openJournalShards } from './journal-dir.js';
export {
  DEFAULT_COMPACT_DEAD_RECORDS,
  DEFAULT_JOURNAL_SHARDS,
  JOURNAL_META_FILE,
  type JournalCompaction,
  LogJournalStorage,
  memoryJournal,
  type OpenJournalOptions,
  openJournal,
  type ShardOpener,
  shardDir,
} from './log-journal.js';
export { Mailbox } from './mailbox.js';
export { allLocal, ERROR_COMMUNICATION, Node, NodeBuilder } from './node.js';
export * from './types.js';
export { PLEXUS_SEND, type SendSpec, sendEvent, type XEvent, xstateChart } from './xstate.js';
