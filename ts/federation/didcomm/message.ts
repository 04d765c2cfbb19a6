/**
 * The DIDComm v2 plaintext message (DIDComm Messaging v2 §"Message Headers"): `id`, `type`,
 * `body` required; `from`, `to`, `thid`, `pthid`, `created_time`, `expires_time`, `from_prior`,
 * `attachments` optional; other headers kept as they are.
 */
import { PlexusError } from '../../core/errors.js';
import { parseDidUrl } from '../did/did-url.js';
import type { JsonObject } from './json.js';

export const TYP_PLAIN = 'application/didcomm-plain+json';

export interface Attachment {
  id?: string;
  description?: string;
  filename?: string;
  media_type?: string;
  format?: string;
  lastmod_time?: number;
  byte_count?: number;
  data: { json?: unknown; base64?: string; links?: string[]; hash?: string; jws?: unknown };
}

export interface DidCommMessage {
  id: string;
  type: string;
  body: unknown;
  typ?: string;
  from?: string;
  to?: string[];
  thid?: string;
  pthid?: string;
  created_time?: number;
  expires_time?: number;
  from_prior?: string;
  attachments?: Attachment[];
  [header: string]: unknown;
}

function bad(message: string): PlexusError {
  return new PlexusError('PLX_DIDCOMM_BAD_MESSAGE', message, {});
}

/** Checks the headers of a plaintext message; returns it typed. */
export function validateMessage(m: JsonObject): DidCommMessage {
  if (typeof m.id !== 'string' || m.id.length === 0) throw bad('a DIDComm message needs a non-empty string id');
  if (typeof m.type !== 'string' || m.type.length === 0) throw bad('a DIDComm message needs a string type');
  if (!('body' in m) || m.body === null || typeof m.body !== 'object')
    throw bad('a DIDComm message needs a JSON object body');
  if (m.typ !== undefined && m.typ !== TYP_PLAIN) throw bad(`a plaintext typ must be ${TYP_PLAIN}`);
  if (m.from !== undefined) {
    if (typeof m.from !== 'string') throw bad('from must be a DID');
    const p = parseDidUrl(m.from);
    if (p.fragment !== undefined || p.did !== m.from) throw bad('from must be a DID without fragment or path');
  }
  if (m.to !== undefined) {
    if (!Array.isArray(m.to) || m.to.some((t) => typeof t !== 'string')) throw bad('to must be an array of DIDs');
    for (const t of m.to as string[]) parseDidUrl(t);
  }
  for (const k of ['created_time', 'expires_time'] as const) {
    if (m[k] !== undefined && (typeof m[k] !== 'number' || !Number.isSafeInteger(m[k]) || (m[k] as number) < 0)) {
      throw bad(`${k} must be a non-negative integer (seconds since the epoch)`);
    }
  }
  for (const k of ['thid', 'pthid', 'from_prior'] as const) {
    if (m[k] !== undefined && typeof m[k] !== 'string') throw bad(`${k} must be a string`);
  }
  if (m.attachments !== undefined && !Array.isArray(m.attachments)) throw bad('attachments must be an array');
  return m as DidCommMessage;
}
