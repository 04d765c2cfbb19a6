/**
 * Packing DIDComm v2 messages: plaintext, signed, anoncrypt and authcrypt (optionally signed
 * inside, optionally with the sender hidden under an outer anoncrypt), then forward wrapping
 * for the recipient's routing keys.
 */
import { PlexusError } from '../../core/errors.js';
import { clip, didOf, parseDidUrl } from '../did/did-url.js';
import { didcommEndpoints } from '../did/doc-keys.js';
import type { DidDocumentSource } from '../did/types.js';
import type { KeyManager } from '../keys/types.js';
import type { ContentEncryption } from './content.js';
import { wrapInForward } from './forward.js';
import type { JsonObject } from './json.js';
import { encryptJwe } from './jwe.js';
import { signJws } from './jws.js';
import { type DidCommMessage, TYP_PLAIN, validateMessage } from './message.js';
import { recipientKeys, senderAgreementKid, signerKid } from './select-keys.js';

export interface PackContext {
  resolver: DidDocumentSource;
  keys: KeyManager;
}

export interface PackEncryptedOptions {
  /** Recipient DID (all its X25519 keyAgreement keys) or one key's DID URL; its DID must be in `to`. */
  to: string;
  /** Sender DID or key DID URL: authcrypt. Omitted: anoncrypt. Must match the message's `from`. */
  from?: string;
  /** Sign the plaintext first (DID or Ed25519 key DID URL): non-repudiation. */
  signBy?: string;
  /** Hide the sender from relays: authcrypt wrapped in anoncrypt. */
  protectSender?: boolean;
  /** Content encryption of anoncrypt layers and forwards (default XC20P). Authcrypt is always A256CBC-HS512. */
  enc?: ContentEncryption;
  /** Wrap in forward messages for the recipient's routing keys (default true). */
  forward?: boolean;
  /** Id of the DIDCommMessaging service to use (default: the first). */
  serviceId?: string;
}

export interface PackEncryptedResult {
  packed: string;
  toKids: string[];
  fromKid?: string;
  signByKid?: string;
  /** The service the packed message goes to, when the recipient has one. */
  service?: { id: string; uri: string; routingKeys: string[] };
}

const te = new TextEncoder();

function plaintextJson(msg: DidCommMessage): string {
  validateMessage(msg as JsonObject);
  return JSON.stringify({ ...msg, typ: TYP_PLAIN });
}

export function packPlaintext(msg: DidCommMessage): string {
  return plaintextJson(msg);
}

export async function packSigned(
  msg: DidCommMessage,
  signBy: string,
  ctx: PackContext,
): Promise<{ packed: string; signByKid: string }> {
  const text = plaintextJson(msg);
  const kid = await signerKid(ctx.resolver, ctx.keys, signBy);
  if (msg.from !== undefined && didOf(kid) !== msg.from) {
    throw new PlexusError('PLX_DIDCOMM_SENDER_MISMATCH', `the signer ${clip(kid)} is not the message's from`, {});
  }
  return { packed: JSON.stringify(await signJws(te.encode(text), kid, ctx.keys)), signByKid: kid };
}

export async function packEncrypted(
  msg: DidCommMessage,
  opts: PackEncryptedOptions,
  ctx: PackContext,
): Promise<PackEncryptedResult> {
  const enc = opts.enc ?? 'XC20P';
  const toDid = parseDidUrl(opts.to).did;
  if (msg.to !== undefined && !msg.to.includes(toDid)) {
    throw new PlexusError('PLX_DIDCOMM_RECIPIENT_MISMATCH', `${clip(toDid)} is not in the message's to`, {});
  }
  if (opts.from !== undefined && didOf(opts.from) !== msg.from) {
    throw new PlexusError('PLX_DIDCOMM_SENDER_MISMATCH', "authcrypt's sender must be the message's from", {});
  }
  let payload: string;
  let signByKid: string | undefined;
  if (opts.signBy !== undefined) {
    const s = await packSigned(msg, opts.signBy, ctx);
    payload = s.packed;
    signByKid = s.signByKid;
  } else {
    payload = plaintextJson(msg);
  }
  const recipients = await recipientKeys(ctx.resolver, opts.to);
  let fromKid: string | undefined;
  let envelope: JsonObject;
  if (opts.from !== undefined) {
    fromKid = await senderAgreementKid(ctx.resolver, ctx.keys, opts.from);
    envelope = (await encryptJwe({
      plaintext: te.encode(payload),
      recipients,
      enc: 'A256CBC-HS512',
      sender: { kid: fromKid, keys: ctx.keys },
    })) as unknown as JsonObject;
    if (opts.protectSender) {
      envelope = (await encryptJwe({
        plaintext: te.encode(JSON.stringify(envelope)),
        recipients,
        enc,
      })) as unknown as JsonObject;
    }
  } else {
    envelope = (await encryptJwe({ plaintext: te.encode(payload), recipients, enc })) as unknown as JsonObject;
  }
  const result: PackEncryptedResult = { packed: '', toKids: recipients.map((r) => r.kid) };
  if (fromKid !== undefined) result.fromKid = fromKid;
  if (signByKid !== undefined) result.signByKid = signByKid;
  const endpoints = didcommEndpoints(await ctx.resolver.resolve(toDid));
  const ep = opts.serviceId !== undefined ? endpoints.find((e) => e.serviceId === opts.serviceId) : endpoints[0];
  if (opts.serviceId !== undefined && ep === undefined) {
    throw new PlexusError(
      'PLX_DIDCOMM_NO_SERVICE',
      `${clip(toDid)} has no DIDCommMessaging service ${clip(opts.serviceId)}`,
      {},
    );
  }
  if (ep !== undefined) {
    result.service = { id: ep.serviceId, uri: ep.uri, routingKeys: ep.routingKeys };
    if (opts.forward !== false && ep.routingKeys.length > 0) {
      envelope = (await wrapInForward(envelope, toDid, ep.routingKeys, enc, ctx.resolver)) as JsonObject;
    }
  }
  result.packed = JSON.stringify(envelope);
  return result;
}
