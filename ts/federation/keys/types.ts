/**
 * The KeyManager seam: private keys stay behind it. Callers name a key by its DID URL (kid)
 * and ask it to sign or to agree on a secret; no method returns a private key, and no
 * listing, JSON form or log line of a manager contains one.
 */

import type { Clock } from '../../core/clock.js';
import type { KeyType } from '../did/multibase.js';

export type KeyStatus = 'active' | 'retired';

/** Public facts about one key. */
export interface KeyInfo {
  kid: string;
  did: string;
  type: KeyType;
  publicKey: Uint8Array;
  status: KeyStatus;
  createdAt: number;
  /** When the key was retired by a rotation; it keeps decrypting until `retiredAt + graceMs`. */
  retiredAt?: number;
}

export interface KeyManager {
  /** Creates a fresh key under `kid` (a DID URL with a fragment). */
  generate(kid: string, type: KeyType): Promise<KeyInfo>;
  /** Adds an existing private key (Ed25519 seed or X25519 scalar, 32 bytes). */
  importKey(kid: string, type: KeyType, secret: Uint8Array): Promise<KeyInfo>;
  /** The key's public facts while it is usable (active, or retired within the grace period). */
  info(kid: string): KeyInfo | undefined;
  /** Usable keys, optionally only those of one DID. */
  list(did?: string): KeyInfo[];
  /** Ed25519 signature by an active key. */
  sign(kid: string, data: Uint8Array): Promise<Uint8Array>;
  /** X25519 shared secret with an active key or a retired one within its grace period. */
  ecdh(kid: string, peerPublicKey: Uint8Array): Promise<Uint8Array>;
  /**
   * Replaces `oldKid` by a fresh key `newKid` of the same type under the same DID. The old key
   * is retired: it no longer signs or sends, but decrypts for the grace period.
   */
  rotate(oldKid: string, newKid: string): Promise<KeyInfo>;
  /** Deletes a key at once. */
  remove(kid: string): Promise<boolean>;
  /** Deletes retired keys whose grace period is over; returns how many. */
  purgeExpired(): Promise<number>;
}

export interface KeyManagerOptions {
  /** How long a retired key keeps decrypting, in ms (default 7 days). */
  graceMs?: number;
  /** Time in ms for retirement and its grace period (default the system clock). */
  clock?: Clock;
}
