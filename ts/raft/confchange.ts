/**
 * Membership changes, one node at a time: the payload of a `conf-change` entry.
 * Layout (9 bytes): byte 0 the kind (1 add-voter, 2 add-learner, 3 remove-node), bytes 1..8
 * the node id as a big-endian unsigned 64-bit integer (at most 2^53 - 1).
 */
import { RaftErrorCode, raftError } from './errors.js';
import type { ConfState } from './types.js';

export type ConfChangeType = 'add-voter' | 'add-learner' | 'remove-node';

export interface ConfChange {
  readonly type: ConfChangeType;
  readonly nodeId: number;
}

const KIND: Record<ConfChangeType, number> = { 'add-voter': 1, 'add-learner': 2, 'remove-node': 3 };
const BY_KIND: readonly (ConfChangeType | undefined)[] = [undefined, 'add-voter', 'add-learner', 'remove-node'];
export const CONF_CHANGE_BYTES = 9;

function checkId(id: number): void {
  if (!Number.isSafeInteger(id) || id <= 0) {
    throw raftError(RaftErrorCode.BAD_CONF_CHANGE, `node id ${id} is not a positive safe integer`, { nodeId: id });
  }
}

export function encodeConfChange(cc: ConfChange): Uint8Array {
  checkId(cc.nodeId);
  const kind = KIND[cc.type];
  if (kind === undefined) throw raftError(RaftErrorCode.BAD_CONF_CHANGE, `unknown conf change type ${String(cc.type)}`);
  const out = new Uint8Array(CONF_CHANGE_BYTES);
  const view = new DataView(out.buffer);
  out[0] = kind;
  view.setBigUint64(1, BigInt(cc.nodeId));
  return out;
}

export function decodeConfChange(data: Uint8Array): ConfChange {
  if (data.length !== CONF_CHANGE_BYTES) {
    throw raftError(
      RaftErrorCode.BAD_CONF_CHANGE,
      `a conf change is ${CONF_CHANGE_BYTES} bytes, got ${data.length}; the entry is damaged or not a conf change`,
      { length: data.length },
    );
  }
  const type = BY_KIND[data[0]!];
  if (type === undefined) throw raftError(RaftErrorCode.BAD_CONF_CHANGE, `unknown conf change kind ${data[0]}`);
  const id = new DataView(data.buffer, data.byteOffset, data.byteLength).getBigUint64(1);
  if (id > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw raftError(RaftErrorCode.BAD_CONF_CHANGE, `node id ${id} is above 2^53 - 1`);
  }
  const nodeId = Number(id);
  checkId(nodeId);
  return { type, nodeId };
}

/** The configuration after `cc`; refuses to remove the last voter. */
export function applyToConfState(cs: ConfState, cc: ConfChange): ConfState {
  const voters = new Set(cs.voters);
  const learners = new Set(cs.learners);
  switch (cc.type) {
    case 'add-voter':
      learners.delete(cc.nodeId);
      voters.add(cc.nodeId);
      break;
    case 'add-learner':
      voters.delete(cc.nodeId);
      learners.add(cc.nodeId);
      break;
    case 'remove-node':
      voters.delete(cc.nodeId);
      learners.delete(cc.nodeId);
      break;
  }
  if (voters.size === 0) {
    throw raftError(RaftErrorCode.BAD_CONF_CHANGE, `${cc.type} ${cc.nodeId} would leave no voter`, { ...cc });
  }
  return { voters: [...voters].sort((a, b) => a - b), learners: [...learners].sort((a, b) => a - b) };
}
