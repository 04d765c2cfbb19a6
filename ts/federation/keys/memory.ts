/** InMemoryKeyManager: keys in process memory only, gone when the process ends. */
import type { KeyType } from '../did/multibase.js';
import { KeyRing } from './key-ring.js';
import type { KeyInfo, KeyManager, KeyManagerOptions } from './types.js';

export class InMemoryKeyManager implements KeyManager {
  readonly #ring: KeyRing;

  constructor(opts: KeyManagerOptions = {}) {
    this.#ring = new KeyRing(opts);
  }

  async generate(kid: string, type: KeyType): Promise<KeyInfo> {
    return this.#ring.generate(kid, type);
  }
  async importKey(kid: string, type: KeyType, secret: Uint8Array): Promise<KeyInfo> {
    return this.#ring.add(kid, type, secret);
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
    return this.#ring.rotate(oldKid, newKid);
  }
  async remove(kid: string): Promise<boolean> {
    return this.#ring.remove(kid);
  }
  async purgeExpired(): Promise<number> {
    return this.#ring.purgeExpired();
  }
  /** Public facts only: a manager serialised by accident shows no secret. */
  toJSON(): unknown {
    return {
      kind: 'InMemoryKeyManager',
      keys: this.list().map((k) => ({ kid: k.kid, type: k.type, status: k.status })),
    };
  }
}
