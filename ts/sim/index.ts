/** The deterministic simulator: seeded randomness, virtual time, a faulty network, histories and checkers. */
export { VirtualClock } from './clock.js';
export { SimErrorCode } from './errors.js';
export { History, type Operation } from './history.js';
export { ReplicatedLogInvariants, type Violation } from './invariants.js';
export { checkLinearizable, type LinearizabilityResult, type Model } from './linearizability.js';
export { appendLogModel, type LogInput, type LogOutput, type LogState } from './log-model.js';
export { type InFlight, type NetworkOptions, SimNetwork } from './network.js';
export { SimRandom } from './rng.js';
