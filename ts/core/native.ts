/**
 * node:crypto's SHA-256 on Node.js, used by sha256() for
 * inputs at and above a size threshold. The threshold comes from `npm run bench`
 * (docs/core.md) and can be overridden with PLEXUS_SHA256_NATIVE_MIN (bytes; "off" to
 * never use node:crypto).
 */
import * as nodeCrypto from 'node:crypto';

type HashFn = (data: Uint8Array) => Uint8Array;

function pick(): HashFn | undefined {
  const c = nodeCrypto as unknown as {
    hash?: (alg: string, data: Uint8Array, enc: 'buffer') => Uint8Array;
    createHash?: typeof nodeCrypto.createHash;
  };
  if (typeof c.hash === 'function') {
    const h = c.hash;
    // A Buffer is a Uint8Array: returned as it is.
    return (data) => h('sha256', data, 'buffer');
  }
  if (typeof c.createHash === 'function') {
    const ch = c.createHash;
    return (data) => ch('sha256').update(data).digest();
  }
  return undefined;
}

const env = typeof process !== 'undefined' ? process.env.PLEXUS_SHA256_NATIVE_MIN : undefined;
// Node.js only: under Bun (and in browsers) sha256() stays on the WebAssembly kernel.
const isNode = typeof process !== 'undefined' && process.versions?.node !== undefined && !('bun' in process.versions);
export const nativeSha256: HashFn | undefined = env === 'off' || !isNode ? undefined : pick();

const DEFAULT_THRESHOLD = 512;
/** Inputs of this many bytes and more go to node:crypto (with the wasm backend). */
export const NATIVE_SHA256_MIN = env !== undefined && /^\d+$/.test(env) ? Number(env) : DEFAULT_THRESHOLD;

type NativeHash = { update(data: Uint8Array): unknown; digest(): Uint8Array };

/** A streaming node:crypto SHA-256 on Node.js (undefined elsewhere or when switched off). */
export const nativeSha256Stream: (() => NativeHash) | undefined =
  nativeSha256 === undefined || typeof nodeCrypto.createHash !== 'function'
    ? undefined
    : () => nodeCrypto.createHash('sha256') as unknown as NativeHash;
