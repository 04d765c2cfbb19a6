/**
 * Chronacta's cluster mode on the replicated log (ts/replication/, docs/chronacta-ha.md):
 * the log opened with Chronacta's refusal codes (`PLX_CHRONACTA_HA_*`, ts/chronacta/ha-errors.ts)
 * and its CLI named in the refusals that tell an operator what to run.
 */
import type { ReplicaDeps } from '../replication/raft-edge.js';
import { openReplicatedLog, type ReplicatedLog, type ReplicatedLogOptions } from '../replication/replicated-log.js';
import { HA_CODE_ALIASES } from './ha-errors.js';

export type {
  AppliedBatch,
  ReplicatedLog,
  ReplicatedLogOptions,
  ReplicatedLogStatus,
} from '../replication/replicated-log.js';

/** Opens a member's replicated log as Chronacta runs it; `deps` as `openReplicatedLog`'s. */
export function openClusterLog(opts: ReplicatedLogOptions, deps: Partial<ReplicaDeps> = {}): Promise<ReplicatedLog> {
  return openReplicatedLog(
    {
      promoteHint: (id) =>
        `promote it with \`plexus chronacta cluster promote --id ${id}\` (ClusterService.PromoteMember)`,
      ...opts,
      errorCodes: HA_CODE_ALIASES,
    },
    deps,
  );
}
