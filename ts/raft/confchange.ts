/**
 * Membership changes, one node at a time: how a committed ConfChange changes the
 * configuration. The bytes of a `conf-change` entry are in ts/codec/raft-confchange.ts.
 */
import type { ConfChange } from '../codec/raft-confchange.js';
import { RaftErrorCode, raftError } from './errors.js';
import type { ConfState } from './types.js';

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
