import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { x25519 } from '@noble/curves/ed25519.js';
import { bytesToHex } from '@noble/hashes/utils.js';
import { afterEach, describe, expect, it } from 'vitest';
import { FileKeyManager, InMemoryKeyManager } from '../../ts/federation/index.js';
import { AliasKeyManager } from '../../ts/federation/mediator/identity.js';
import { keyManagerSuite } from '../compliance/key-manager.suite.js';
import { expectCode } from './fixtures.js';

const FAST = { N: 1 << 10, r: 8, p: 1 }; // tests only: the default is 2^15
const dirs: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'plexus-keys-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

keyManagerSuite('InMemoryKeyManager', {
  setup: async () => ({ open: async (o) => new InMemoryKeyManager(o) }),
  teardown: async () => {},
});
keyManagerSuite('FileKeyManager', {
  setup: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'plexus-keys-'));
    return { dir, open: (o) => FileKeyManager.open(join(dir, 'keys.json'), 'pass phrase', { ...o, scrypt: FAST }) };
  },
  teardown: async (h) => rmSync(h.dir, { recursive: true, force: true }),
});
keyManagerSuite('AliasKeyManager over InMemoryKeyManager', {
  setup: async () => ({ open: async (o) => new AliasKeyManager(new InMemoryKeyManager(o)) }),
  teardown: async () => {},
});

describe('FileKeyManager on real files', () => {
  it('writes mode 0600, holds no private key in clear, and reopens with the same keys', async () => {
    const path = join(tmp(), 'keys.json');
    const km = await FileKeyManager.open(path, 'correct horse', { scrypt: FAST });
    const secret = x25519.utils.randomSecretKey();
    const info = await km.importKey('did:example:a#ka', 'X25519', secret);
    await km.generate('did:example:a#sig', 'Ed25519');
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readdirSync(join(path, '..'))).toEqual(['keys.json']); // atomic rename left no temporary file
    const text = readFileSync(path, 'utf8');
    expect(text.includes(bytesToHex(secret))).toBe(false);
    expect(text.includes(Buffer.from(secret).toString('base64url'))).toBe(false);
    expect(text.includes(Buffer.from(secret).toString('base64'))).toBe(false);
    const again = await FileKeyManager.open(path, 'correct horse');
    expect(
      again
        .list()
        .map((k) => k.kid)
        .sort(),
    ).toEqual(['did:example:a#ka', 'did:example:a#sig']);
    const peer = x25519.utils.randomSecretKey();
    expect(bytesToHex(await again.ecdh(info.kid, x25519.getPublicKey(peer)))).toBe(
      bytesToHex(x25519.getSharedSecret(peer, info.publicKey)),
    );
  });

  it('refuses a wrong passphrase, an altered file and a file others can read', async () => {
    const path = join(tmp(), 'keys.json');
    const km = await FileKeyManager.open(path, 'right', { scrypt: FAST });
    await km.generate('did:example:a#ka', 'X25519');
    await expectCode(FileKeyManager.open(path, 'wrong'), 'PLX_KEYS_WRONG_PASSPHRASE');
    const file = JSON.parse(readFileSync(path, 'utf8'));
    file.keys[0].status = 'retired';
    file.keys[0].retiredAt = 0;
    writeFileSync(path, JSON.stringify(file), { mode: 0o600 });
    await expectCode(FileKeyManager.open(path, 'right'), 'PLX_KEYS_WRONG_PASSPHRASE');
    chmodSync(path, 0o644);
    await expectCode(FileKeyManager.open(path, 'right'), 'PLX_KEYS_FILE_MODE');
    const junk = join(tmp(), 'junk.json');
    writeFileSync(junk, 'not json', { mode: 0o600 });
    await expectCode(FileKeyManager.open(junk, 'right'), 'PLX_KEYS_BAD_FILE');
    await expectCode(FileKeyManager.open(join(tmp(), 'new.json'), ''), 'PLX_KEYS_BAD_PASSPHRASE');
  });

  it('rotation and its grace period survive a reopen', async () => {
    let now = 5_000;
    const path = join(tmp(), 'keys.json');
    const km = await FileKeyManager.open(path, 'p', { scrypt: FAST, graceMs: 1000, clock: { now: () => now } });
    const old = await km.generate('did:example:a#ka-1', 'X25519');
    await km.rotate(old.kid, 'did:example:a#ka-2');
    const reopened = await FileKeyManager.open(path, 'p', { graceMs: 1000, clock: { now: () => now } });
    expect(reopened.info(old.kid)).toMatchObject({ status: 'retired', retiredAt: 5_000 });
    const peer = x25519.getPublicKey(x25519.utils.randomSecretKey());
    await reopened.ecdh(old.kid, peer);
    now = 6_001;
    await expectCode(reopened.ecdh(old.kid, peer), 'PLX_KEYS_RETIRED');
    expect(await reopened.purgeExpired()).toBe(1);
    const third = await FileKeyManager.open(path, 'p', { graceMs: 1000, clock: { now: () => now } });
    expect(third.list().map((k) => k.kid)).toEqual(['did:example:a#ka-2']);
  });
});
