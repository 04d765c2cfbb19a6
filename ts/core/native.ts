/**
 * node:crypto's SHA-256 where the runtime has it (Node.js, Bun), used by sha256() for
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
    return (data) => {
      const b = h('sha256', data, 'buffer');
      return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    };
  }
  if (typeof c.createHash === 'function') {
    const ch = c.createHash;
    return (data) => {
      const b = ch('sha256').update(data).digest();
      return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    };
  }
  return undefined;
}

const env = typeof process !== 'undefined' ? process.env.PLEXUS_SHA256_NATIVE_MIN : undefined;
export const nativeSha256: HashFn | undefined = env === 'off' ? undefined : pick();

const DEFAULT_THRESHOLD = 512;
const threshold = env !== undefined && /^\d+$/.test(env) ? Number(env) : DEFAULT_THRESHOLD;

export function nativeSha256Threshold(): number {
  return threshold;
}
