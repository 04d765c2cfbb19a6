/**
 * from_prior (DIDComm v2 §"DID Rotation"): a compact JWT signed by a key of the prior DID
 * (`iss`), naming the new DID (`sub`). Verified against the issuer's `authentication` keys.
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import { PlexusError } from '../../core/errors.js';
import { b64uDecode, b64uDecodeText, b64uEncode } from '../did/base64url.js';
import { didOf } from '../did/did-url.js';
import { keyFor } from '../did/doc-keys.js';
import type { DidDocumentSource } from '../did/types.js';
import type { KeyManager } from '../keys/types.js';
import { parseObject } from './json.js';

export interface FromPrior {
  iss: string;
  sub: string;
  iat?: number;
}

const te = new TextEncoder();

function bad(message: string): PlexusError {
  return new PlexusError('PLX_DIDCOMM_BAD_FROM_PRIOR', message, {});
}

export async function packFromPrior(claims: FromPrior, issuerKid: string, keys: KeyManager): Promise<string> {
  if (didOf(issuerKid) !== claims.iss) throw bad('the from_prior issuer key must belong to iss');
  const h = b64uEncode(te.encode(JSON.stringify({ alg: 'EdDSA', typ: 'JWT', kid: issuerKid })));
  const p = b64uEncode(te.encode(JSON.stringify(claims)));
  const sig = await keys.sign(issuerKid, te.encode(`${h}.${p}`));
  return `${h}.${p}.${b64uEncode(sig)}`;
}

export async function verifyFromPrior(
  jwt: string,
  resolver: DidDocumentSource,
  maxLength: number,
): Promise<{ claims: FromPrior; issuerKid: string }> {
  if (jwt.length > maxLength) throw bad('from_prior is too long');
  const parts = jwt.split('.');
  if (parts.length !== 3) throw bad('from_prior must be a compact JWS (three parts)');
  const [h, p, s] = parts as [string, string, string];
  const header = parseObject(b64uDecodeText(h, 'from_prior header'), 'from_prior header', maxLength);
  const claims = parseObject(b64uDecodeText(p, 'from_prior payload'), 'from_prior payload', maxLength);
  if (header.alg !== 'EdDSA' || typeof header.kid !== 'string') throw bad('from_prior must be EdDSA with a kid');
  if (typeof claims.iss !== 'string' || typeof claims.sub !== 'string' || claims.iss === claims.sub) {
    throw bad('from_prior needs distinct iss and sub DIDs');
  }
  if (didOf(header.kid) !== claims.iss) throw bad('from_prior kid does not belong to iss');
  const key = keyFor(await resolver.resolve(claims.iss), header.kid, 'authentication');
  const sig = b64uDecode(s, 'from_prior signature');
  let ok = false;
  try {
    ok =
      key.type === 'Ed25519' &&
      sig.length === 64 &&
      ed25519.verify(sig, te.encode(`${h}.${p}`), key.publicKey, { zip215: false });
  } catch {
    ok = false;
  }
  if (!ok) throw new PlexusError('PLX_DIDCOMM_BAD_SIGNATURE', 'the from_prior signature does not verify', {});
  const out: FromPrior = { iss: claims.iss, sub: claims.sub };
  if (typeof claims.iat === 'number') out.iat = claims.iat;
  return { claims: out, issuerKid: header.kid };
}
