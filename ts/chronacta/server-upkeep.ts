/**
 * What a Chronacta server runs beside its gRPC port: the cluster API on the port's routes
 * (cluster mode), the metrics endpoint on its own port, and periodic compaction.
 */
import type { ClockTimers, TimerHandle } from '../core/clock.js';
import type { ClientPortSecurity } from './client-auth.js';
import { attachClusterApi, type ClusterApi } from './cluster-api.js';
import { ChronactaCode, chronactaError } from './errors.js';
import type { GrpcRoutes } from './grpc-server.js';
import { type ChronactaMetrics, type MetricsServer, startMetricsServer } from './metrics.js';
import type { ServerOptions } from './server.js';
import type { EventStore } from './store.js';

/** Cluster mode: the membership methods and the follower-read gate on `routes`. */
export function clusterApiFor(
  routes: GrpcRoutes,
  store: EventStore,
  options: ServerOptions,
  security: ClientPortSecurity,
  clock: ClockTimers,
): ClusterApi {
  const r = options.replication ?? {};
  return attachClusterApi(routes, store, {
    ...(r.tickMs !== undefined ? { tickMs: r.tickMs } : {}),
    ...(r.electionTick !== undefined ? { electionTick: r.electionTick } : {}),
    ...(options.maxReadLag !== undefined ? { maxReadLag: options.maxReadLag } : {}),
    ...(options.maxReadStalenessMs !== undefined ? { maxReadStalenessMs: options.maxReadStalenessMs } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
    peer: () => security.peerCredentials(),
    clock,
  });
}

/**
 * The metrics endpoint (/metrics, /healthz, /readyz) when `options.metricsPort` asks for
 * one; refuses with PLX_CHRONACTA_UNAVAILABLE when it cannot be served.
 */
export async function metricsEndpointFor(
  options: ServerOptions,
  host: string,
  store: EventStore,
  metrics: ChronactaMetrics,
): Promise<MetricsServer | undefined> {
  if (options.metricsPort === undefined) return undefined;
  try {
    return await startMetricsServer(options.metricsHost ?? host, options.metricsPort, store, metrics, {
      ...(options.minFreeBytes !== undefined ? { minFreeBytes: options.minFreeBytes } : {}),
      ...(options.readinessMaxReplicationLag !== undefined
        ? { maxReplicationLag: options.readinessMaxReplicationLag }
        : {}),
    });
  } catch (e) {
    throw chronactaError(
      ChronactaCode.UNAVAILABLE,
      `cannot serve metrics on port ${options.metricsPort}: ${(e as Error).message}`,
    );
  }
}

/** Compacts `store` every `options.compactEveryMs` on `timers` (none when absent); returns the stop. */
export function compactionFor(store: EventStore, options: ServerOptions, timers: ClockTimers): () => void {
  const every = options.compactEveryMs;
  if (every === undefined) return () => {};
  let stopped = false;
  let timer: TimerHandle;
  const round = (): void => {
    if (stopped) return;
    store.compact().catch((e: unknown) => options.logger?.warn('chronacta: compaction failed', { error: String(e) }));
    timer = timers.setTimeout(round, every);
  };
  timer = timers.setTimeout(round, every);
  return () => {
    stopped = true;
    timers.clearTimeout(timer);
  };
}
