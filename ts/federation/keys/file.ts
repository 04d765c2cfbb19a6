/**
 * FileKeyManager: keys in one file, each private key encrypted at rest with XChaCha20-Poly1305
 * under a key derived from a passphrase by scrypt (RFC 7914). The whole file is authenticated
 * by HMAC-SHA-256 under a second derived key, so a wrong passphrase or an altered file is
 * refused before any key is used. The file is written atomically (temporary file, fsync,
 * rename, fsync of the directory) with mode 0600, and refused when others may read it.
 */
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, type Stats, statSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { hmac } from '@noble/hashes/hmac.js';
import { scrypt } from '@noble/hashes/scrypt.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { randomBytes } from '@noble/hashes/utils.js';
import {
  type KeyFile as CodecKeyFile,
  encodeKeyFile,
  type KeyFileRecord,
  keyFileAad,
  keyFileMacInput,
  MAX_KEY_FILE,
  newKeyFile,
  parseKeyFile,
} from '../../codec/key-file.js';
import { type CodeSuffix, PlexusError } from '../../core/errors.js';
import { b64uDecode, b64uEncode } from '../did/base64url.js';
import type { KeyType } from '../did/multibase.js';
import { type KeyRecord, KeyRing } from './key-ring.js';
import type { KeyInfo, KeyManager, KeyManagerOptions } from './types.js';

/** The most memory scrypt may use (128 * r * N bytes): 256 MiB. */
export const MAX_SCRYPT_MEMORY = 256 * 1024 * 1024;

export interface ScryptParams {
  /** CPU/memory cost, a power of two (default 2^15). */
  N: number;
  r: number;
  p: number;
}

export const DEFAULT_SCRYPT: ScryptParams = { N: 1 << 15, r: 8, p: 1 };

export interface FileKeyManagerOptions extends KeyManagerOptions {
  /** scrypt cost for a new file (an existing file keeps its own). */
  scrypt?: ScryptParams;
}

type KeyFile = CodecKeyFile<KeyType>;

function fail(reason: CodeSuffix<'PLX_KEYS_'>, message: string, details: Record<string, unknown> = {}): never {
  throw new PlexusError(`PLX_KEYS_${reason}`, message, details);
}

function deriveKeys(passphrase: string, kdf: KeyFile['kdf']): { enc: Uint8Array; mac: Uint8Array } {
  if (typeof passphrase !== 'string' || passphrase.length === 0)
    fail('BAD_PASSPHRASE', 'the passphrase must not be empty');
  const { N, r, p } = kdf;
  // Refuse costs a tampered file could use to exhaust memory or time (the MAC needs the key first).
  if (
    !Number.isInteger(Math.log2(N)) ||
    N < 2 ||
    r < 1 ||
    r > 32 ||
    p < 1 ||
    p > 16 ||
    128 * r * N > MAX_SCRYPT_MEMORY
  ) {
    fail('BAD_FILE', `scrypt parameters N=${N} r=${r} p=${p} are out of range (at most ${MAX_SCRYPT_MEMORY} bytes)`);
  }
  const salt = b64uDecode(kdf.salt, 'kdf.salt', 'PLX_KEYS_BAD_FILE');
  const out = scrypt(passphrase, salt, { N, r, p, dkLen: 64, maxmem: MAX_SCRYPT_MEMORY + 1024 * 1024 });
  return { enc: out.slice(0, 32), mac: out.slice(32) };
}

function macOf(file: KeyFile, macKey: Uint8Array): string {
  return b64uEncode(hmac(sha256, macKey, keyFileMacInput(file)));
}

export class FileKeyManager implements KeyManager {
  readonly #ring: KeyRing;
  readonly #enc: Uint8Array;
  readonly #mac: Uint8Array;
  readonly #kdf: KeyFile['kdf'];
  #writing: Promise<void> = Promise.resolve();

  private constructor(
    readonly path: string,
    ring: KeyRing,
    keys: { enc: Uint8Array; mac: Uint8Array },
    kdf: KeyFile['kdf'],
  ) {
    this.#ring = ring;
    this.#enc = keys.enc;
    this.#mac = keys.mac;
    this.#kdf = kdf;
  }

  /** Opens the key file at `path`, creating an empty one when it does not exist. */
  static async open(path: string, passphrase: string, opts: FileKeyManagerOptions = {}): Promise<FileKeyManager> {
    const ring = new KeyRing(opts);
    let st: Stats | undefined;
    try {
      st = statSync(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    if (st === undefined) {
      const s = opts.scrypt ?? DEFAULT_SCRYPT;
      const kdf = { name: 'scrypt' as const, N: s.N, r: s.r, p: s.p, salt: b64uEncode(randomBytes(16)) };
      const km = new FileKeyManager(path, ring, deriveKeys(passphrase, kdf), kdf);
      await km.persist();
      return km;
    }
    if (!st.isFile()) fail('BAD_FILE', `${path} is not a regular file`);
    if ((st.mode & 0o077) !== 0) {
      fail('FILE_MODE', `${path} has mode ${(st.mode & 0o777).toString(8)}: key files must be 0600 (chmod 600 it)`, {
        mode: st.mode & 0o777,
      });
    }
    if (st.size > MAX_KEY_FILE) fail('BAD_FILE', `${path} is larger than ${MAX_KEY_FILE} bytes`);
    const file = parseKeyFile<KeyType>(readFileSync(path, 'utf8'), path);
    const keys = deriveKeys(passphrase, file.kdf);
    if (typeof file.mac !== 'string' || macOf(file, keys.mac) !== file.mac) {
      fail('WRONG_PASSPHRASE', `cannot open ${path}: wrong passphrase, or the file was altered`);
    }
    for (const r of file.keys) {
      const secret = xchacha20poly1305(
        keys.enc,
        b64uDecode(r.nonce, 'nonce', 'PLX_KEYS_BAD_FILE'),
        keyFileAad(r.kid, r.type),
      ).decrypt(b64uDecode(r.sealed, 'sealed', 'PLX_KEYS_BAD_FILE'));
      const rec: KeyRecord = {
        kid: r.kid,
        did: r.kid.slice(0, r.kid.indexOf('#')),
        type: r.type,
        publicKey: KeyRing.publicKeyOf(r.type, secret),
        status: r.status,
        createdAt: r.createdAt,
        secret,
      };
      if (r.retiredAt !== undefined) (rec as KeyInfo).retiredAt = r.retiredAt;
      ring.restore(rec);
      secret.fill(0);
    }
    return new FileKeyManager(path, ring, keys, file.kdf);
  }

  private persist(): Promise<void> {
    const run = async (): Promise<void> => {
      const file = newKeyFile<KeyType>(this.#kdf);
      for (const rec of this.#ring.exportRecords()) {
        const nonce = randomBytes(24);
        const sealed = xchacha20poly1305(this.#enc, nonce, keyFileAad(rec.kid, rec.type)).encrypt(rec.secret);
        const r: KeyFileRecord<KeyType> = {
          kid: rec.kid,
          type: rec.type,
          status: rec.status,
          createdAt: rec.createdAt,
          nonce: b64uEncode(nonce),
          sealed: b64uEncode(sealed),
        };
        if (rec.retiredAt !== undefined) r.retiredAt = rec.retiredAt;
        file.keys.push(r);
      }
      file.mac = macOf(file, this.#mac);
      writeAtomic(this.path, encodeKeyFile(file));
    };
    const p = this.#writing.then(run);
    this.#writing = p.catch(() => undefined);
    return p;
  }

  async generate(kid: string, type: KeyType): Promise<KeyInfo> {
    const info = this.#ring.generate(kid, type);
    await this.persist();
    return info;
  }
  async importKey(kid: string, type: KeyType, secret: Uint8Array): Promise<KeyInfo> {
    const info = this.#ring.add(kid, type, secret);
    await this.persist();
    return info;
  }
  info(kid: string): KeyInfo | undefined {
    return this.#ring.info(kid);
  }
  list(did?: string): KeyInfo[] {
    return this.#ring.list(did);
  }
  async sign(kid: string, data: Uint8Array): Promise<Uint8Array> {
    return this.#ring.sign(kid, data);
  }
  async ecdh(kid: string, peerPublicKey: Uint8Array): Promise<Uint8Array> {
    return this.#ring.ecdh(kid, peerPublicKey);
  }
  async rotate(oldKid: string, newKid: string): Promise<KeyInfo> {
    const info = this.#ring.rotate(oldKid, newKid);
    await this.persist();
    return info;
  }
  async remove(kid: string): Promise<boolean> {
    const gone = this.#ring.remove(kid);
    if (gone) await this.persist();
    return gone;
  }
  async purgeExpired(): Promise<number> {
    const n = this.#ring.purgeExpired();
    if (n > 0) await this.persist();
    return n;
  }
  toJSON(): unknown {
    return {
      kind: 'FileKeyManager',
      path: this.path,
      keys: this.list().map((k) => ({ kid: k.kid, type: k.type, status: k.status })),
    };
  }
}

/** Writes `text` to `path` atomically with mode 0600: temporary file, fsync, rename, fsync of the directory. */
function writeAtomic(path: string, text: string): void {
  const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
  const fd = openSync(tmp, 'wx', 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  const dfd = openSync(dirname(path), 'r');
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}
