/**
 * Base64url without padding (RFC 4648 §5), as JOSE and did:peer use it. An encoding, not
 * cryptography. Decoding refuses padding, characters outside the alphabet and a length
 * that cannot come from whole bytes, so one text has exactly one meaning.
 */
import { TextDecoder } from 'node:util';
import { type PlexusCode, PlexusError } from '../../core/errors.js';

const utf8 = new TextDecoder('utf-8', { fatal: true });

const ALPHABET = /^[A-Za-z0-9_-]*$/;

export function b64uEncode(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64url');
}

export function b64uEncodeText(text: string): string {
  return Buffer.from(text, 'utf8').toString('base64url');
}

/** Decodes base64url; `what` names the field in the refusal. */
export function b64uDecode(text: string, what: string, code: PlexusCode = 'PLX_DIDCOMM_BAD_ENCODING'): Uint8Array {
  if (typeof text !== 'string' || text.length % 4 === 1 || !ALPHABET.test(text)) {
    throw new PlexusError(code, `${what} is not base64url without padding: fix or drop the message`, { field: what });
  }
  const buf = Buffer.from(text, 'base64url');
  // Non-canonical trailing bits would make two texts decode to one value: refuse them.
  if (buf.toString('base64url') !== text) {
    throw new PlexusError(code, `${what} is not canonical base64url: fix or drop the message`, { field: what });
  }
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** Decodes base64url to UTF-8 text, refusing malformed UTF-8. */
export function b64uDecodeText(text: string, what: string, code: PlexusCode = 'PLX_DIDCOMM_BAD_ENCODING'): string {
  try {
    return utf8.decode(b64uDecode(text, what, code));
  } catch (e) {
    if (e instanceof PlexusError) throw e;
    throw new PlexusError(code, `${what} is not UTF-8 text`, { field: what });
  }
}
