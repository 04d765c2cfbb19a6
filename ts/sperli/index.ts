/**
 * plexus/sperli: SPERLI version 1, the MPI-like job runtime. This entry point carries
 * the wire and disk formats (docs/sperli.md), signed join tokens and COMMIT files, and
 * the refused-host rules; the runtime (launcher, ranks, collectives) builds on them.
 */
export { SperliCode, type SperliCodeValue, sperliError, type Verify } from '../codec/sperli-errors.js';
export * from '../codec/sperli-files.js';
export * from '../codec/sperli-frame.js';
export * from '../codec/sperli-jobdesc.js';
export * from '../codec/sperli-payloads.js';
export * from '../codec/sperli-stream.js';
export {
  CHECKPOINT_IO,
  CHECKPOINT_STATE,
  type Checkpointable,
  type CheckpointContext,
  type CheckpointState,
  type CheckpointStore,
  checkpointContextOf,
  fileStore,
} from './checkpoint.js';
export { type AllreduceOptions, ANY_SOURCE, ANY_TAG, Comm } from './comm.js';
export * from './hosts.js';
export { FAILURE_EXIT_CODE, type InitOptions, init } from './init.js';
export { type Job, type MakeJobOptions, makeJob } from './job.js';
export { type LaunchOptions, type LaunchResult, launch, parseHostsFile } from './launcher.js';
export { createMemoryTransports } from './memory-transport.js';
export { openMesh } from './mesh.js';
export * from './tokens.js';
export type { RankTransport, TransportFrame } from './transport.js';
