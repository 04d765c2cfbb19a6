/**
 * Authority requests and replies as bytes (JSON, fencing epochs as decimal strings), for
 * hosting a MemoryAuthority over the cluster wire. Input is checked for shape and size
 * before use: a request above 64 KiB or of an unknown shape is refused.
 */
import { PlexusError } from '../core/errors.js';
import type { AuthorityReply, AuthorityRequest, LeaseAuthority } from './lease-authority.js';

export const MAX_REQUEST_BYTES = 65_536;
export const MAX_REPLY_BYTES = 16 * 1024 * 1024;
const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });
const EPOCH_KEYS = new Set(['epoch']);

function replacer(_k: string, v: unknown): unknown {
  return typeof v === 'bigint' ? `${v}` : v;
}

function reviver(k: string, v: unknown): unknown {
  if (EPOCH_KEYS.has(k) && typeof v === 'string' && /^[0-9]{1,20}$/.test(v)) return BigInt(v);
  return v;
}

function parse(bytes: Uint8Array, max: number, what: string): unknown {
  if (bytes.length > max) {
    throw new PlexusError('PLX_CLUSTER_BAD_REQUEST', `an authority ${what} of ${bytes.length} bytes is above ${max}`);
  }
  try {
    return JSON.parse(dec.decode(bytes), reviver);
  } catch (e) {
    throw new PlexusError('PLX_CLUSTER_BAD_REQUEST', `an authority ${what} is not UTF-8 JSON`, {}, { cause: e });
  }
}

export function encodeRequest(r: AuthorityRequest): Uint8Array {
  return enc.encode(JSON.stringify(r, replacer));
}

const TYPES = new Set(['join', 'heartbeat', 'grant', 'renew', 'release', 'revoke', 'leave', 'drain', 'remove', 'view']);

export function decodeRequest(bytes: Uint8Array): AuthorityRequest {
  const r = parse(bytes, MAX_REQUEST_BYTES, 'request') as Record<string, unknown> | null;
  const bad = (why: string) => new PlexusError('PLX_CLUSTER_BAD_REQUEST', `authority request: ${why}`);
  if (r === null || typeof r !== 'object' || !TYPES.has(r.type as string)) throw bad('unknown type');
  if ('node' in r && typeof r.node !== 'string') throw bad('node must be a string');
  if (r.type !== 'view' && r.type !== 'revoke' && typeof r.node !== 'string') throw bad('node is missing');
  if ('shard' in r && !Number.isInteger(r.shard)) throw bad('shard must be an integer');
  if ((r.type === 'renew' || r.type === 'release') && typeof r.epoch !== 'bigint') throw bad('epoch is missing');
  if (r.type === 'heartbeat' && r.held !== undefined) {
    if (!Array.isArray(r.held)) throw bad('held must be an array');
    for (const h of r.held as Record<string, unknown>[]) {
      if (!h || !Number.isInteger(h.shard) || typeof h.epoch !== 'bigint') throw bad('held entries are {shard, epoch}');
    }
  }
  if (r.type === 'heartbeat' && r.removed !== undefined) {
    if (!Array.isArray(r.removed) || r.removed.some((n) => typeof n !== 'string')) {
      throw bad('removed must be an array of node ids');
    }
  }
  if (r.type === 'join' && (typeof r.meta !== 'object' || r.meta === null || typeof r.address !== 'string')) {
    throw bad('join needs meta and address');
  }
  return r as unknown as AuthorityRequest;
}

export function encodeReply(r: AuthorityReply): Uint8Array {
  return enc.encode(JSON.stringify(r, replacer));
}

export function decodeReply(bytes: Uint8Array): AuthorityReply {
  const r = parse(bytes, MAX_REPLY_BYTES, 'reply') as AuthorityReply | null;
  if (r === null || typeof r !== 'object' || typeof r.ok !== 'boolean' || typeof r.view !== 'object') {
    throw new PlexusError('PLX_CLUSTER_BAD_REQUEST', 'authority reply: not a reply');
  }
  if (r.removed !== undefined && (!Array.isArray(r.removed) || r.removed.some((n) => typeof n !== 'string'))) {
    throw new PlexusError('PLX_CLUSTER_BAD_REQUEST', 'authority reply: removed must be an array of node ids');
  }
  return r;
}

/** Serves any LeaseAuthority on the cluster wire: a request as bytes in, its reply as bytes out. */
export function serveAuthority(authority: LeaseAuthority): (from: string, body: Uint8Array) => Promise<Uint8Array> {
  return async (_from, body) => encodeReply(await authority.call(decodeRequest(body)));
}
