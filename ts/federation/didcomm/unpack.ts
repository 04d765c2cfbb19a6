/**
 * Unpacking any DIDComm v2 envelope: the kind of each layer is detected (JWE, JWS, plaintext),
 * layers are opened outside in (anoncrypt, authcrypt, signed, plaintext, in that order, each at
 * most once), and the result says what was proven. Every refusal is a PlexusError; a layer that
 * cannot be decrypted is also recorded with the UndecryptableRecorder.
 */

import { TextDecoder } from 'node:util';
import { type Clock, systemClock } from '../../core/clock.js';
import { PlexusError } from '../../core/errors.js';
import { clip, didOf } from '../did/did-url.js';
import { keyFor } from '../did/doc-keys.js';
import type { DidDocumentSource } from '../did/types.js';
import type { KeyManager } from '../keys/types.js';
import type { ContentEncryption } from './content.js';
import { type FromPrior, verifyFromPrior } from './from-prior.js';
import { type JsonObject, parseObject } from './json.js';
import { decryptJweFor, type ParsedJwe, parseJwe } from './jwe.js';
import { verifyJws } from './jws.js';
import { type DidCommLimits, withLimits } from './limits.js';
import { type DidCommMessage, validateMessage } from './message.js';
import { describeEnvelope, type UndecryptableRecorder } from './undecryptable.js';

export interface UnpackContext {
  resolver: DidDocumentSource;
  keys: KeyManager;
  limits?: Partial<DidCommLimits>;
  recorder?: UndecryptableRecorder;
  /** Time of the undecryptable records (default the system clock). */
  clock?: Clock;
}

export interface UnpackMetadata {
  encrypted: boolean;
  /** The sender is proven by authcrypt or a signature. */
  authenticated: boolean;
  /** A signature a third party can verify. */
  nonRepudiation: boolean;
  /**
   * The outermost layer is anoncrypt, so relays cannot see who sent it: anoncrypt alone, or
   * authcrypt wrapped in anoncrypt (protected sender). Whether the recipient knows the sender
   * is `authenticated`.
   */
  anonymousSender: boolean;
  /** The sender key of authcrypt (skid). */
  encryptedFromKid?: string;
  /** The recipient kids the envelope was encrypted to (innermost encryption). */
  encryptedToKids?: string[];
  /** The kid of ours that decrypted the innermost encryption. */
  recipientKid?: string;
  encAlgAnon?: `ECDH-ES+A256KW/${ContentEncryption}`;
  encAlgAuth?: 'ECDH-1PU+A256KW/A256CBC-HS512';
  signFrom?: string;
  signAlg?: 'EdDSA';
  /** The JWS text, kept as proof when signed. */
  signedMessage?: string;
  fromPrior?: FromPrior;
  fromPriorIssuerKid?: string;
}

export interface Unpacked {
  message: DidCommMessage;
  metadata: UnpackMetadata;
}

async function openJwe(jwe: ParsedJwe, ctx: UnpackContext): Promise<{ plaintext: Uint8Array; recipientKid: string }> {
  let senderKey: Uint8Array | undefined;
  if (jwe.alg === 'ECDH-1PU+A256KW') {
    const skid = jwe.skid!;
    const k = keyFor(await ctx.resolver.resolve(didOf(skid)), skid, 'keyAgreement');
    if (k.type !== 'X25519')
      throw new PlexusError('PLX_DIDCOMM_SENDER_KEY', `sender key ${clip(skid)} is not X25519`, {});
    senderKey = k.publicKey;
  }
  const held: number[] = [];
  for (let i = 0; i < jwe.kids.length; i++) if (ctx.keys.info(jwe.kids[i]!)?.type === 'X25519') held.push(i);
  if (held.length === 0) {
    throw new PlexusError('PLX_DIDCOMM_NO_KEY', 'none of the recipient keys of this message is held here', {
      kids: jwe.kids.slice(0, 8).map((k) => clip(k, 200)),
    });
  }
  let last: unknown;
  for (const i of held) {
    try {
      return { plaintext: await decryptJweFor(jwe, i, ctx.keys, senderKey), recipientKid: jwe.kids[i]! };
    } catch (e) {
      last = e;
    }
  }
  throw last;
}

export async function unpack(envelope: string, ctx: UnpackContext): Promise<Unpacked> {
  const limits = withLimits(ctx.limits);
  const md: UnpackMetadata = { encrypted: false, authenticated: false, nonRepudiation: false, anonymousSender: false };
  let text = envelope;
  let stage = 0; // 0 start, 1 after anoncrypt, 2 after authcrypt, 3 after signed
  const td = new TextDecoder('utf-8', { fatal: true });
  for (let layer = 0; ; layer++) {
    const o: JsonObject = parseObject(text, layer === 0 ? 'the envelope' : 'an inner layer', limits.maxEnvelopeBytes);
    if ('ciphertext' in o) {
      if (layer >= limits.maxLayers) throw new PlexusError('PLX_DIDCOMM_MALFORMED', 'too many nested layers', {});
      let jwe: ParsedJwe | undefined;
      let opened: { plaintext: Uint8Array; recipientKid: string };
      try {
        jwe = parseJwe(o, limits);
        const isAuth = jwe.alg === 'ECDH-1PU+A256KW';
        if (stage >= 2 || (!isAuth && stage >= 1)) {
          throw new PlexusError(
            'PLX_DIDCOMM_MALFORMED',
            'encryption inside authcrypt, a signature or anoncrypt is not a DIDComm envelope',
            {},
          );
        }
        opened = await openJwe(jwe, ctx);
        stage = isAuth ? 2 : 1;
      } catch (e) {
        ctx.recorder?.record({
          at: (ctx.clock ?? systemClock).now(),
          code: e instanceof PlexusError ? e.code : 'PLX_DIDCOMM_DECRYPT_FAILED',
          reason: e instanceof Error ? e.message : String(e),
          ...describeEnvelope(envelope),
          recipientKids: jwe?.kids.slice(0, 8) ?? [],
        });
        throw e;
      }
      md.encrypted = true;
      md.encryptedToKids = jwe.kids;
      md.recipientKid = opened.recipientKid;
      if (jwe.alg === 'ECDH-1PU+A256KW') {
        md.encAlgAuth = 'ECDH-1PU+A256KW/A256CBC-HS512';
        md.encryptedFromKid = jwe.skid!;
        md.authenticated = true;
      } else {
        md.encAlgAnon = `ECDH-ES+A256KW/${jwe.enc}`;
        if (layer === 0) md.anonymousSender = true;
      }
      text = decodeUtf8(td, opened.plaintext);
    } else if ('signatures' in o || 'payload' in o) {
      if (stage >= 3 || layer >= limits.maxLayers) {
        throw new PlexusError('PLX_DIDCOMM_MALFORMED', 'a signed layer may appear once, around the plaintext', {});
      }
      const { payload, kids } = await verifyJws(o, ctx.resolver, limits);
      md.signFrom = kids[0]!;
      md.signAlg = 'EdDSA';
      md.signedMessage = text;
      md.authenticated = true;
      md.nonRepudiation = true;
      stage = 3;
      text = decodeUtf8(td, payload);
    } else {
      const message = validateMessage(o);
      await checkSender(message, md, ctx, limits);
      return { message, metadata: md };
    }
  }
}

function decodeUtf8(td: TextDecoder, b: Uint8Array): string {
  try {
    return td.decode(b);
  } catch {
    throw new PlexusError('PLX_DIDCOMM_MALFORMED', 'a decrypted or signed payload is not UTF-8', {});
  }
}

async function checkSender(
  m: DidCommMessage,
  md: UnpackMetadata,
  ctx: UnpackContext,
  limits: DidCommLimits,
): Promise<void> {
  if (md.encryptedFromKid !== undefined && didOf(md.encryptedFromKid) !== m.from) {
    throw new PlexusError('PLX_DIDCOMM_SENDER_MISMATCH', "the authcrypt sender (skid) is not the message's from", {});
  }
  if (md.signFrom !== undefined && didOf(md.signFrom) !== m.from) {
    throw new PlexusError('PLX_DIDCOMM_SENDER_MISMATCH', "the signer is not the message's from", {});
  }
  if (md.recipientKid !== undefined && m.to !== undefined && !m.to.includes(didOf(md.recipientKid))) {
    throw new PlexusError('PLX_DIDCOMM_RECIPIENT_MISMATCH', "the decrypting key's DID is not in the message's to", {});
  }
  if (m.from_prior !== undefined) {
    const fp = await verifyFromPrior(m.from_prior, ctx.resolver, limits.maxProtectedLength * 2);
    if (fp.claims.sub !== m.from) {
      throw new PlexusError('PLX_DIDCOMM_BAD_FROM_PRIOR', "from_prior's sub is not the message's from", {});
    }
    md.fromPrior = fp.claims;
    md.fromPriorIssuerKid = fp.issuerKid;
  }
}
