/**
 * DIDComm v2 signing: a JWS in General JSON Serialization (RFC 7515 §7.2.1) with EdDSA over
 * Ed25519 (RFC 8037). Protected header {typ: application/didcomm-signed+json, alg: EdDSA}; the
 * signer's kid in the unprotected header. Signing input = ASCII(protected '.' payload).
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import { PlexusError } from '../../core/errors.js';
import { b64uDecode, b64uDecodeText, b64uEncode } from '../did/base64url.js';
import { didOf } from '../did/did-url.js';
import { keyFor } from '../did/doc-keys.js';
import type { DidDocumentSource } from '../did/types.js';
import type { KeyManager } from '../keys/types.js';
import { type JsonObject, obj, parseObject, str } from './json.js';
import type { DidCommLimits } from './limits.js';

export const TYP_SIGNED = 'application/didcomm-signed+json';
const te = new TextEncoder();

export interface Jws {
  payload: string;
  signatures: { protected: string; signature: string; header: { kid: string } }[];
}

export async function signJws(payload: Uint8Array, kid: string, keys: KeyManager): Promise<Jws> {
  const info = keys.info(kid);
  if (info?.type !== 'Ed25519')
    throw new PlexusError('PLX_KEYS_NOT_FOUND', `no Ed25519 signing key ${kid.slice(0, 120)} here`, {});
  const payloadB64 = b64uEncode(payload);
  const protectedB64 = b64uEncode(te.encode(JSON.stringify({ typ: TYP_SIGNED, alg: 'EdDSA' })));
  const sig = await keys.sign(kid, te.encode(`${protectedB64}.${payloadB64}`));
  return {
    payload: payloadB64,
    signatures: [{ protected: protectedB64, signature: b64uEncode(sig), header: { kid } }],
  };
}

/** Verifies every signature against the signer's `authentication` key; returns the payload and signer kids. */
export async function verifyJws(
  o: JsonObject,
  resolver: DidDocumentSource,
  limits: DidCommLimits,
): Promise<{ payload: Uint8Array; kids: string[] }> {
  const payloadB64 = str(o, 'payload', 'JWS', limits.maxEnvelopeBytes);
  const sigs = o.signatures;
  if (!Array.isArray(sigs) || sigs.length === 0) {
    throw new PlexusError('PLX_DIDCOMM_MALFORMED', 'JWS signatures must be a non-empty array', {});
  }
  if (sigs.length > limits.maxSignatures) {
    throw new PlexusError('PLX_DIDCOMM_TOO_LARGE', `JWS has more than ${limits.maxSignatures} signatures`, {});
  }
  const kids: string[] = [];
  for (const s of sigs as unknown[]) {
    if (s === null || typeof s !== 'object' || Array.isArray(s)) {
      throw new PlexusError('PLX_DIDCOMM_MALFORMED', 'a JWS signature must be an object', {});
    }
    const so = s as JsonObject;
    const protectedB64 = str(so, 'protected', 'JWS signature', limits.maxProtectedLength);
    const header = parseObject(
      b64uDecodeText(protectedB64, 'JWS protected'),
      'JWS protected header',
      limits.maxProtectedLength,
    );
    if (header.alg !== 'EdDSA') {
      throw new PlexusError(
        'PLX_DIDCOMM_UNSUPPORTED_ALG',
        `JWS alg ${String(header.alg).slice(0, 40)} is not EdDSA`,
        {},
      );
    }
    if (header.typ !== undefined && header.typ !== TYP_SIGNED) {
      throw new PlexusError('PLX_DIDCOMM_MALFORMED', `JWS typ must be ${TYP_SIGNED}`, {});
    }
    const kid =
      typeof header.kid === 'string'
        ? header.kid
        : str(obj(so, 'header', 'JWS signature'), 'kid', 'JWS header', limits.maxKidLength);
    const sig = b64uDecode(str(so, 'signature', 'JWS signature', 128), 'JWS signature');
    const doc = await resolver.resolve(didOf(kid));
    const key = keyFor(doc, kid, 'authentication');
    if (key.type !== 'Ed25519') throw new PlexusError('PLX_DIDCOMM_UNSUPPORTED_ALG', 'EdDSA needs an Ed25519 key', {});
    let ok = false;
    try {
      ok =
        sig.length === 64 &&
        ed25519.verify(sig, te.encode(`${protectedB64}.${payloadB64}`), key.publicKey, { zip215: false });
    } catch {
      ok = false;
    }
    if (!ok) {
      throw new PlexusError(
        'PLX_DIDCOMM_BAD_SIGNATURE',
        `the signature by ${kid.slice(0, 120)} does not verify: the message was altered`,
        {},
      );
    }
    kids.push(kid);
  }
  return { payload: b64uDecode(payloadB64, 'JWS payload'), kids };
}
