/** Free ports for test processes that must know them before they bind: see ts/net/ports.ts. */
export { ephemeralLow, freePort, freePorts } from '../../ts/net/ports.js';
