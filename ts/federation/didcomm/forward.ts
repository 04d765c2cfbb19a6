/**
 * Routing 2.0 forward messages (DIDComm v2 §"Routing Protocol 2.0"): one forward per routing
 * key, each anoncrypted to its mediator. With routing keys [k1, …, kn] the outermost layer is
 * for k1 and names k2 as `next`; the innermost is for kn and names the recipient's DID.
 */
import { randomUUID } from 'node:crypto';
import { PlexusError } from '../../core/errors.js';
import type { DidDocumentSource } from '../did/types.js';
import type { ContentEncryption } from './content.js';
import type { JsonObject } from './json.js';
import { encryptJwe, type Jwe } from './jwe.js';
import type { DidCommMessage } from './message.js';
import { recipientKeys } from './select-keys.js';

export const FORWARD_TYPE = 'https://didcomm.org/routing/2.0/forward';
/** The most routing keys followed. */
export const MAX_ROUTING_KEYS = 8;

export function forwardMessage(next: string, envelope: JsonObject): DidCommMessage {
  return { id: randomUUID(), type: FORWARD_TYPE, body: { next }, attachments: [{ data: { json: envelope } }] };
}

export async function wrapInForward(
  envelope: Jwe | JsonObject,
  to: string,
  routingKeys: string[],
  enc: ContentEncryption,
  resolver: DidDocumentSource,
): Promise<Jwe | JsonObject> {
  if (routingKeys.length > MAX_ROUTING_KEYS) {
    throw new PlexusError('PLX_DIDCOMM_TOO_LARGE', `more than ${MAX_ROUTING_KEYS} routing keys`, {});
  }
  const te = new TextEncoder();
  let msg: Jwe | JsonObject = envelope;
  for (let i = routingKeys.length - 1; i >= 0; i--) {
    const next = i === routingKeys.length - 1 ? to : routingKeys[i + 1]!;
    const fwd = forwardMessage(next, msg as JsonObject);
    msg = await encryptJwe({
      plaintext: te.encode(JSON.stringify(fwd)),
      recipients: await recipientKeys(resolver, routingKeys[i]!),
      enc,
    });
  }
  return msg;
}

/** The `next` and the forwarded envelope of a forward message, or a refusal. */
export function parseForward(msg: DidCommMessage): { next: string; forwarded: JsonObject } {
  const next = (msg.body as JsonObject | undefined)?.next;
  const att = msg.attachments;
  if (msg.type !== FORWARD_TYPE || typeof next !== 'string' || !Array.isArray(att) || att.length !== 1) {
    throw new PlexusError('PLX_DIDCOMM_BAD_FORWARD', 'not a forward message with body.next and one attachment', {});
  }
  const data = att[0]?.data;
  let json: unknown = data?.json;
  if (json === undefined && typeof data?.base64 === 'string') {
    // Some implementations attach the envelope as base64 (padded or not) of its JSON text.
    const text = Buffer.from(data.base64, 'base64').toString('utf8');
    try {
      json = JSON.parse(text);
    } catch {
      throw new PlexusError('PLX_DIDCOMM_BAD_FORWARD', 'the forward attachment data.base64 is not a JSON envelope', {});
    }
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new PlexusError(
      'PLX_DIDCOMM_BAD_FORWARD',
      'the forward attachment must carry the envelope as data.json or data.base64',
      {},
    );
  }
  return { next, forwarded: json as JsonObject };
}
