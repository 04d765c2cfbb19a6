/**
 * The A256CBC-HS512 primitives behind the DIDComm content encryption that relays and receivers
 * spend most time on: the node:crypto backend gives the same bytes as the @noble reference for
 * AES-256-CBC (PKCS#7) and HMAC-SHA-512 on random keys, IVs and lengths; both refuse bad padding
 * and partial blocks; and a whole authcrypt message packed under one backend unpacks under the
 * other.
 */
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { ResolverRegistry } from '../../ts/federation/did/registry.js';
import { cbcBackend, nobleCbc, nodeCbc, useCbcBackend } from '../../ts/federation/didcomm/cbc-backend.js';
import { decryptContent, encryptContent } from '../../ts/federation/didcomm/content.js';
import { packEncrypted } from '../../ts/federation/didcomm/pack.js';
import { unpack } from '../../ts/federation/didcomm/unpack.js';
import { InMemoryKeyManager } from '../../ts/federation/keys/memory.js';
import { createPeerIdentity } from '../../ts/federation/mediator/identity.js';

const seed = process.env.PLEXUS_FUZZ_SEED === 'random' ? Date.now() : Number(process.env.PLEXUS_FUZZ_SEED ?? 20261130);
const initial = cbcBackend().name;
afterAll(() => useCbcBackend(initial));

const bytes = (n: number) => fc.uint8Array({ minLength: n, maxLength: n });

describe('A256CBC-HS512 backends', () => {
  it('is node:crypto by default on Node.js', () => {
    expect(process.env.PLEXUS_CBC === 'noble' ? 'noble' : 'node').toBe(initial);
  });

  it('give identical bytes for AES-256-CBC and HMAC-SHA-512', () => {
    fc.assert(
      fc.property(
        bytes(32),
        bytes(16),
        fc.uint8Array({ maxLength: 300 }),
        fc.uint8Array({ maxLength: 200 }),
        (k, iv, pt, aad) => {
          const a = nobleCbc.encrypt(k, iv, pt);
          const b = nodeCbc.encrypt(k, iv, pt);
          expect(Buffer.from(b)).toEqual(Buffer.from(a));
          expect(Buffer.from(nodeCbc.decrypt(k, iv, a))).toEqual(Buffer.from(pt));
          expect(Buffer.from(nobleCbc.decrypt(k, iv, b))).toEqual(Buffer.from(pt));
          expect(Buffer.from(nodeCbc.hmacSha512(k, [aad, iv, pt]))).toEqual(
            Buffer.from(nobleCbc.hmacSha512(k, [aad, iv, pt])),
          );
        },
      ),
      { seed, numRuns: 200 },
    );
  });

  it('both refuse partial blocks and wrong padding', () => {
    const k = new Uint8Array(32).fill(7);
    const iv = new Uint8Array(16).fill(9);
    const ct = nodeCbc.encrypt(k, iv, new Uint8Array(20));
    for (const be of [nobleCbc, nodeCbc]) {
      expect(() => be.decrypt(k, iv, ct.subarray(0, 17))).toThrow();
      expect(() => be.decrypt(k, iv, new Uint8Array(0))).toThrow();
      const wrongKey = new Uint8Array(32).fill(8);
      // A wrong key gives random padding; over many IVs both refuse the same ones.
      let refusedBy = 0;
      for (let i = 0; i < 32; i++) {
        const iv2 = new Uint8Array(16).fill(i);
        try {
          be.decrypt(wrongKey, iv2, ct);
        } catch {
          refusedBy++;
        }
      }
      expect(refusedBy).toBeGreaterThan(20);
    }
  });

  it('a sender that authenticates a ciphertext of partial blocks gets a coded refusal from either backend', () => {
    const cek = new Uint8Array(64).fill(3);
    const iv = new Uint8Array(16).fill(4);
    const aad = new Uint8Array([1, 2, 3]);
    for (const be of [nobleCbc, nodeCbc]) {
      useCbcBackend(be.name);
      for (const ct of [new Uint8Array(17).fill(5), new Uint8Array(0)]) {
        // The tag of RFC 7518 section 5.2.2.1 over this ciphertext, so the HMAC check passes.
        const al = new Uint8Array(8);
        new DataView(al.buffer).setBigUint64(0, BigInt(aad.length) * 8n);
        const tag = be.hmacSha512(cek.subarray(0, 32), [aad, iv, ct, al]).slice(0, 32);
        let err: unknown;
        try {
          decryptContent('A256CBC-HS512', cek, iv, aad, ct, tag);
        } catch (e) {
          err = e;
        }
        expect(isPlexusError(err, 'PLX_DIDCOMM_DECRYPT_FAILED'), `${be.name}: ${String(err)}`).toBe(true);
        expect((err as PlexusError).details.enc).toBe('A256CBC-HS512');
      }
    }
    useCbcBackend(initial);
  });

  it('content encrypted under one backend decrypts under the other; a changed tag is refused', () => {
    fc.assert(
      fc.property(bytes(64), bytes(16), fc.uint8Array({ maxLength: 200 }), bytes(20), (cek, iv, pt, aad) => {
        useCbcBackend('noble');
        const a = encryptContent('A256CBC-HS512', cek, iv, aad, pt);
        useCbcBackend('node');
        const b = encryptContent('A256CBC-HS512', cek, iv, aad, pt);
        expect(Buffer.from(b.ciphertext)).toEqual(Buffer.from(a.ciphertext));
        expect(Buffer.from(b.tag)).toEqual(Buffer.from(a.tag));
        expect(Buffer.from(decryptContent('A256CBC-HS512', cek, iv, aad, a.ciphertext, a.tag))).toEqual(
          Buffer.from(pt),
        );
        const bad = Uint8Array.from(a.tag);
        bad[0] = (bad[0] as number) ^ 1;
        expect(() => decryptContent('A256CBC-HS512', cek, iv, aad, a.ciphertext, bad)).toThrow(/does not decrypt/);
      }),
      { seed, numRuns: 100 },
    );
    useCbcBackend(initial);
  });

  it('an authcrypt message packed with one backend unpacks with the other', async () => {
    const resolver = new ResolverRegistry();
    const ak = new InMemoryKeyManager();
    const bk = new InMemoryKeyManager();
    const a = await createPeerIdentity(ak);
    const b = await createPeerIdentity(bk);
    for (const [p, u] of [
      ['noble', 'node'],
      ['node', 'noble'],
    ] as const) {
      useCbcBackend(p);
      const msg = { id: `m-${p}`, type: 'https://example.org/t', from: a.did, to: [b.did], body: { p } };
      const packed = await packEncrypted(
        msg,
        { to: b.did, from: a.did, protectSender: true, enc: 'A256CBC-HS512' },
        { resolver, keys: ak },
      );
      useCbcBackend(u);
      const out = await unpack(packed.packed, { resolver, keys: bk });
      expect(out.message.id).toBe(`m-${p}`);
      expect(out.metadata.authenticated).toBe(true);
    }
    useCbcBackend(initial);
  });
});
