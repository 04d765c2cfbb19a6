import { readFileSync } from 'node:fs';
import { ed25519 } from '@noble/curves/ed25519.js';
import { sha512 } from '@noble/hashes/sha2.js';
import { ml_dsa44 } from '@noble/post-quantum/ml-dsa.js';
import { describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { CompositeSig, SPERLI_COMMIT_CONTEXT, SPERLI_JOIN_CONTEXT } from '../../ts/crypto/index.js';
import { externalVectors } from '../helpers/paths.js';
import { randomBytes, rng } from '../helpers/rng.js';

interface VectorFile {
  source: string;
  m: string;
  ctx: string;
  tests: { tcId: string; pk: string; x5c: string; sk: string; sk_pkcs8: string; s: string; sWithContext: string }[];
}

const file = JSON.parse(readFileSync(externalVectors('composite-mldsa44-ed25519.json'), 'utf8')) as VectorFile;
const b64 = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s, 'base64'));
const message = b64(file.m);
const context = b64(file.ctx);
const vectors = file.tests.map((t) => ({
  id: t.tcId,
  publicKey: b64(t.pk),
  secretKey: b64(t.sk),
  secretKeyPkcs8: b64(t.sk_pkcs8),
  certificate: b64(t.x5c),
  signature: b64(t.s),
  signatureWithContext: b64(t.sWithContext),
}));
const EMPTY = new Uint8Array(0);

function flipped(bytes: Uint8Array, at: number): Uint8Array {
  const out = Uint8Array.from(bytes);
  out[at] = out[at]! ^ 0x01;
  return out;
}

/** Positions to flip: the first, middle and last byte of each half, and a few between. */
function positions(length: number, split: number): number[] {
  return [0, 1, split >> 1, split - 1, split, split + 1, length - 2, length - 1];
}

function codeOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    return isPlexusError(e) ? e.code : `not a PlexusError: ${String(e)}`;
  }
  return undefined;
}

/**
 * The message representative written out independently from the draft text:
 * M' = "CompositeAlgorithmSignatures2025" || "COMPSIG-MLDSA44-Ed25519-SHA512" || len(ctx) || ctx || SHA-512(M).
 */
function representative(m: Uint8Array, ctx: Uint8Array): Uint8Array {
  return Uint8Array.from([
    ...Buffer.from('CompositeAlgorithmSignatures2025', 'ascii'),
    ...Buffer.from('COMPSIG-MLDSA44-Ed25519-SHA512', 'ascii'),
    ctx.length,
    ...ctx,
    ...sha512(m),
  ]);
}

describe('CompositeSig external vectors (vectors/external/composite-mldsa44-ed25519.json)', () => {
  it('holds the ML-DSA-44 + Ed25519 case with the documented sizes', () => {
    expect(vectors.map((v) => v.id)).toEqual(['id-MLDSA44-Ed25519-SHA512']);
    for (const v of vectors) {
      expect(v.publicKey.length).toBe(CompositeSig.lengths.publicKey);
      expect(v.secretKey.length).toBe(CompositeSig.lengths.secretKey);
      expect(v.signature.length).toBe(CompositeSig.lengths.signature);
      expect(v.signatureWithContext.length).toBe(CompositeSig.lengths.signature);
    }
    expect(context.length).toBeGreaterThan(0);
  });

  describe.each(vectors)('$id', (v) => {
    it('verifies the signature without context (empty string and empty bytes)', () => {
      expect(CompositeSig.verify(v.publicKey, message, v.signature, '')).toBe(true);
      expect(CompositeSig.verify(v.publicKey, message, v.signature, EMPTY)).toBe(true);
    });

    it('verifies the signature with context', () => {
      expect(CompositeSig.verify(v.publicKey, message, v.signatureWithContext, context)).toBe(true);
      // The vector's context is ASCII, so the same text as a string gives the same bytes.
      expect(
        CompositeSig.verify(v.publicKey, message, v.signatureWithContext, Buffer.from(context).toString('utf8')),
      ).toBe(true);
    });

    it('does not verify a signature under the other context', () => {
      expect(CompositeSig.verify(v.publicKey, message, v.signature, context)).toBe(false);
      expect(CompositeSig.verify(v.publicKey, message, v.signatureWithContext, EMPTY)).toBe(false);
      expect(CompositeSig.verify(v.publicKey, message, v.signatureWithContext, flipped(context, 0))).toBe(false);
    });

    it('refuses the signatures with one byte flipped (in each half)', () => {
      for (const at of positions(v.signature.length, 2420)) {
        expect(CompositeSig.verify(v.publicKey, message, flipped(v.signature, at), EMPTY), `byte ${at}`).toBe(false);
        expect(
          CompositeSig.verify(v.publicKey, message, flipped(v.signatureWithContext, at), context),
          `byte ${at}`,
        ).toBe(false);
      }
    });

    it('refuses the message with one byte flipped, cut or extended', () => {
      for (const at of [0, message.length >> 1, message.length - 1]) {
        expect(CompositeSig.verify(v.publicKey, flipped(message, at), v.signature, EMPTY), `byte ${at}`).toBe(false);
        expect(
          CompositeSig.verify(v.publicKey, flipped(message, at), v.signatureWithContext, context),
          `byte ${at}`,
        ).toBe(false);
      }
      expect(CompositeSig.verify(v.publicKey, message.subarray(1), v.signature, EMPTY)).toBe(false);
      expect(CompositeSig.verify(v.publicKey, Uint8Array.from([...message, 0]), v.signature, EMPTY)).toBe(false);
    });

    it('refuses the public key with one byte flipped (in each half)', () => {
      for (const at of positions(v.publicKey.length, 1312)) {
        expect(CompositeSig.verify(flipped(v.publicKey, at), message, v.signature, EMPTY), `byte ${at}`).toBe(false);
        expect(
          CompositeSig.verify(flipped(v.publicKey, at), message, v.signatureWithContext, context),
          `byte ${at}`,
        ).toBe(false);
      }
    });

    it('derives the public key from the private key; keygen from it is deterministic', () => {
      expect(CompositeSig.getPublicKey(v.secretKey)).toEqual(v.publicKey);
      const a = CompositeSig.keygen(v.secretKey);
      const b = CompositeSig.keygen(v.secretKey);
      expect(a.publicKey).toEqual(v.publicKey);
      expect(a.secretKey).toEqual(v.secretKey);
      expect(b).toEqual(a);
    });

    it('encodes the private key as ML-DSA-44 seed || Ed25519 seed, the public key and signature as ML-DSA || Ed25519', () => {
      const ml = ml_dsa44.keygen(v.secretKey.subarray(0, 32));
      expect(ml.publicKey).toEqual(v.publicKey.subarray(0, 1312));
      expect(ed25519.getPublicKey(v.secretKey.subarray(32))).toEqual(v.publicKey.subarray(1312));
      // Each component verifies M' alone, ML-DSA-44 with the label as its FIPS 204 context.
      const label = new TextEncoder().encode(CompositeSig.label);
      const mPrime = representative(message, context);
      const sig = v.signatureWithContext;
      expect(ml_dsa44.verify(sig.subarray(0, 2420), mPrime, v.publicKey.subarray(0, 1312), { context: label })).toBe(
        true,
      );
      expect(ed25519.verify(sig.subarray(2420), mPrime, v.publicKey.subarray(1312))).toBe(true);
    });

    it('carries the same 64 bytes in its PKCS #8 form, under id-MLDSA44-Ed25519-SHA512', () => {
      // OneAsymmetricKey: version 0, AlgorithmIdentifier { 1.3.6.1.5.5.7.6.39 }, OCTET STRING (64).
      const oid = Buffer.from('06082b06010505070627', 'hex');
      expect(Buffer.from(v.secretKeyPkcs8).includes(oid)).toBe(true);
      expect(v.secretKeyPkcs8.subarray(-66, -64)).toEqual(Uint8Array.from([0x04, 0x40]));
      expect(v.secretKeyPkcs8.subarray(-64)).toEqual(v.secretKey);
    });

    it('verifies the self-signature of its certificate (x5c) with an empty context', async () => {
      const { X509Certificate } = await import('@peculiar/x509');
      const cert = new X509Certificate(v.certificate);
      expect(cert.signatureAlgorithm).toBeDefined();
      expect(new Uint8Array(cert.publicKey.rawData).subarray(-1344)).toEqual(v.publicKey);
      // tbsCertificate is the first element of the outer SEQUENCE.
      const tbs = firstElement(v.certificate);
      expect(CompositeSig.verify(v.publicKey, tbs, new Uint8Array(cert.signature), EMPTY)).toBe(true);
      expect(
        CompositeSig.verify(v.publicKey, flipped(tbs, tbs.length - 1), new Uint8Array(cert.signature), EMPTY),
      ).toBe(false);
    });
  });
});

/** The first element inside a DER SEQUENCE (definite lengths only). */
function firstElement(der: Uint8Array): Uint8Array {
  const header = (at: number): { len: number; size: number } => {
    const first = der[at + 1]!;
    if (first < 0x80) return { len: first, size: 2 };
    const n = first & 0x7f;
    let len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + der[at + 2 + i]!;
    return { len, size: 2 + n };
  };
  const outer = header(0);
  const inner = header(outer.size);
  return der.subarray(outer.size, outer.size + inner.size + inner.len);
}

describe('CompositeSig round trips', () => {
  it('signs and verifies with random keys, contexts as strings and bytes', () => {
    const r = rng(0x5eed);
    for (let i = 0; i < 4; i++) {
      const { publicKey, secretKey } = CompositeSig.keygen();
      expect(publicKey.length).toBe(1344);
      expect(secretKey.length).toBe(64);
      const m = randomBytes(r, r() % 300);
      for (const ctx of ['', SPERLI_JOIN_CONTEXT, SPERLI_COMMIT_CONTEXT, randomBytes(r, 255), 'ünïcödé']) {
        const sig = CompositeSig.sign(secretKey, m, ctx);
        expect(sig.length).toBe(2484);
        expect(CompositeSig.verify(publicKey, m, sig, ctx)).toBe(true);
      }
      const sig = CompositeSig.sign(secretKey, m, SPERLI_JOIN_CONTEXT);
      expect(CompositeSig.verify(publicKey, m, sig, SPERLI_COMMIT_CONTEXT)).toBe(false);
      expect(CompositeSig.verify(CompositeSig.keygen().publicKey, m, sig, SPERLI_JOIN_CONTEXT)).toBe(false);
    }
  });

  it('needs both halves: a signature spliced from two messages does not verify', () => {
    const { publicKey, secretKey } = CompositeSig.keygen();
    const a = new TextEncoder().encode('message a');
    const b = new TextEncoder().encode('message b');
    const sa = CompositeSig.sign(secretKey, a, 'x');
    const sb = CompositeSig.sign(secretKey, b, 'x');
    const mlFromA = Uint8Array.from([...sa.subarray(0, 2420), ...sb.subarray(2420)]);
    const edFromA = Uint8Array.from([...sb.subarray(0, 2420), ...sa.subarray(2420)]);
    expect(CompositeSig.verify(publicKey, a, mlFromA, 'x')).toBe(false);
    expect(CompositeSig.verify(publicKey, a, edFromA, 'x')).toBe(false);
    expect(CompositeSig.verify(publicKey, a, new Uint8Array(2484), 'x')).toBe(false);
    expect(CompositeSig.verify(publicKey, a, new Uint8Array(2484).fill(0xff), 'x')).toBe(false);
  });

  it('keygen from a seed is deterministic and the secret key is the seed', () => {
    const seed = Uint8Array.from({ length: 64 }, (_, i) => i);
    const a = CompositeSig.keygen(seed);
    expect(a).toEqual(CompositeSig.keygen(seed));
    expect(a.secretKey).toEqual(seed);
    expect(a.secretKey).not.toBe(seed);
    expect(CompositeSig.keygen(flipped(seed, 0)).publicKey.subarray(0, 1312)).not.toEqual(
      a.publicKey.subarray(0, 1312),
    );
    expect(CompositeSig.keygen(flipped(seed, 0)).publicKey.subarray(1312)).toEqual(a.publicKey.subarray(1312));
    expect(CompositeSig.keygen(flipped(seed, 63)).publicKey.subarray(1312)).not.toEqual(a.publicKey.subarray(1312));
  });
});

describe('CompositeSig refusals', () => {
  const { publicKey, secretKey } = CompositeSig.keygen(new Uint8Array(64).fill(7));
  const m = new Uint8Array([1, 2, 3]);
  const sig = CompositeSig.sign(secretKey, m, '');

  it('refuses keys of the wrong size with PLX_CRYPTO_BAD_KEY', () => {
    for (const n of [0, 32, 63, 65, 1344]) {
      expect(codeOf(() => CompositeSig.keygen(new Uint8Array(n)))).toBe('PLX_CRYPTO_BAD_KEY');
      expect(codeOf(() => CompositeSig.sign(new Uint8Array(n), m, ''))).toBe('PLX_CRYPTO_BAD_KEY');
    }
    for (const n of [0, 64, 1312, 1343, 1345]) {
      expect(codeOf(() => CompositeSig.verify(new Uint8Array(n), m, sig, ''))).toBe('PLX_CRYPTO_BAD_KEY');
    }
    expect(codeOf(() => CompositeSig.sign('k' as unknown as Uint8Array, m, ''))).toBe('PLX_CRYPTO_BAD_KEY');
  });

  it('refuses signatures of the wrong size with PLX_CRYPTO_BAD_SIGNATURE', () => {
    for (const n of [0, 64, 2420, 2483, 2485]) {
      expect(codeOf(() => CompositeSig.verify(publicKey, m, new Uint8Array(n), ''))).toBe('PLX_CRYPTO_BAD_SIGNATURE');
    }
  });

  it('refuses a context over 255 bytes with PLX_CRYPTO_BAD_CONTEXT, and takes 255', () => {
    expect(codeOf(() => CompositeSig.sign(secretKey, m, new Uint8Array(256)))).toBe('PLX_CRYPTO_BAD_CONTEXT');
    expect(codeOf(() => CompositeSig.sign(secretKey, m, 'x'.repeat(256)))).toBe('PLX_CRYPTO_BAD_CONTEXT');
    // 128 two-byte characters: 128 characters but 256 bytes of UTF-8.
    expect(codeOf(() => CompositeSig.sign(secretKey, m, 'é'.repeat(128)))).toBe('PLX_CRYPTO_BAD_CONTEXT');
    expect(codeOf(() => CompositeSig.verify(publicKey, m, sig, new Uint8Array(256)))).toBe('PLX_CRYPTO_BAD_CONTEXT');
    expect(codeOf(() => CompositeSig.verify(publicKey, m, sig, 7 as unknown as string))).toBe('PLX_CRYPTO_BAD_CONTEXT');
    const s255 = CompositeSig.sign(secretKey, m, 'x'.repeat(255));
    expect(CompositeSig.verify(publicKey, m, s255, 'x'.repeat(255))).toBe(true);
  });

  it('refuses a message that is not bytes with PLX_CRYPTO_BAD_INPUT', () => {
    expect(codeOf(() => CompositeSig.sign(secretKey, 'text' as unknown as Uint8Array, ''))).toBe(
      'PLX_CRYPTO_BAD_INPUT',
    );
    expect(codeOf(() => CompositeSig.verify(publicKey, 'text' as unknown as Uint8Array, sig, ''))).toBe(
      'PLX_CRYPTO_BAD_INPUT',
    );
  });

  it('returns false, never throws, for right-sized garbage', () => {
    const r = rng(99);
    for (let i = 0; i < 8; i++) {
      expect(CompositeSig.verify(randomBytes(r, 1344), m, randomBytes(r, 2484), '')).toBe(false);
      expect(CompositeSig.verify(publicKey, m, randomBytes(r, 2484), '')).toBe(false);
    }
    expect(CompositeSig.verify(new Uint8Array(1344).fill(0xff), m, sig, '')).toBe(false);
  });

  it('names its label and sizes', () => {
    expect(CompositeSig.label).toBe('COMPSIG-MLDSA44-Ed25519-SHA512');
    expect(CompositeSig.prefix).toBe('CompositeAlgorithmSignatures2025');
    expect(CompositeSig.lengths).toMatchObject({ publicKey: 1344, secretKey: 64, signature: 2484, maxContext: 255 });
    expect(SPERLI_JOIN_CONTEXT).toBe('SPERLI-JOIN-1');
    expect(SPERLI_COMMIT_CONTEXT).toBe('SPERLI-COMMIT-1');
  });
});
