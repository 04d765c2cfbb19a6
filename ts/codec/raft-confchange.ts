/**
 * A Raft membership change, one node at a time: the data of a `conf-change` entry, stored in
 * the Raft journal and sent inside MsgApp like any entry's data (docs/raft.md, "Membership",
 * and docs/raft-wire.md, "Conf-change entry data").
 *
 * Version 2 (written), 10 bytes:
 *
 * | offset | size | field |
 * | 0 | 1 | marker 0x82 (version 2 with the high bit set) |
 * | 1 | 1 | kind: 1 add-voter, 2 add-learner, 3 remove-node |
 * | 2 | 8 | node id, u64 little-endian, 1 .. 2^53 - 1 |
 *
 * Version 1 (read only), 9 bytes: byte 0 the kind (1..3), bytes 1..8 the node id as a
 * big-endian u64. Its first byte is never 0x82 and its length never 10, so the two forms are
 * told apart by either; anything else is refused with PLX_RAFT_BAD_CONF_CHANGE.
 */
import { PlexusError } from '../core/errors.js';
import { type ByteFail, ByteReader, ByteWriter } from './bytes.js';

export type ConfChangeType = 'add-voter' | 'add-learner' | 'remove-node';

export interface ConfChange {
  readonly type: ConfChangeType;
  readonly nodeId: number;
}

/** The first byte of a version-2 conf change. */
export const CONF_CHANGE_MARKER = 0x82;
/** The length of a version-2 conf change (written). */
export const CONF_CHANGE_BYTES = 10;
/** The length of a version-1 conf change (read only). */
export const CONF_CHANGE_V1_BYTES = 9;

const KIND: Record<ConfChangeType, number> = { 'add-voter': 1, 'add-learner': 2, 'remove-node': 3 };
const BY_KIND: readonly (ConfChangeType | undefined)[] = [undefined, 'add-voter', 'add-learner', 'remove-node'];

function refused(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError('PLX_RAFT_BAD_CONF_CHANGE', message, details);
}

const fail: ByteFail = (reason, what, message) =>
  reason === 'range' ? refused(`node id is above 2^53 - 1 (${what})`) : refused(message, { field: what });

function checkId(id: number): void {
  if (!Number.isSafeInteger(id) || id <= 0) {
    throw refused(`node id ${id} is not a positive safe integer`, { nodeId: id });
  }
}

/** Encodes `cc` in version 2. */
export function encodeConfChange(cc: ConfChange): Uint8Array {
  checkId(cc.nodeId);
  const kind = KIND[cc.type];
  if (kind === undefined) throw refused(`unknown conf change type ${String(cc.type)}`);
  return new ByteWriter(new Uint8Array(CONF_CHANGE_BYTES)).u8(CONF_CHANGE_MARKER).u8(kind).u64(cc.nodeId).finish();
}

/** The layout version of conf-change bytes: 2, 1, or undefined for neither. */
export function confChangeVersion(data: Uint8Array): 1 | 2 | undefined {
  if (data.length === CONF_CHANGE_BYTES && data[0] === CONF_CHANGE_MARKER) return 2;
  if (data.length === CONF_CHANGE_V1_BYTES && BY_KIND[data[0] as number] !== undefined) return 1;
  return undefined;
}

/** Decodes either version; anything else is PLX_RAFT_BAD_CONF_CHANGE. */
export function decodeConfChange(data: Uint8Array): ConfChange {
  const version = confChangeVersion(data);
  if (version === undefined) {
    throw refused(
      `a conf change is ${CONF_CHANGE_BYTES} bytes starting with 0x${CONF_CHANGE_MARKER.toString(16)} (or ${CONF_CHANGE_V1_BYTES} in the older form), got ${data.length} bytes starting with ${data[0] ?? 'nothing'}; the entry is damaged or not a conf change`,
      { length: data.length },
    );
  }
  const r = new ByteReader(data, fail);
  if (version === 2) r.u8('marker');
  const kind = r.u8('kind');
  const type = BY_KIND[kind];
  if (type === undefined) throw refused(`unknown conf change kind ${kind}`);
  const nodeId = version === 2 ? r.u64('node id') : r.u64be('node id');
  checkId(nodeId);
  return { type, nodeId };
}
