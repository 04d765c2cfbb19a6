/**
 * The compliance suite of the KeyManager seam (ts/federation/keys/types.ts): every
 * implementation (in memory, encrypted file, the alias view a mediator uses) runs the same
 * tests. An implementation runs it from its own test file with a factory whose `setup` gives a
 * harness that opens a fresh manager with the options a test asks for (grace period, clock),
 * and whose `teardown` removes what the managers wrote:
 *
 * ```ts
 * keyManagerSuite('FileKeyManager', {
 *   setup: async () => { const dir = mkdtempSync(...); return { dir, open: (o) => FileKeyManager.open(join(dir, 'keys.json'), 'pw', o) }; },
 *   teardown: async (h) => rmSync(h.dir, { recursive: true, force: true }),
 * });
 * ```
 */
import { inspect } from 'node:util';
import { ed25519, x25519 } from '@noble/curves/ed25519.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import { describe, expect, it } from 'vitest';
import type { KeyManager, KeyManagerOptions } from '../../ts/federation/keys/types.js';
import { refusal } from '../helpers/refusal.js';
import { eachTest, type SuiteFactory } from './_kit.js';

export interface KeyManagerHarness {
  /** A fresh, empty manager with these options. */
  open(opts: KeyManagerOptions): Promise<KeyManager>;
}

/** Fails unless `p` rejects with a PlexusError of this code. */
async function expectCode(p: Promise<unknown>, code: string): Promise<void> {
  expect((await refusal(p)).code).toBe(code);
}

export function keyManagerSuite<T extends KeyManagerHarness>(name: string, factory: SuiteFactory<T>): void {
  describe(`KeyManager compliance: ${name}`, () => {
    const subject = eachTest(factory);
    const did = 'did:example:owner';

    it('signs with Ed25519 and agrees with X25519; the results check with the public keys', async () => {
      const km = await subject().open({});
      const sk = await km.generate(`${did}#sig`, 'Ed25519');
      const ka = await km.generate(`${did}#ka`, 'X25519');
      const msg = new TextEncoder().encode('hello');
      expect(ed25519.verify(await km.sign(sk.kid, msg), msg, sk.publicKey)).toBe(true);
      const peer = x25519.utils.randomSecretKey();
      expect(bytesToHex(await km.ecdh(ka.kid, x25519.getPublicKey(peer)))).toBe(
        bytesToHex(x25519.getSharedSecret(peer, ka.publicKey)),
      );
      expect(
        km
          .list(did)
          .map((k) => k.kid)
          .sort(),
      ).toEqual([`${did}#ka`, `${did}#sig`]);
    });

    it('never shows a private key: JSON, inspect and listings hold public facts only', async () => {
      const km = await subject().open({});
      const secret = new Uint8Array(32).fill(7);
      await km.importKey(`${did}#k`, 'Ed25519', secret);
      const hex = bytesToHex(secret);
      const shown = [
        JSON.stringify(km),
        inspect(km, { depth: 10, showHidden: true }),
        JSON.stringify(km.list()),
        inspect(km.info(`${did}#k`)),
      ];
      for (const s of shown) {
        expect(s.includes(hex)).toBe(false);
        expect(s.includes('7, 7, 7, 7')).toBe(false);
      }
      expect(Object.keys(km.info(`${did}#k`)!)).not.toContain('secret');
    });

    it('refuses: kid without fragment, duplicate kid, wrong type, unknown key, bad sizes', async () => {
      const km = await subject().open({});
      await expectCode(km.generate(did, 'Ed25519'), 'PLX_KEYS_BAD_KID');
      await km.generate(`${did}#a`, 'Ed25519');
      await expectCode(km.generate(`${did}#a`, 'Ed25519'), 'PLX_KEYS_EXISTS');
      await expectCode(km.ecdh(`${did}#a`, new Uint8Array(32)), 'PLX_KEYS_WRONG_TYPE');
      await expectCode(km.sign(`${did}#none`, new Uint8Array(1)), 'PLX_KEYS_NOT_FOUND');
      await expectCode(km.importKey(`${did}#b`, 'X25519', new Uint8Array(31)), 'PLX_KEYS_BAD_KEY');
      await km.generate(`${did}#x`, 'X25519');
      await expectCode(km.ecdh(`${did}#x`, new Uint8Array(31)), 'PLX_KEYS_BAD_KEY');
    });

    it('rotation keeps the DID; the retired key decrypts during the grace period only, and never signs', async () => {
      let now = 1_000_000;
      const km = await subject().open({ graceMs: 60_000, clock: { now: () => now } });
      const old = await km.generate(`${did}#ka-1`, 'X25519');
      await km.generate(`${did}#sig-1`, 'Ed25519');
      const peer = x25519.utils.randomSecretKey();
      const peerPub = x25519.getPublicKey(peer);
      const fresh = await km.rotate(old.kid, `${did}#ka-2`);
      expect(fresh.did).toBe(did);
      expect(km.info(old.kid)?.status).toBe('retired');
      expect(bytesToHex(await km.ecdh(old.kid, peerPub))).toBe(bytesToHex(x25519.getSharedSecret(peer, old.publicKey)));
      await expectCode(km.rotate(`${did}#sig-1`, 'did:example:other#sig'), 'PLX_KEYS_ROTATION_DID');
      await km.rotate(`${did}#sig-1`, `${did}#sig-2`);
      await expectCode(km.sign(`${did}#sig-1`, new Uint8Array(1)), 'PLX_KEYS_RETIRED');
      now += 60_001;
      await expectCode(km.ecdh(old.kid, peerPub), 'PLX_KEYS_RETIRED');
      expect(km.info(old.kid)).toBeUndefined();
      expect(await km.purgeExpired()).toBe(2);
      await expectCode(km.ecdh(old.kid, peerPub), 'PLX_KEYS_NOT_FOUND');
      expect(
        km
          .list(did)
          .map((k) => k.kid)
          .sort(),
      ).toEqual([`${did}#ka-2`, `${did}#sig-2`]);
    });
  });
}
