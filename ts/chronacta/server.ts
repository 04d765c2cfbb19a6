/**
 * The Chronacta gRPC server: the EventStore service over one store, the ClusterService
 * (standalone, or in cluster mode the replicated log's view: role, leader, term, lag), and
 * (optionally) the metrics endpoint on its own port.
 * `startServer` opens the store, binds (port 0: any free port) and resolves once it
 * serves; `close` ends every subscription, stops the server and closes the store.
 *
 * Every method is served by the lean gRPC server of grpc-server.ts on one port. Append,
 * the hot one, has its own codec (wire.ts): the request's event bytes go straight to the
 * store's record encoder. The other methods' messages go through protobufjs
 * (proto-loader), with the same shapes the typed client uses.
 */
import { status as grpcStatus } from '@grpc/grpc-js';
import type { Clock } from '../core/clock.js';
import { isPlexusError } from '../core/errors.js';
import type { FsyncMode, StorageLogger } from '../storage/types.js';
import { type ClientPortSecurityOptions, exposureWarning, loadClientPortSecurity } from './client-auth.js';
import { attachClusterApi, type ClusterApi } from './cluster-api.js';
import type { ReplicatedLogOptions } from './cluster-log.js';
import { ChronactaCode, chronactaError } from './errors.js';
import { startGrpcServer } from './grpc-server.js';
import { haConfigOf, type PreparedDataDir, prepareDataDir, recordAddress } from './layout.js';
import { type GrpcLimits, grpcLimits } from './limits.js';
import { ChronactaMetrics, limitMetrics, type MetricsServer, startMetricsServer } from './metrics.js';
import { MAX_MESSAGE_BYTES } from './proto.js';
import { serverMethods } from './server-methods.js';
import { CODE_KEY, DETAILS_KEY, toCallStatus } from './status.js';
import { EventStore } from './store.js';
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
  // The files are read (and refused) before the store opens.
  const security = loadClientPortSecurity(options.clientAuth, options.logger);
  const exposed = exposureWarning(host, security);
  if (exposed) options.logger?.warn(exposed);
  // Checked before anything opens: a bad bound is PLX_CHRONACTA_BAD_INPUT.
  const limits = grpcLimits(options.limits);
  const metrics = new ChronactaMetrics();
  let replication: Omit<ReplicatedLogOptions, 'dir'> | undefined;
  let clusterPort: number | undefined;
  if (options.cluster) {
    const prep = await prepareDataDir(options.dataDir);
    const ha = haConfigOf(prep);
    const self = ha.members.find((m) => m.id === ha.id);
    clusterPort = Number(self?.advertise.slice(self.advertise.lastIndexOf(':') + 1));
    replication = {
      ...(options.logger ? { logger: options.logger } : {}),
      // node.json of `cluster join-files`: an empty member the leader adds, never bootstrapping.
      ...(ha.join === true ? { join: true } : {}),
      // cluster.json's group commit, unless the caller chose one.
      ...(ha.groupCommitBytes !== undefined ? { groupCommitBytes: ha.groupCommitBytes } : {}),
      ...options.replication,
      id: ha.id,
      members: ha.members,
    };
  }
  const store = await EventStore.open({
    ...(replication ? { replication } : {}),
    dataDir: options.dataDir,
    ...(options.fsync ? { fsync: options.fsync } : {}),
    ...(options.segmentBytes !== undefined ? { segmentBytes: options.segmentBytes } : {}),
    ...(options.idempotencyTtlMs !== undefined ? { idempotencyTtlMs: options.idempotencyTtlMs } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
    observer: metrics.observer(),
  });
  const subs = new Set<Subscription>();
  const prepared: PreparedDataDir = store.prepared;
  let cluster = prepared;
  const methods = serverMethods({
    store,
    metrics,
    subs,
    subscriptionLimits: options.subscriptionLimits,
    cluster: () => cluster,
  });

  const okCalls = new Map<string, { inc(): void }>();
  const methodNames = new Map<string, string>();
  for (const path of methods.keys()) methodNames.set(path, path.slice(path.lastIndexOf('/') + 1));
  let grpcServer: Awaited<ReturnType<typeof startGrpcServer>> | undefined;
  const onLimit = limitMetrics(metrics, () => grpcServer?.load());
  try {
    grpcServer = await startGrpcServer(host, options.port ?? clusterPort ?? 0, methods, {
      maxMessageBytes: MAX_MESSAGE_BYTES,
      ...(security.tls ? { tls: security.tls } : {}),
      ...(security.tokens ? { authenticate: security.authenticate } : {}),
      limits,
      onLimit,
      limitMetadata: (reason) => ({
        [CODE_KEY]: ChronactaCode.OVERLOADED,
        [DETAILS_KEY]: JSON.stringify({ reason }),
      }),
      statusOf: (e: unknown) => {
        if (!isPlexusError(e)) options.logger?.warn('chronacta: unexpected failure in a call', { error: String(e) });
        return toCallStatus(e);
      },
      onEnd: (path, code) => {
        const method = methodNames.get(path) ?? 'unknown';
        if (code === 0) {
          let c = okCalls.get(method);
          if (!c) {
            c = metrics.grpcRequests.labels(method, 'OK');
            okCalls.set(method, c);
          }
          c.inc();
        } else metrics.grpcRequests.inc({ method, code: grpcStatus[code] ?? 'UNKNOWN' });
      },
    });
  } catch (e) {
    await store.close();
    throw chronactaError(
      ChronactaCode.UNAVAILABLE,
      `cannot bind gRPC on ${host}:${options.port ?? clusterPort ?? 0}: ${(e as Error).message}`,
    );
  }
  const port = grpcServer.port;
  if (grpcServer.secure) security.watch(grpcServer.secure);
  else security.watch(undefined);
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  // Cluster mode keeps the addresses `cluster init` wrote: every member knows them.
  if (!replication) cluster = await recordAddress(prepared, address);
  let clusterApi: ClusterApi | undefined;
  if (replication) {
    try {
      const r = options.replication ?? {};
      clusterApi = attachClusterApi(grpcServer.routes, store, {
        ...(r.tickMs !== undefined ? { tickMs: r.tickMs } : {}),
        ...(r.electionTick !== undefined ? { electionTick: r.electionTick } : {}),
        ...(options.maxReadLag !== undefined ? { maxReadLag: options.maxReadLag } : {}),
        ...(options.maxReadStalenessMs !== undefined ? { maxReadStalenessMs: options.maxReadStalenessMs } : {}),
        ...(options.logger ? { logger: options.logger } : {}),
        peer: () => security.peerCredentials(),
      });
    } catch (e) {
      security.close();
      await grpcServer.close(0);
      await store.close();
      throw e;
    }
  }

  let metricsServer: MetricsServer | undefined;
  if (options.metricsPort !== undefined) {
    try {
      metricsServer = await startMetricsServer(options.metricsHost ?? host, options.metricsPort, store, metrics, {
        ...(options.minFreeBytes !== undefined ? { minFreeBytes: options.minFreeBytes } : {}),
        ...(options.readinessMaxReplicationLag !== undefined
          ? { maxReplicationLag: options.readinessMaxReplicationLag }
          : {}),
      });
    } catch (e) {
      security.close();
      await grpcServer.close(0);
      await store.close();
      throw chronactaError(
        ChronactaCode.UNAVAILABLE,
        `cannot serve metrics on port ${options.metricsPort}: ${(e as Error).message}`,
      );
    }
  }

  let compactTimer: NodeJS.Timeout | undefined;
  if (options.compactEveryMs !== undefined) {
    compactTimer = setInterval(() => {
      store.compact().catch((e: unknown) => options.logger?.warn('chronacta: compaction failed', { error: String(e) }));
    }, options.compactEveryMs);
    compactTimer.unref();
  }

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
          if (compactTimer) clearInterval(compactTimer);
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
