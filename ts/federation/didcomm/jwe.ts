/**
 * DIDComm v2 encryption: a JWE in General JSON Serialization (RFC 7516 §7.2) with X25519 keys.
 * - anoncrypt: ECDH-ES+A256KW (RFC 7518 §4.6), content A256CBC-HS512, A256GCM or XC20P;
 * - authcrypt: ECDH-1PU+A256KW (draft-madden-jose-ecdh-1pu-04), content A256CBC-HS512 only.
 * One ephemeral key for all recipients; per recipient KEK = ConcatKDF(Z), Z = ECDH(epk, recipient)
 * [‖ ECDH(sender, recipient) for 1PU]; the CEK is wrapped with AES key wrap (RFC 3394).
 * Headers as the DIDComm v2 specification has them: `apv` = b64url(SHA-256(sorted recipient kids
 * joined by '.')), and for authcrypt `skid` and `apu` = b64url(skid). AAD = ASCII(protected).
 */
import { aeskw } from '@noble/ciphers/aes.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { randomBytes } from '@noble/hashes/utils.js';
import { PlexusError } from '../../core/errors.js';
import { b64uDecode, b64uDecodeText, b64uEncode } from '../did/base64url.js';
import type { PublicKeyInfo } from '../did/doc-keys.js';
import type { KeyManager } from '../keys/types.js';
import { x25519Backend } from '../keys/x25519-backend.js';
import { CONTENT_ENCRYPTIONS, type ContentEncryption, decryptContent, encryptContent, SIZES } from './content.js';
import { type JsonObject, obj, parseObject, str } from './json.js';
import { concatKdf256 } from './kdf.js';
import type { DidCommLimits } from './limits.js';

export const TYP_ENCRYPTED = 'application/didcomm-encrypted+json';
export type KeyAgreementAlg = 'ECDH-ES+A256KW' | 'ECDH-1PU+A256KW';

export interface Jwe {
  protected: string;
  recipients: { header: { kid: string }; encrypted_key: string }[];
  iv: string;
  ciphertext: string;
  tag: string;
}

const te = new TextEncoder();

export function apvOf(kids: string[]): Uint8Array {
  return sha256(te.encode([...kids].sort().join('.')));
}

function malformed(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_DIDCOMM_MALFORMED', message, details);
}

export interface EncryptInput {
  plaintext: Uint8Array;
  recipients: PublicKeyInfo[];
  enc: ContentEncryption;
  /** Present for authcrypt: the sender's X25519 key held by `keys`. */
  sender?: { kid: string; keys: KeyManager };
}

export async function encryptJwe(input: EncryptInput): Promise<Jwe> {
  const { recipients, enc, sender } = input;
  if (recipients.length === 0)
    throw new PlexusError('PLX_DIDCOMM_NO_RECIPIENT', 'no recipient X25519 key to encrypt to', {});
  const alg: KeyAgreementAlg = sender ? 'ECDH-1PU+A256KW' : 'ECDH-ES+A256KW';
  if (sender && enc !== 'A256CBC-HS512') {
    throw new PlexusError('PLX_DIDCOMM_UNSUPPORTED_ALG', 'authcrypt (ECDH-1PU+A256KW) uses A256CBC-HS512 only', {
      enc,
    });
  }
  const kids = recipients.map((r) => r.kid);
  const apv = apvOf(kids);
  const x = x25519Backend();
  const eph = x.generate();
  const header: JsonObject = {
    typ: TYP_ENCRYPTED,
    alg,
    enc,
    apv: b64uEncode(apv),
    epk: { kty: 'OKP', crv: 'X25519', x: b64uEncode(eph.publicKey) },
  };
  let apu: Uint8Array = new Uint8Array(0);
  if (sender) {
    apu = te.encode(sender.kid);
    header.skid = sender.kid;
    header.apu = b64uEncode(apu);
  }
  const protectedB64 = b64uEncode(te.encode(JSON.stringify(header)));
  const s = SIZES[enc];
  const cek = randomBytes(s.cek);
  const iv = randomBytes(s.iv);
  const { ciphertext, tag } = encryptContent(enc, cek, iv, te.encode(protectedB64), input.plaintext);
  const out: Jwe['recipients'] = [];
  for (const r of recipients) {
    if (r.type !== 'X25519') throw new PlexusError('PLX_DIDCOMM_NO_RECIPIENT', `${r.kid} is not an X25519 key`, {});
    let z = x.sharedSecret(eph.secretKey, r.publicKey);
    if (sender) {
      const zs = await sender.keys.ecdh(sender.kid, r.publicKey);
      const both = new Uint8Array(64);
      both.set(z, 0);
      both.set(zs, 32);
      z = both;
    }
    const kek = concatKdf256(z, alg, apu, apv, sender ? tag : undefined);
    out.push({ header: { kid: r.kid }, encrypted_key: b64uEncode(aeskw(kek).encrypt(cek)) });
  }
  return {
    protected: protectedB64,
    recipients: out,
    iv: b64uEncode(iv),
    ciphertext: b64uEncode(ciphertext),
    tag: b64uEncode(tag),
  };
}

/** A JWE checked for shape and sizes, its header decoded; nothing decrypted yet. */
export interface ParsedJwe {
  alg: KeyAgreementAlg;
  enc: ContentEncryption;
  skid?: string;
  apu: Uint8Array;
  apv: Uint8Array;
  epk: Uint8Array;
  kids: string[];
  encryptedKeys: Uint8Array[];
  aad: Uint8Array;
  iv: Uint8Array;
  ciphertext: Uint8Array;
  tag: Uint8Array;
}

export function parseJwe(o: JsonObject, limits: DidCommLimits): ParsedJwe {
  if ('aad' in o || 'unprotected' in o) throw malformed('DIDComm JWEs carry neither aad nor an unprotected header');
  const protectedB64 = str(o, 'protected', 'JWE', limits.maxProtectedLength);
  const header = parseObject(
    b64uDecodeText(protectedB64, 'JWE protected'),
    'JWE protected header',
    limits.maxProtectedLength,
  );
  const alg = header.alg;
  const enc = header.enc;
  if (alg !== 'ECDH-ES+A256KW' && alg !== 'ECDH-1PU+A256KW') {
    throw new PlexusError(
      'PLX_DIDCOMM_UNSUPPORTED_ALG',
      `JWE alg ${String(alg).slice(0, 40)} is not ECDH-ES+A256KW or ECDH-1PU+A256KW`,
      {},
    );
  }
  if (!CONTENT_ENCRYPTIONS.includes(enc as ContentEncryption)) {
    throw new PlexusError(
      'PLX_DIDCOMM_UNSUPPORTED_ALG',
      `JWE enc ${String(enc).slice(0, 40)} is not A256CBC-HS512, A256GCM or XC20P`,
      {},
    );
  }
  if (alg === 'ECDH-1PU+A256KW' && enc !== 'A256CBC-HS512') {
    throw new PlexusError('PLX_DIDCOMM_UNSUPPORTED_ALG', 'authcrypt (ECDH-1PU+A256KW) requires A256CBC-HS512', {});
  }
  if (header.typ !== undefined && header.typ !== TYP_ENCRYPTED) {
    throw malformed(`JWE typ must be ${TYP_ENCRYPTED}`);
  }
  const epkJ = obj(header, 'epk', 'JWE header');
  if (epkJ.kty !== 'OKP' || epkJ.crv !== 'X25519') {
    throw new PlexusError('PLX_DIDCOMM_UNSUPPORTED_ALG', 'JWE epk must be an OKP X25519 key', {});
  }
  const epk = b64uDecode(str(epkJ, 'x', 'epk', 64), 'epk.x');
  if (epk.length !== 32) throw malformed('JWE epk.x must be 32 bytes');
  const apv = b64uDecode(str(header, 'apv', 'JWE header', 64), 'apv');
  let skid: string | undefined;
  let apu: Uint8Array = new Uint8Array(0);
  if (alg === 'ECDH-1PU+A256KW') {
    skid = str(header, 'skid', 'JWE header', limits.maxKidLength);
    apu = b64uDecode(str(header, 'apu', 'JWE header', limits.maxKidLength * 2), 'apu');
    if (b64uEncode(apu) !== b64uEncode(te.encode(skid))) throw malformed('JWE apu must be base64url of skid');
  } else if (header.apu !== undefined) {
    apu = b64uDecode(str(header, 'apu', 'JWE header', limits.maxKidLength * 2), 'apu');
  }
  const rs = o.recipients;
  if (!Array.isArray(rs) || rs.length === 0) throw malformed('JWE recipients must be a non-empty array');
  if (rs.length > limits.maxRecipients) {
    throw new PlexusError(
      'PLX_DIDCOMM_TOO_LARGE',
      `JWE has ${rs.length} recipients, more than ${limits.maxRecipients}`,
      {
        limit: limits.maxRecipients,
      },
    );
  }
  const kids: string[] = [];
  const encryptedKeys: Uint8Array[] = [];
  const wrapped = SIZES[enc as ContentEncryption].cek + 8;
  for (const r of rs as unknown[]) {
    if (r === null || typeof r !== 'object' || Array.isArray(r)) throw malformed('a JWE recipient must be an object');
    const h = obj(r as JsonObject, 'header', 'JWE recipient');
    kids.push(str(h, 'kid', 'JWE recipient header', limits.maxKidLength));
    const ek = b64uDecode(str(r as JsonObject, 'encrypted_key', 'JWE recipient', 128), 'encrypted_key');
    if (ek.length !== wrapped) throw malformed(`JWE encrypted_key must be ${wrapped} bytes for ${String(enc)}`);
    encryptedKeys.push(ek);
  }
  if (b64uEncode(apvOf(kids)) !== b64uEncode(apv)) {
    throw malformed('JWE apv does not match the recipients (SHA-256 of the sorted kids joined by ".")');
  }
  const s = SIZES[enc as ContentEncryption];
  const iv = b64uDecode(str(o, 'iv', 'JWE', 64), 'iv');
  const tag = b64uDecode(str(o, 'tag', 'JWE', 64), 'tag');
  if (iv.length !== s.iv || tag.length !== s.tag) throw malformed(`JWE iv/tag lengths do not fit ${String(enc)}`);
  const ciphertext = b64uDecode(str(o, 'ciphertext', 'JWE', limits.maxEnvelopeBytes), 'ciphertext');
  const out: ParsedJwe = {
    alg,
    enc: enc as ContentEncryption,
    apu,
    apv,
    epk,
    kids,
    encryptedKeys,
    aad: te.encode(protectedB64),
    iv,
    ciphertext,
    tag,
  };
  if (skid !== undefined) out.skid = skid;
  return out;
}

/** Decrypts for one recipient index with a key the manager holds. */
export async function decryptJweFor(
  jwe: ParsedJwe,
  index: number,
  keys: KeyManager,
  senderPublicKey?: Uint8Array,
): Promise<Uint8Array> {
  const kid = jwe.kids[index]!;
  let z = await keys.ecdh(kid, jwe.epk);
  if (jwe.alg === 'ECDH-1PU+A256KW') {
    if (!senderPublicKey) throw new PlexusError('PLX_DIDCOMM_SENDER_KEY', 'authcrypt needs the sender key', {});
    const zs = await keys.ecdh(kid, senderPublicKey);
    const both = new Uint8Array(64);
    both.set(z, 0);
    both.set(zs, 32);
    z = both;
  }
  const kek = concatKdf256(z, jwe.alg, jwe.apu, jwe.apv, jwe.alg === 'ECDH-1PU+A256KW' ? jwe.tag : undefined);
  let cek: Uint8Array;
  try {
    cek = aeskw(kek).decrypt(jwe.encryptedKeys[index]!);
  } catch (e) {
    throw new PlexusError(
      'PLX_DIDCOMM_DECRYPT_FAILED',
      `the content key for ${kid.slice(0, 120)} does not unwrap: altered, or not for this key`,
      {},
      { cause: e },
    );
  }
  return decryptContent(jwe.enc, cek, jwe.iv, jwe.aad, jwe.ciphertext, jwe.tag);
}
