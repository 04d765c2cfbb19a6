/**
 * The in-memory heart of every KeyManager: records, secrets in a private map, rotation and the
 * grace period of retired keys. Secrets never leave this class except to the persistence hook
 * of FileKeyManager, which encrypts them.
 */
import { ed25519, x25519 } from '@noble/curves/ed25519.js';
import { type Clock, systemClock } from '../../core/clock.js';
import { PlexusError } from '../../core/errors.js';
import { clip, parseDidUrl } from '../did/did-url.js';
import type { KeyType } from '../did/multibase.js';
import type { KeyInfo, KeyManagerOptions } from './types.js';
import { x25519Backend } from './x25519-backend.js';

export const DEFAULT_GRACE_MS = 7 * 24 * 3600 * 1000;
/** The most keys one manager holds. */
export const MAX_KEYS = 65_536;

export interface KeyRecord extends KeyInfo {
  readonly secret: Uint8Array;
}

export class KeyRing {
  readonly #records = new Map<string, KeyRecord>();
  readonly graceMs: number;
  readonly clock: Clock;

  constructor(opts: KeyManagerOptions = {}) {
    this.graceMs = opts.graceMs ?? DEFAULT_GRACE_MS;
    this.clock = opts.clock ?? systemClock;
  }

  static publicKeyOf(type: KeyType, secret: Uint8Array): Uint8Array {
    return type === 'Ed25519' ? ed25519.getPublicKey(secret) : x25519Backend().publicKey(secret);
  }

  /** Adds a record; refuses a duplicate kid, a kid without fragment or a bad secret. */
  add(kid: string, type: KeyType, secret: Uint8Array, extra: Partial<KeyInfo> = {}): KeyInfo {
    const p = parseDidUrl(kid);
    if (!p.fragment) {
      throw new PlexusError('PLX_KEYS_BAD_KID', `'${clip(kid)}' must be a DID URL with a #fragment`, {});
    }
    if (type !== 'Ed25519' && type !== 'X25519') {
      throw new PlexusError('PLX_KEYS_BAD_KEY', `key type must be Ed25519 or X25519, not ${String(type)}`, {});
    }
    if (!(secret instanceof Uint8Array) || secret.length !== 32) {
      throw new PlexusError('PLX_KEYS_BAD_KEY', `an ${type} private key has 32 bytes`, {});
    }
    if (this.#records.has(kid)) throw new PlexusError('PLX_KEYS_EXISTS', `key ${clip(kid)} already exists`, {});
    if (this.#records.size >= MAX_KEYS) {
      throw new PlexusError('PLX_KEYS_FULL', `a key manager holds at most ${MAX_KEYS} keys: purge retired keys`, {});
    }
    const rec: KeyRecord = {
      kid,
      did: p.did,
      type,
      publicKey: KeyRing.publicKeyOf(type, secret),
      status: 'active',
      createdAt: this.clock.now(),
      ...extra,
      secret: Uint8Array.from(secret),
    };
    this.#records.set(kid, rec);
    return toInfo(rec);
  }

  generate(kid: string, type: KeyType): KeyInfo {
    const secret = type === 'Ed25519' ? ed25519.utils.randomSecretKey() : x25519.utils.randomSecretKey();
    return this.add(kid, type, secret);
  }

  private usable(rec: KeyRecord | undefined): boolean {
    if (rec === undefined) return false;
    return rec.status === 'active' || (rec.retiredAt ?? 0) + this.graceMs > this.clock.now();
  }

  info(kid: string): KeyInfo | undefined {
    const rec = this.#records.get(kid);
    return rec !== undefined && this.usable(rec) ? toInfo(rec) : undefined;
  }

  list(did?: string): KeyInfo[] {
    const out: KeyInfo[] = [];
    for (const rec of this.#records.values()) {
      if ((did === undefined || rec.did === did) && this.usable(rec)) out.push(toInfo(rec));
    }
    return out;
  }

  private need(kid: string, type: KeyType, activeOnly: boolean): KeyRecord {
    const rec = this.#records.get(kid);
    if (rec === undefined) throw new PlexusError('PLX_KEYS_NOT_FOUND', `no private key ${clip(kid)} here`, {});
    if (rec.type !== type) {
      throw new PlexusError('PLX_KEYS_WRONG_TYPE', `key ${clip(kid)} is ${rec.type}, ${type} is needed`, {});
    }
    if (rec.status === 'retired' && (activeOnly || !this.usable(rec))) {
      throw new PlexusError(
        'PLX_KEYS_RETIRED',
        activeOnly
          ? `key ${clip(kid)} is retired: sign and send with its replacement`
          : `key ${clip(kid)} was retired and its grace period is over`,
        { retiredAt: rec.retiredAt },
      );
    }
    return rec;
  }

  sign(kid: string, data: Uint8Array): Uint8Array {
    return ed25519.sign(data, this.need(kid, 'Ed25519', true).secret);
  }

  ecdh(kid: string, peer: Uint8Array): Uint8Array {
    if (!(peer instanceof Uint8Array) || peer.length !== 32) {
      throw new PlexusError('PLX_KEYS_BAD_KEY', 'an X25519 public key has 32 bytes', {});
    }
    return x25519Backend().sharedSecret(this.need(kid, 'X25519', false).secret, peer);
  }

  rotate(oldKid: string, newKid: string): KeyInfo {
    const old = this.#records.get(oldKid);
    if (old === undefined || old.status !== 'active') {
      throw new PlexusError('PLX_KEYS_NOT_FOUND', `no active key ${clip(oldKid)} to rotate`, {});
    }
    if (parseDidUrl(newKid).did !== old.did) {
      throw new PlexusError(
        'PLX_KEYS_ROTATION_DID',
        `rotation keeps the DID: ${clip(newKid)} is not under ${clip(old.did)}`,
        {},
      );
    }
    const info = this.generate(newKid, old.type);
    this.#records.set(oldKid, { ...old, status: 'retired', retiredAt: this.clock.now() });
    return info;
  }

  remove(kid: string): boolean {
    const rec = this.#records.get(kid);
    if (rec) rec.secret.fill(0);
    return this.#records.delete(kid);
  }

  purgeExpired(): number {
    let n = 0;
    for (const rec of [...this.#records.values()]) {
      if (rec.status === 'retired' && !this.usable(rec)) {
        this.remove(rec.kid);
        n++;
      }
    }
    return n;
  }

  /** Every record with its secret: for the encrypting persistence of FileKeyManager only. */
  exportRecords(): readonly KeyRecord[] {
    return [...this.#records.values()];
  }

  /** Restores a persisted record as it was. */
  restore(rec: KeyRecord): void {
    this.#records.set(rec.kid, { ...rec, secret: Uint8Array.from(rec.secret) });
  }
}

export function toInfo(rec: KeyInfo): KeyInfo {
  const out: KeyInfo = {
    kid: rec.kid,
    did: rec.did,
    type: rec.type,
    publicKey: Uint8Array.from(rec.publicKey),
    status: rec.status,
    createdAt: rec.createdAt,
  };
  if (rec.retiredAt !== undefined) out.retiredAt = rec.retiredAt;
  return out;
}
