/**
 * The store a Chronacta server serves: standalone on its data directory, or in cluster
 * mode on the replicated log of the members the data directory's cluster files name
 * (written by `plexus chronacta cluster init` or `cluster join-files`).
 */
import type { ReplicatedLogOptions } from './cluster-log.js';
import { haConfigOf, prepareDataDir } from './layout.js';
import type { ChronactaMetrics } from './metrics.js';
import type { ServerOptions } from './server.js';
import { EventStore } from './store.js';

export interface ServerStore {
  readonly store: EventStore;
  /** Cluster mode: the replicated log's options; undefined when standalone. */
  readonly replication: Omit<ReplicatedLogOptions, 'dir'> | undefined;
  /** Cluster mode: the port of this node's advertise address (the default gRPC port). */
  readonly clusterPort: number | undefined;
}

/** The replicated log's options of a cluster-mode data directory, and this node's advertised port. */
async function clusterReplication(
  options: ServerOptions,
): Promise<{ replication: Omit<ReplicatedLogOptions, 'dir'>; clusterPort: number }> {
  const prep = await prepareDataDir(options.dataDir);
  const ha = haConfigOf(prep);
  const self = ha.members.find((m) => m.id === ha.id);
  const clusterPort = Number(self?.advertise.slice(self.advertise.lastIndexOf(':') + 1));
  const replication = {
    ...(options.logger ? { logger: options.logger } : {}),
    // node.json of `cluster join-files`: an empty member the leader adds, never bootstrapping.
    ...(ha.join === true ? { join: true } : {}),
    // cluster.json's group commit, unless the caller chose one.
    ...(ha.groupCommitBytes !== undefined ? { groupCommitBytes: ha.groupCommitBytes } : {}),
    ...options.replication,
    id: ha.id,
    members: ha.members,
  };
  return { replication, clusterPort };
}

/** Opens the store `options` describe, its events observed by `metrics`. */
export async function openServerStore(options: ServerOptions, metrics: ChronactaMetrics): Promise<ServerStore> {
  const { replication, clusterPort } = options.cluster
    ? await clusterReplication(options)
    : { replication: undefined, clusterPort: undefined };
  const store = await EventStore.open({
    ...(replication ? { replication } : {}),
    dataDir: options.dataDir,
    ...(options.fsync ? { fsync: options.fsync } : {}),
    ...(options.segmentBytes !== undefined ? { segmentBytes: options.segmentBytes } : {}),
    ...(options.idempotencyTtlMs !== undefined ? { idempotencyTtlMs: options.idempotencyTtlMs } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.timers ? { timers: options.timers } : {}),
    observer: metrics.observer(),
  });
  return { store, replication, clusterPort };
}
