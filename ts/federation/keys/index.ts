/** Key management: the KeyManager seam, an in-memory and a file-backed implementation. */

export { MAX_KEY_FILE } from '../../codec/key-file.js';
export {
  DEFAULT_SCRYPT,
  FileKeyManager,
  type FileKeyManagerOptions,
  MAX_SCRYPT_MEMORY,
  type ScryptParams,
} from './file.js';
export { DEFAULT_GRACE_MS, MAX_KEYS } from './key-ring.js';
export { InMemoryKeyManager } from './memory.js';
export type { KeyInfo, KeyManager, KeyManagerOptions, KeyStatus } from './types.js';
export { nobleX25519, nodeX25519, useX25519Backend, type X25519Backend, x25519Backend } from './x25519-backend.js';
