/**
 * The key file's layout (ts/federation/keys/file.ts keeps the keys and the cryptography): one
 * JSON object `{ format: "plexus-keys", version: 1, kdf, keys, mac }`, where `kdf` names scrypt
 * with its cost and a base64url salt, each entry of `keys` holds one private key sealed with
 * XChaCha20-Poly1305 (base64url nonce and ciphertext) under associated data
 * `plexus-keys/1\n<kid>\n<type>`, and `mac` is HMAC-SHA-256 (base64url) over the JSON of the
 * object without `mac` (docs/federation.md, "Keys"). A file that is not one is
 * PLX_KEYS_BAD_FILE.
 */
import { PlexusError } from '../core/errors.js';

export const KEY_FILE_FORMAT = 'plexus-keys';
export const KEY_FILE_VERSION = 1;
/** The largest key file read. */
export const MAX_KEY_FILE = 16 * 1024 * 1024;

/** One sealed key. `T` is the key type's name (ts/federation/did/multibase.ts `KeyType`). */
export interface KeyFileRecord<T extends string = string> {
  kid: string;
  type: T;
  status: 'active' | 'retired';
  createdAt: number;
  retiredAt?: number;
  nonce: string;
  sealed: string;
}

export interface KeyFileKdf {
  name: 'scrypt';
  N: number;
  r: number;
  p: number;
  salt: string;
}

export interface KeyFile<T extends string = string> {
  format: string;
  version: number;
  kdf: KeyFileKdf;
  keys: KeyFileRecord<T>[];
  mac?: string;
}

const te = new TextEncoder();

/** The associated data a key of `kid` and `type` is sealed under. */
export function keyFileAad(kid: string, type: string): Uint8Array {
  return te.encode(`${KEY_FILE_FORMAT}/${KEY_FILE_VERSION}\n${kid}\n${type}`);
}

/** The bytes the file's MAC covers: the JSON of the file without `mac`. */
export function keyFileMacInput(file: KeyFile): Uint8Array {
  const { mac: _mac, ...body } = file;
  return te.encode(JSON.stringify(body));
}

/** A new, empty file under `kdf`. */
export function newKeyFile<T extends string>(kdf: KeyFileKdf): KeyFile<T> {
  return { format: KEY_FILE_FORMAT, version: KEY_FILE_VERSION, kdf, keys: [] };
}

/** The file's text. */
export function encodeKeyFile(file: KeyFile): string {
  return `${JSON.stringify(file, null, 1)}\n`;
}

/**
 * Parses a key file's text and checks its outer shape (format, version, kdf, keys list);
 * throws PLX_KEYS_BAD_FILE naming `path`. The entries are trusted only once the MAC holds.
 */
export function parseKeyFile<T extends string>(text: string, path: string): KeyFile<T> {
  let file: KeyFile<T>;
  try {
    file = JSON.parse(text) as KeyFile<T>;
  } catch {
    throw new PlexusError('PLX_KEYS_BAD_FILE', `${path} is not a plexus key file (not JSON)`, {});
  }
  if (
    file?.format !== KEY_FILE_FORMAT ||
    file.version !== KEY_FILE_VERSION ||
    file.kdf?.name !== 'scrypt' ||
    !Array.isArray(file.keys)
  ) {
    throw new PlexusError('PLX_KEYS_BAD_FILE', `${path} is not a version ${KEY_FILE_VERSION} plexus key file`, {});
  }
  return file;
}
