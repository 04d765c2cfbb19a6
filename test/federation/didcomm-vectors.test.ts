import { ed25519 } from '@noble/curves/ed25519.js';
import { describe, expect, it } from 'vitest';
import { b64uDecode, b64uEncode } from '../../ts/federation/did/base64url.js';
import { InMemoryKeyManager, ResolverRegistry, UndecryptableLog, unpack } from '../../ts/federation/index.js';
import { didcommVectors, exampleDocs, expectCode, importJwk, StaticResolver } from './fixtures.js';

const V = didcommVectors();
const registry = () => new ResolverRegistry().register(new StaticResolver('example', exampleDocs(V.keys)));
const key = (kid: string) => V.keys.find((k) => k.kid === kid)!;

async function keysFor(...kids: string[]) {
  const km = new InMemoryKeyManager();
  for (const k of kids) await importJwk(km, key(k));
  return km;
}

/** Changes one character of a base64url text so that it decodes to other bytes (or fails to decode). */
function flipChar(s: string, at: number): string {
  const c = s[at]!;
  return `${s.slice(0, at)}${c === 'A' ? 'B' : 'A'}${s.slice(at + 1)}`;
}

describe('DIDComm v2 specification vectors', () => {
  const signed = V.vectors.find((v) => v.kind === 'signed')!;
  const anon = V.vectors.find((v) => v.kind === 'anoncrypt')!;
  const auth = V.vectors.find((v) => v.kind === 'authcrypt')!;

  it(`${signed.name}: verifies and yields the expected plaintext`, async () => {
    const { message, metadata } = await unpack(JSON.stringify(signed.message), {
      resolver: registry(),
      keys: new InMemoryKeyManager(),
    });
    expect(message).toEqual(V.expected_plaintext);
    expect(metadata).toMatchObject({
      encrypted: false,
      authenticated: true,
      nonRepudiation: true,
      signFrom: signed.signer_kid,
    });
  });

  it('signed: Ed25519 re-signing reproduces the signature byte for byte', () => {
    const sig = (signed.message.signatures as { protected: string; signature: string }[])[0]!;
    const d = b64uDecode(key(signed.signer_kid!).d, 'd');
    const input = new TextEncoder().encode(`${sig.protected}.${signed.message.payload as string}`);
    expect(b64uEncode(ed25519.sign(input, d))).toBe(sig.signature);
  });

  for (const v of [anon, auth]) {
    for (const rk of v.recipient_kids!) {
      it(`${v.name}: recipient ${rk} decrypts to the expected plaintext`, async () => {
        const { message, metadata } = await unpack(JSON.stringify(v.message), {
          resolver: registry(),
          keys: await keysFor(rk),
        });
        expect(message).toEqual(V.expected_plaintext);
        expect(metadata.encrypted).toBe(true);
        expect(metadata.recipientKid).toBe(rk);
        expect(metadata.encryptedToKids).toEqual(v.recipient_kids);
        if (v.kind === 'authcrypt') {
          expect(metadata).toMatchObject({
            authenticated: true,
            anonymousSender: false,
            encryptedFromKid: v.sender_kid,
          });
          expect(metadata.encAlgAuth).toBe('ECDH-1PU+A256KW/A256CBC-HS512');
        } else {
          expect(metadata).toMatchObject({
            authenticated: false,
            anonymousSender: true,
            encAlgAnon: 'ECDH-ES+A256KW/XC20P',
          });
        }
      });
    }
  }

  const flips: [string, (m: Record<string, unknown>) => void][] = [
    ['ciphertext', (m) => void (m.ciphertext = flipChar(m.ciphertext as string, 10))],
    ['tag', (m) => void (m.tag = flipChar(m.tag as string, 3))],
    ['iv', (m) => void (m.iv = flipChar(m.iv as string, 2))],
    ['protected', (m) => void (m.protected = flipChar(m.protected as string, 40))],
    [
      'encrypted_key',
      (m) => {
        for (const r of m.recipients as { encrypted_key: string }[]) r.encrypted_key = flipChar(r.encrypted_key, 5);
      },
    ],
  ];
  for (const v of [anon, auth]) {
    for (const [field, flip] of flips) {
      it(`${v.kind}: a byte changed in ${field} is refused and recorded`, async () => {
        const m = structuredClone(v.message);
        flip(m);
        const log = new UndecryptableLog();
        await expectCode(
          unpack(JSON.stringify(m), { resolver: registry(), keys: await keysFor(...v.recipient_kids!), recorder: log }),
          /^PLX_DIDCOMM_/,
        );
        expect(log.entries()).toHaveLength(1);
        expect(log.entries()[0]!.envelopeSha256).toMatch(/^[0-9a-f]{64}$/);
      });
    }
  }

  it('signed: a byte changed in the payload or the signature is refused', async () => {
    for (const field of ['payload', 'signature'] as const) {
      const m = structuredClone(signed.message) as { payload: string; signatures: { signature: string }[] };
      if (field === 'payload') m.payload = flipChar(m.payload, 30);
      else m.signatures[0]!.signature = flipChar(m.signatures[0]!.signature, 7);
      await expectCode(
        unpack(JSON.stringify(m), { resolver: registry(), keys: new InMemoryKeyManager() }),
        /^PLX_DIDCOMM_/,
      );
    }
  });

  it('a message for keys not held here is refused with PLX_DIDCOMM_NO_KEY and recorded', async () => {
    const log = new UndecryptableLog();
    await expectCode(
      unpack(JSON.stringify(anon.message), {
        resolver: registry(),
        keys: await keysFor('did:example:alice#key-x25519-1'),
        recorder: log,
      }),
      'PLX_DIDCOMM_NO_KEY',
    );
    expect(log.entries()[0]!.recipientKids).toEqual(anon.recipient_kids);
  });

  it('authcrypt: a skid whose key is another one is refused', async () => {
    const docs = exampleDocs(V.keys);
    const alice = docs.get('did:example:alice')!;
    alice.verificationMethod!.find((m) => m.id === auth.sender_kid)!.publicKeyJwk!.x =
      key('did:example:bob#key-x25519-1').x;
    const reg = new ResolverRegistry().register(new StaticResolver('example', docs));
    await expectCode(
      unpack(JSON.stringify(auth.message), { resolver: reg, keys: await keysFor(auth.recipient_kids![0]!) }),
      'PLX_DIDCOMM_DECRYPT_FAILED',
    );
  });
});
