/** JSON parsing of untrusted text: length capped first, objects only, refusals as PlexusError. */
import { PlexusError } from '../../core/errors.js';

export type JsonObject = Record<string, unknown>;

export function parseObject(text: string, what: string, maxLength: number): JsonObject {
  if (typeof text !== 'string') throw new PlexusError('PLX_DIDCOMM_MALFORMED', `${what} must be a string`, {});
  if (text.length > maxLength) {
    throw new PlexusError('PLX_DIDCOMM_TOO_LARGE', `${what} has ${text.length} characters, more than ${maxLength}`, {
      length: text.length,
      limit: maxLength,
    });
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new PlexusError('PLX_DIDCOMM_MALFORMED', `${what} is not JSON`, {});
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    throw new PlexusError('PLX_DIDCOMM_MALFORMED', `${what} must be a JSON object`, {});
  }
  return v as JsonObject;
}

export function str(o: JsonObject, key: string, what: string, max: number): string {
  const v = o[key];
  if (typeof v !== 'string') throw new PlexusError('PLX_DIDCOMM_MALFORMED', `${what}.${key} must be a string`, {});
  if (v.length > max) {
    throw new PlexusError('PLX_DIDCOMM_TOO_LARGE', `${what}.${key} is longer than ${max} characters`, { limit: max });
  }
  return v;
}

export function obj(o: JsonObject, key: string, what: string): JsonObject {
  const v = o[key];
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    throw new PlexusError('PLX_DIDCOMM_MALFORMED', `${what}.${key} must be a JSON object`, {});
  }
  return v as JsonObject;
}
