/**
 * CompositeSig: the composite signature ML-DSA-44 + Ed25519 with SHA-512 of the IETF LAMPS
 * draft "Composite ML-DSA for use in X.509 PKI and CMS" (draft-ietf-lamps-pq-composite-sigs,
 * the construction of -14 onwards; id-MLDSA44-Ed25519-SHA512, OID 1.3.6.1.5.5.7.6.39).
 *
 * Only composition lives here: ML-DSA-44 (FIPS 204) comes from `@noble/post-quantum`, Ed25519
 * (RFC 8032) from `@noble/curves`, SHA-512 from `@noble/hashes`. docs/crypto.md describes the
 * encodings and the message representative.
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import { sha512 } from '@noble/hashes/sha2.js';
import { randomBytes } from '@noble/hashes/utils.js';
import { ml_dsa44 } from '@noble/post-quantum/ml-dsa.js';
import { type PlexusCode, PlexusError } from '../core/errors.js';

const _utf8 = new TextEncoder();

/** The signature label of id-MLDSA44-Ed25519-SHA512; also ML-DSA-44's FIPS 204 context. */
const LABEL = 'COMPSIG-MLDSA44-Ed25519-SHA512';
/** The prefix of every message representative (draft -14 onwards, "Prefix"). */
const PREFIX = 'CompositeAlgorithmSignatures2025';
const LABEL_BYTES = _utf8.encode(LABEL);
const PREFIX_BYTES = _utf8.encode(PREFIX);

/** ML-DSA-44 sizes (FIPS 204, Table 2) and Ed25519 sizes (RFC 8032 §5.1). */
const MLDSA_PK = 1312;
const MLDSA_SIG = 2420;
const MLDSA_SEED = 32;
const ED_PK = 32;
const ED_SIG = 64;
const ED_SEED = 32;

const PUBLIC_KEY_LENGTH = MLDSA_PK + ED_PK; // 1344
const SECRET_KEY_LENGTH = MLDSA_SEED + ED_SEED; // 64
const SIGNATURE_LENGTH = MLDSA_SIG + ED_SIG; // 2484
const MAX_CONTEXT_LENGTH = 255;

/** A CompositeSig key pair: public key 1344 bytes, secret key 64 bytes. */
export interface CompositeKeyPair {
  publicKey: Uint8Array;
  secretKey: Uint8Array;
}

/** An application context: a string (encoded as UTF-8) or bytes, at most 255 bytes. */
export type CompositeContext = string | Uint8Array;

function _isBytes(x: unknown): x is Uint8Array {
  return x instanceof Uint8Array;
}

function _bytesArg(x: unknown, what: string, length: number, code: PlexusCode): Uint8Array {
  if (_isBytes(x) && x.length === length) return x;
  const got = _isBytes(x) ? `${x.length} bytes` : typeof x;
  throw new PlexusError(code, `CompositeSig: the ${what} must be ${length} bytes, got ${got}`, {
    what,
    expected: length,
    actual: _isBytes(x) ? x.length : null,
  });
}

function _messageArg(message: unknown): Uint8Array {
  if (_isBytes(message)) return message;
  throw new PlexusError(
    'PLX_CRYPTO_BAD_INPUT',
    `CompositeSig: the message must be a Uint8Array, got ${typeof message}; encode text first (TextEncoder)`,
    { what: 'message' },
  );
}

function _contextArg(context: unknown): Uint8Array {
  let bytes: Uint8Array;
  if (typeof context === 'string') bytes = _utf8.encode(context);
  else if (_isBytes(context)) bytes = context;
  else {
    throw new PlexusError(
      'PLX_CRYPTO_BAD_CONTEXT',
      `CompositeSig: the context must be a string or a Uint8Array, got ${typeof context}`,
      { actual: null },
    );
  }
  if (bytes.length > MAX_CONTEXT_LENGTH) {
    throw new PlexusError(
      'PLX_CRYPTO_BAD_CONTEXT',
      `CompositeSig: the context is ${bytes.length} bytes; at most ${MAX_CONTEXT_LENGTH} are allowed`,
      { actual: bytes.length, max: MAX_CONTEXT_LENGTH },
    );
  }
  return bytes;
}

/**
 * The message representative M' = Prefix ‖ Label ‖ len(ctx) (one byte) ‖ ctx ‖ SHA-512(M)
 * (draft-ietf-lamps-pq-composite-sigs, "Composite-ML-DSA.Sign", step 1, -14 onwards).
 */
function _representative(message: Uint8Array, context: Uint8Array): Uint8Array {
  const digest = sha512(message);
  const out = new Uint8Array(PREFIX_BYTES.length + LABEL_BYTES.length + 1 + context.length + digest.length);
  let at = 0;
  out.set(PREFIX_BYTES, at);
  at += PREFIX_BYTES.length;
  out.set(LABEL_BYTES, at);
  at += LABEL_BYTES.length;
  out[at++] = context.length;
  out.set(context, at);
  at += context.length;
  out.set(digest, at);
  return out;
}

function keygen(seed?: Uint8Array): CompositeKeyPair {
  const secretKey =
    seed === undefined
      ? randomBytes(SECRET_KEY_LENGTH)
      : Uint8Array.from(_bytesArg(seed, 'seed', SECRET_KEY_LENGTH, 'PLX_CRYPTO_BAD_KEY'));
  return { publicKey: getPublicKey(secretKey), secretKey };
}

function getPublicKey(secretKey: Uint8Array): Uint8Array {
  const sk = _bytesArg(secretKey, 'secret key', SECRET_KEY_LENGTH, 'PLX_CRYPTO_BAD_KEY');
  const ml = ml_dsa44.keygen(sk.subarray(0, MLDSA_SEED));
  ml.secretKey.fill(0);
  const publicKey = new Uint8Array(PUBLIC_KEY_LENGTH);
  publicKey.set(ml.publicKey, 0);
  publicKey.set(ed25519.getPublicKey(sk.subarray(MLDSA_SEED)), MLDSA_PK);
  return publicKey;
}

function sign(secretKey: Uint8Array, message: Uint8Array, context: CompositeContext): Uint8Array {
  const sk = _bytesArg(secretKey, 'secret key', SECRET_KEY_LENGTH, 'PLX_CRYPTO_BAD_KEY');
  const m = _messageArg(message);
  const ctx = _contextArg(context);
  const mPrime = _representative(m, ctx);
  const ml = ml_dsa44.keygen(sk.subarray(0, MLDSA_SEED));
  try {
    const signature = new Uint8Array(SIGNATURE_LENGTH);
    signature.set(ml_dsa44.sign(mPrime, ml.secretKey, { context: LABEL_BYTES }), 0);
    signature.set(ed25519.sign(mPrime, sk.subarray(MLDSA_SEED)), MLDSA_SIG);
    return signature;
  } finally {
    ml.secretKey.fill(0);
  }
}

function verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array, context: CompositeContext): boolean {
  const pk = _bytesArg(publicKey, 'public key', PUBLIC_KEY_LENGTH, 'PLX_CRYPTO_BAD_KEY');
  const sig = _bytesArg(signature, 'signature', SIGNATURE_LENGTH, 'PLX_CRYPTO_BAD_SIGNATURE');
  const m = _messageArg(message);
  const ctx = _contextArg(context);
  const mPrime = _representative(m, ctx);
  try {
    // Both components must hold; a malformed component is a signature that does not hold.
    const mlOk = ml_dsa44.verify(sig.subarray(0, MLDSA_SIG), mPrime, pk.subarray(0, MLDSA_PK), {
      context: LABEL_BYTES,
    });
    const edOk = ed25519.verify(sig.subarray(MLDSA_SIG), mPrime, pk.subarray(MLDSA_PK), { zip215: false });
    return mlOk && edOk;
  } catch {
    return false;
  }
}

/**
 * CompositeSig ML-DSA-44 + Ed25519 + SHA-512.
 *
 * - `keygen(seed?)`: a key pair; the secret key is the 64-byte seed (ML-DSA-44 seed ‖ Ed25519
 *   seed), so `keygen(secretKey)` gives the same pair again.
 * - `sign(secretKey, message, context)`: a 2484-byte signature (ML-DSA-44 ‖ Ed25519).
 * - `verify(publicKey, message, signature, context)`: true only when both components hold;
 *   false (never a throw) for a signature that does not hold.
 *
 * Keys and signatures of the wrong size are refused with `PLX_CRYPTO_BAD_KEY` and
 * `PLX_CRYPTO_BAD_SIGNATURE`, a context above 255 bytes with `PLX_CRYPTO_BAD_CONTEXT`.
 */
export const CompositeSig = Object.freeze({
  /** The composite label, also the FIPS 204 context of the ML-DSA-44 component. */
  label: LABEL,
  /** The prefix of the message representative. */
  prefix: PREFIX,
  /** id-MLDSA44-Ed25519-SHA512. */
  oid: '1.3.6.1.5.5.7.6.39',
  lengths: Object.freeze({
    publicKey: PUBLIC_KEY_LENGTH,
    secretKey: SECRET_KEY_LENGTH,
    signature: SIGNATURE_LENGTH,
    seed: SECRET_KEY_LENGTH,
    maxContext: MAX_CONTEXT_LENGTH,
  }),
  keygen,
  getPublicKey,
  sign,
  verify,
});

/** The contexts SPERLI signs under (docs/crypto.md). */
export const SPERLI_JOIN_CONTEXT = 'SPERLI-JOIN-1';
export const SPERLI_COMMIT_CONTEXT = 'SPERLI-COMMIT-1';
