/** A Raft cluster on the deterministic simulator (docs/raft.md): every node runs the real-time driver on simulated time. */
export { assertSimulationOk, replayHint, runSimulation, type SimRunResult } from './cluster.js';
export { describeFailure, SimHarness, type SimOutcome } from './harness.js';
export type { SimRunOptions } from './options.js';
