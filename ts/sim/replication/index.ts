/** Whole replicated logs on the deterministic simulator (docs/replication.md, "Simulation"). */
export {
  assertReplicationSimOk,
  emptyReplicationStats,
  type ReplicationSimOptions,
  type ReplicationSimResult,
  replicationReplayHint,
  runReplicationSimulation,
} from './cluster.js';
