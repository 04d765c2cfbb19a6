/**
 * The records of the federation mediator's two logs (docs/federation.md, "The mediator's
 * files"), on the log engine of plexus/storage. Integers are little-endian; every length is
 * checked against its cap and the bytes left before anything is read or allocated; a record
 * that does not decode is PLX_MEDIATOR_CORRUPT with `details.reason`.
 *
 * Message queue (`queue/`):
 *
 *   message   u8 1 | id 16 | receivedAt u64 (ms) | owner u16+utf8 | recipient u16+utf8 | body u32+bytes
 *   received  u8 2 | count u32 | id 16 × count
 *
 * Routing table (`routes/`), one record per change:
 *
 *   u8 kind (1 grant, 2 add, 3 remove) | client u16+utf8 | recipient u16+utf8 (empty for grant)
 */
import { PlexusError } from '../core/errors.js';
import { type ByteFail, ByteReader, ByteWriter } from './bytes.js';

export const KIND_MESSAGE = 1;
export const KIND_RECEIVED = 2;
export const ID_BYTES = 16;
/** The longest owner, recipient or client DID (bytes of UTF-8). */
export const MAX_NAME_BYTES = 8192;
/** The most ids one received record holds. */
export const MAX_RECEIVED_IDS = 4096;

export const ROUTE_GRANT = 1;
export const ROUTE_ADD = 2;
export const ROUTE_REMOVE = 3;

const te = new TextEncoder();
const td = new TextDecoder('utf-8', { fatal: true });

function tooLarge(what: string): PlexusError {
  return new PlexusError('PLX_MEDIATOR_TOO_LARGE', `a DID above ${MAX_NAME_BYTES} bytes cannot be ${what}`, {});
}

function corrupt(position: bigint, reason: string): PlexusError {
  return new PlexusError(
    'PLX_MEDIATOR_CORRUPT',
    `queue record ${position} is not a mediator record (${reason}): restore the data directory from a backup`,
    { position: String(position), reason },
  );
}

function routeCorrupt(position: bigint, reason: string): PlexusError {
  return new PlexusError(
    'PLX_MEDIATOR_CORRUPT',
    `route record ${position} is malformed (${reason}): restore the data directory from a backup`,
    { position: String(position), reason },
  );
}

export function encodeMessage(
  id: Uint8Array,
  receivedAt: number,
  owner: string,
  recipient: string,
  body: Uint8Array,
): Uint8Array {
  const o = te.encode(owner);
  const r = te.encode(recipient);
  if (o.length > MAX_NAME_BYTES || r.length > MAX_NAME_BYTES) throw tooLarge('routed');
  const out = new Uint8Array(1 + ID_BYTES + 8 + 2 + o.length + 2 + r.length + 4 + body.length);
  return new ByteWriter(out)
    .u8(KIND_MESSAGE)
    .bytes(id)
    .u64(receivedAt)
    .u16(o.length)
    .bytes(o)
    .u16(r.length)
    .bytes(r)
    .lenBytes(body)
    .finish();
}

export function encodeReceived(ids: readonly Uint8Array[]): Uint8Array {
  if (ids.length === 0 || ids.length > MAX_RECEIVED_IDS) {
    throw new PlexusError('PLX_MEDIATOR_BAD_INPUT', `a received record names 1..${MAX_RECEIVED_IDS} ids`, {});
  }
  const w = new ByteWriter(new Uint8Array(1 + 4 + ID_BYTES * ids.length)).u8(KIND_RECEIVED).u32(ids.length);
  for (const id of ids) w.bytes(id);
  return w.finish();
}

export type DecodedRecord =
  | {
      kind: 'message';
      id: string;
      receivedAt: number;
      owner: string;
      recipient: string;
      bodyOffset: number;
      bodyLength: number;
    }
  | { kind: 'received'; ids: string[] };

/** Decodes one queue record, length first; `position` only names it in refusals. */
export function decodeRecord(b: Uint8Array, position: bigint): DecodedRecord {
  const fail: ByteFail = (reason) => corrupt(position, reason === 'short' ? 'cut' : 'received time');
  const r = new ByteReader(b, fail);
  const kind = r.u8();
  if (kind === KIND_RECEIVED) {
    const n = r.u32();
    if (n === 0 || n > MAX_RECEIVED_IDS) throw corrupt(position, 'id count');
    if (r.left !== n * ID_BYTES) throw corrupt(position, 'length');
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push(hex(r.bytes(ID_BYTES)));
    return { kind: 'received', ids };
  }
  if (kind !== KIND_MESSAGE) throw corrupt(position, 'kind');
  r.need(ID_BYTES + 8);
  const id = hex(r.bytes(ID_BYTES));
  const receivedAt = r.u64('received time');
  const text = (): string => {
    const n = r.u16();
    if (n > MAX_NAME_BYTES) throw corrupt(position, 'name length');
    const raw = r.bytes(n);
    try {
      return td.decode(raw);
    } catch {
      throw corrupt(position, 'utf8');
    }
  };
  const owner = text();
  const recipient = text();
  const bodyLength = r.u32();
  if (bodyLength !== r.left) throw corrupt(position, 'body length');
  return { kind: 'message', id, receivedAt, owner, recipient, bodyOffset: r.at, bodyLength };
}

export interface RouteRecord {
  kind: number;
  client: string;
  recipient: string;
}

export function encodeRoute(kind: number, client: string, recipient: string): Uint8Array {
  const c = te.encode(client);
  const r = te.encode(recipient);
  if (c.length > MAX_NAME_BYTES || r.length > MAX_NAME_BYTES) throw tooLarge('registered');
  return new ByteWriter(new Uint8Array(1 + 2 + c.length + 2 + r.length))
    .u8(kind)
    .u16(c.length)
    .bytes(c)
    .u16(r.length)
    .bytes(r)
    .finish();
}

/** Decodes one routing record, length first; `position` only names it in refusals. */
export function decodeRoute(b: Uint8Array, position: bigint): RouteRecord {
  if (b.length < 5) throw routeCorrupt(position, 'cut');
  const r = new ByteReader(b, () => routeCorrupt(position, 'cut'));
  const kind = r.u8();
  if (kind !== ROUTE_GRANT && kind !== ROUTE_ADD && kind !== ROUTE_REMOVE) throw routeCorrupt(position, 'kind');
  const client = r.bytes(r.u16());
  const rl = r.u16();
  if (rl !== r.left) throw routeCorrupt(position, 'length');
  const recipient = r.bytes(rl);
  try {
    return { kind, client: td.decode(client), recipient: td.decode(recipient) };
  } catch {
    throw routeCorrupt(position, 'utf8');
  }
}

function hex(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');
}
