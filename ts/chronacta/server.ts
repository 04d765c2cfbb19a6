/**
 * The Chronacta gRPC server: the EventStore service over one store, the ClusterService
 * (standalone, or in cluster mode the replicated log's view: role, leader, term, lag), and
 * (optionally) the metrics endpoint on its own port.
 * `startServer` opens the store, binds (port 0: any free port) and resolves once it
 * serves; `close` ends every subscription, stops the server and closes the store.
 * Its parts: the store (server-store.ts), the gRPC port (server-grpc.ts) with its method
 * table (server-methods.ts), the cluster API, metrics endpoint and compaction
 * (server-upkeep.ts).
 *
 * Every method is served by the lean gRPC server of grpc-server.ts on one port. Append,
 * the hot one, has its own codec (wire.ts): the request's event bytes go straight to the
 * store's record encoder. The other methods' messages go through protobufjs
 * (proto-loader), with the same shapes the typed client uses.
 */
import { type Clock, type ClockTimers, systemClock } from '../core/clock.js';
import type { FsyncMode, StorageLogger } from '../storage/types.js';
import { type ClientPortSecurityOptions, exposureWarning, loadClientPortSecurity } from './client-auth.js';
import type { ClusterApi } from './cluster-api.js';
import type { ReplicatedLogOptions } from './cluster-log.js';
import { ChronactaCode, chronactaError } from './errors.js';
import { type PreparedDataDir, recordAddress } from './layout.js';
import { type GrpcLimits, grpcLimits } from './limits.js';
import { ChronactaMetrics } from './metrics.js';
import { serveGrpcPort } from './server-grpc.js';
import { serverMethods } from './server-methods.js';
import { openServerStore } from './server-store.js';
import { clusterApiFor, compactionFor, metricsEndpointFor } from './server-upkeep.js';
import type { EventStore } from './store.js';
import type { Subscription, SubscriptionLimits, SubscriptionStats } from './subscription.js';

export interface ServerOptions {
  /** The data directory (made when missing). */
  readonly dataDir: string;
  /** Address to bind (default 127.0.0.1). */
  readonly host?: string;
  /** gRPC port (default 0: any free port). */
  readonly port?: number;
  /** Port of /metrics, /healthz, /readyz (0: any free port); absent: no metrics endpoint. */
  readonly metricsPort?: number;
  /** Address the metrics endpoint binds (default: `host`). */
  readonly metricsHost?: string;
  readonly fsync?: FsyncMode;
  readonly segmentBytes?: number;
  readonly idempotencyTtlMs?: number;
  readonly subscriptionLimits?: SubscriptionLimits;
  /** Bounds of the gRPC port: connections, streams, buffered bytes, subscriptions, timeouts (limits.ts). */
  readonly limits?: Partial<GrpcLimits>;
  /** /readyz reports not ready below this much free disk space (default 64 MiB). */
  readonly minFreeBytes?: number;
  /** Run a compaction this often (milliseconds); absent: only when asked. */
  readonly compactEveryMs?: number;
  readonly logger?: StorageLogger;
  /** Wall time of the store (ms since the Unix epoch): a `Clock`, or a function (the earlier form). */
  readonly clock?: Clock | (() => number);
  /**
   * Time and timers of the server's parts (default `systemClock`): the compaction interval,
   * the cluster API's read deadlines and reconcile interval, the gRPC port's sweeps and call
   * timeouts, the client port's certificate checks, and the store's leader readiness deadline.
   */
  readonly timers?: ClockTimers;
  /**
   * Cluster mode: the data directory's cluster files (mode `cluster`, written by
   * `plexus chronacta cluster init`) name the members and this node; the store runs on the
   * replicated log. The gRPC port defaults to the node's advertise address's port.
   */
  readonly cluster?: boolean;
  /** Cluster mode: Raft timing and other replicated-log options (tests shorten ticks). */
  readonly replication?: Partial<Omit<ReplicatedLogOptions, 'dir' | 'id' | 'members'>>;
  /** ReadinessMaxReplicationLag: /readyz on a leader fails while a voter lags more positions than this (default 0). */
  readonly readinessMaxReplicationLag?: number;
  /** Cluster mode: follower reads (docs/chronacta-ha.md, "Follower reads"): positions a follower may lag (default 0). */
  readonly maxReadLag?: number;
  /** Cluster mode: how long ago a follower must have heard the leader's commit (default one election timeout). */
  readonly maxReadStalenessMs?: number;
  /**
   * TLS and client authentication of the gRPC port (client-auth.ts; default none: plaintext
   * and no authentication, with a warning through `logger` when `host` is not loopback).
   */
  readonly clientAuth?: ClientPortSecurityOptions;
}

export interface ChronactaServer {
  /** `host:port` of the gRPC server, for `new ChronactaClient(address)`. */
  readonly address: string;
  readonly port: number;
  /** `host:port` of the metrics endpoint, when there is one. */
  readonly metricsAddress: string | undefined;
  readonly store: EventStore;
  readonly metrics: ChronactaMetrics;
  /** Cluster mode: the membership methods, the follower-read gate and cluster.json upkeep. */
  readonly clusterApi: ClusterApi | undefined;
  /** How the gRPC port is secured. */
  readonly security: { readonly tls: boolean; readonly clientCertAuth: boolean; readonly tokens: boolean };
  /** Statistics of the open subscriptions. */
  subscriptions(): SubscriptionStats[];
  close(): Promise<void>;
}

export async function startServer(options: ServerOptions): Promise<ChronactaServer> {
  if (typeof options !== 'object' || options === null) {
    throw chronactaError(ChronactaCode.BAD_INPUT, 'startServer needs options with a dataDir');
  }
  const host = options.host ?? '127.0.0.1';
  const timers = options.timers ?? systemClock;
  // The files are read (and refused) before the store opens.
  const security = loadClientPortSecurity(
    options.clientAuth && { ...options.clientAuth, clock: options.clientAuth.clock ?? timers },
    options.logger,
  );
  const exposed = exposureWarning(host, security);
  if (exposed) options.logger?.warn(exposed);
  // Checked before anything opens: a bad bound is PLX_CHRONACTA_BAD_INPUT.
  const limits = grpcLimits(options.limits);
  const metrics = new ChronactaMetrics();
  const { store, replication, clusterPort } = await openServerStore(options, metrics);
  const subs = new Set<Subscription>();
  const prepared: PreparedDataDir = store.prepared;
  let cluster = prepared;
  const methods = serverMethods({
    store,
    metrics,
    subs,
    subscriptionLimits: options.subscriptionLimits,
    cluster: () => cluster,
    timers,
  });

  let grpcServer: Awaited<ReturnType<typeof serveGrpcPort>>;
  try {
    grpcServer = await serveGrpcPort({
      host,
      port: options.port ?? clusterPort ?? 0,
      methods,
      security,
      limits,
      metrics,
      logger: options.logger,
      clock: timers,
    });
  } catch (e) {
    await store.close();
    throw e;
  }
  const port = grpcServer.port;
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  // Cluster mode keeps the addresses `cluster init` wrote: every member knows them.
  if (!replication) cluster = await recordAddress(prepared, address);
  const abandon = async (): Promise<void> => {
    security.close();
    await grpcServer.close(0);
    await store.close();
  };
  let clusterApi: ClusterApi | undefined;
  let metricsServer: Awaited<ReturnType<typeof metricsEndpointFor>>;
  try {
    if (replication) clusterApi = clusterApiFor(grpcServer.routes, store, options, security, timers);
    metricsServer = await metricsEndpointFor(options, host, store, metrics);
  } catch (e) {
    await abandon();
    throw e;
  }
  const stopCompaction = compactionFor(store, options, timers);

  let closing: Promise<void> | undefined;
  return {
    address,
    port,
    metricsAddress: metricsServer?.address,
    store,
    metrics,
    clusterApi,
    security: { tls: security.tls !== undefined, clientCertAuth: security.clientCertAuth, tokens: security.tokens },
    subscriptions: () => [...subs].map((s) => ({ ...s.stats })),
    close() {
      if (!closing) {
        closing = (async () => {
          stopCompaction();
          for (const s of subs) s.close();
          clusterApi?.close();
          security.close();
          await grpcServer.close(2000);
          await metricsServer?.close();
          await store.close();
        })();
      }
      return closing;
    },
  };
}
