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
import { isPlexusError } from '../core/errors.js';
import type { FsyncMode, StorageLogger } from '../storage/types.js';
import { type ClientPortSecurityOptions, exposureWarning, loadClientPortSecurity } from './client-auth.js';
import { attachClusterApi, type ClusterApi } from './cluster-api.js';
import { ChronactaCode, chronactaError } from './errors.js';
import { type CallContext, frame, type GrpcMethod, type ServerStream, startGrpcServer } from './grpc-server.js';
import type { ReplicatedLogOptions } from './ha/replicated-log.js';
import { haConfigOf, type PreparedDataDir, prepareDataDir, recordAddress } from './layout.js';
import { type GrpcLimits, grpcLimits } from './limits.js';
import { ChronactaMetrics, limitMetrics, type MetricsServer, replicationLagOf, startMetricsServer } from './metrics.js';
import {
  compactionToWire,
  expectedFromWire,
  MAX_MESSAGE_BYTES,
  messageToWire,
  methodDefinition,
  recordedToWire,
  targetFromWire,
  toBig,
  type WireExpected,
  type WireLong,
  type WireSubscribeRequest,
} from './proto.js';
import { checkTextFields, directionOf, TEXT_FIELDS } from './request-check.js';
import { CODE_KEY, DETAILS_KEY, toCallStatus } from './status.js';
import { EventStore } from './store.js';
import {
  checkTarget,
  Subscription,
  type SubscriptionLimits,
  type SubscriptionSink,
  type SubscriptionStats,
} from './subscription.js';
import type { SubscriptionMessage } from './types.js';
import { decodeAppendRequest, encodeAppendResponseFrame } from './wire.js';

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
  readonly clock?: () => number;
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

function optionalBig(v: WireLong | undefined, what: string): bigint | undefined {
  return v === undefined || v === null ? undefined : toBig(v, what);
}

function count(v: number | undefined): number | undefined {
  return v === undefined || v === 0 ? undefined : v;
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
  const methods = new Map<string, GrpcMethod>();
  const prepared: PreparedDataDir = store.prepared;
  let cluster = prepared;

  /** A unary method whose messages go through protobufjs. */
  function unary<Req>(service: 'EventStore' | 'ClusterService', name: string, fn: (req: Req) => Promise<object>): void {
    const def = methodDefinition(service, name);
    methods.set(def.path, {
      kind: 'unary',
      handle: async (request: Buffer) => {
        const text = TEXT_FIELDS[name];
        if (text) checkTextFields(request, name, text);
        const res = await fn(decodeRequest(def, name, request) as Req);
        return frame(def.responseSerialize(res));
      },
    });
  }

  methods.set(methodDefinition('EventStore', 'Append').path, {
    kind: 'unary',
    handle: async (request: Buffer, _ctx: CallContext) => {
      const reply = await store.appendWire(decodeAppendRequest(request));
      return encodeAppendResponseFrame(reply);
    },
  });
  unary(
    'EventStore',
    'ReadStream',
    async (req: {
      stream: string;
      direction: string;
      from?: string;
      fromVersion?: WireLong;
      maxCount: number;
      types: string[];
    }) => {
      const fromVersion = req.from === 'fromVersion' ? optionalBig(req.fromVersion, 'fromVersion') : undefined;
      const maxCount = count(req.maxCount);
      const r = await store.readStream(req.stream, {
        direction: directionOf(req.direction, 'ReadStream'),
        ...(fromVersion !== undefined ? { fromVersion } : {}),
        ...(maxCount !== undefined ? { maxCount } : {}),
        types: req.types ?? [],
      });
      return {
        events: r.events.map(recordedToWire),
        lastVersion: r.lastVersion.toString(),
        ...(r.nextVersion !== undefined ? { nextVersion: r.nextVersion.toString() } : {}),
        end: r.end,
        deleted: r.deleted,
      };
    },
  );
  unary(
    'EventStore',
    'ReadAll',
    async (req: {
      direction: string;
      from?: string;
      fromPosition?: WireLong;
      maxCount: number;
      streamPrefix: string;
      types: string[];
    }) => {
      const fromPosition = req.from === 'fromPosition' ? optionalBig(req.fromPosition, 'fromPosition') : undefined;
      const maxCount = count(req.maxCount);
      const r = await store.readAll({
        direction: directionOf(req.direction, 'ReadAll'),
        ...(fromPosition !== undefined ? { fromPosition } : {}),
        ...(maxCount !== undefined ? { maxCount } : {}),
        ...(req.streamPrefix ? { streamPrefix: req.streamPrefix } : {}),
        types: req.types ?? [],
      });
      return {
        events: r.events.map(recordedToWire),
        nextPosition: r.nextPosition.toString(),
        end: r.end,
        lastPosition: r.lastPosition.toString(),
      };
    },
  );
  unary('EventStore', 'Delete', async (req: { stream: string; expectedVersion?: WireExpected; hard: boolean }) => {
    const r = await store.deleteStream(req.stream, {
      expectedVersion: expectedFromWire(req.expectedVersion),
      hard: req.hard === true,
    });
    return { position: r.position.toString(), lastVersion: r.lastVersion.toString() };
  });
  unary(
    'EventStore',
    'Truncate',
    async (req: {
      stream: string;
      count?: string;
      maxCount?: WireLong;
      age?: string;
      maxAgeMs?: WireLong;
      before?: string;
      beforeVersion?: WireLong;
      expectedVersion?: WireExpected;
    }) => {
      const maxCount = req.count === 'maxCount' ? optionalBig(req.maxCount, 'maxCount') : undefined;
      const maxAgeMs = req.age === 'maxAgeMs' ? optionalBig(req.maxAgeMs, 'maxAgeMs') : undefined;
      const beforeVersion =
        req.before === 'beforeVersion' ? optionalBig(req.beforeVersion, 'beforeVersion') : undefined;
      const r = await store.truncateStream(req.stream, {
        ...(maxCount !== undefined ? { maxCount: Number(maxCount) } : {}),
        ...(maxAgeMs !== undefined ? { maxAgeMs: Number(maxAgeMs) } : {}),
        ...(beforeVersion !== undefined ? { beforeVersion } : {}),
        expectedVersion: expectedFromWire(req.expectedVersion),
      });
      return { position: r.position.toString(), truncateBefore: r.truncateBefore.toString() };
    },
  );
  unary('EventStore', 'Compact', async () => compactionToWire(await store.compact()));
  unary('ClusterService', 'GetStatus', async () => {
    const s = store.clusterStatus();
    if (!s) return standaloneStatus();
    const lag = new Map((s.followers ?? []).map((f) => [f.id, f.lagPositions]));
    return {
      mode: 'cluster',
      clusterId: cluster.cluster.clusterId,
      nodeId: String(s.id),
      leaderId: s.leader === 0 ? '' : String(s.leader),
      epoch: String(s.term),
      members: s.members.map((m) => ({
        id: String(m.id),
        address: m.advertise,
        raftAddress: m.raftAddress,
        lagPositions: String(lag.get(m.id) ?? 0),
      })),
      role: s.role,
      leaderAddress: s.leaderAddress ?? '',
      term: String(s.term),
      commitIndex: String(s.commit),
      appliedIndex: String(s.applied),
      lastPosition: String(s.lastPosition),
      replicationLagPositions: String(replicationLagOf(s)),
      acceptingWrites: s.acceptingWrites,
    };
  });
  const standaloneStatus = () => ({
    mode: cluster.cluster.mode,
    clusterId: cluster.cluster.clusterId,
    nodeId: cluster.node.id,
    leaderId: cluster.cluster.leader,
    epoch: String(cluster.cluster.epoch),
    members: cluster.cluster.members.map((m) => ({ id: m.id, address: m.address })),
  });

  const subscribeDef = methodDefinition('EventStore', 'Subscribe');
  methods.set(subscribeDef.path, {
    kind: 'stream',
    handle: (request: Buffer, call: ServerStream) => {
      // A refusal here (a bad target) ends the call with its status, as a thrown error.
      const target = checkTarget(
        targetFromWire(decodeRequest(subscribeDef, 'Subscribe', request) as WireSubscribeRequest),
      );
      const sub = new Subscription(
        store,
        target,
        sinkOf(call, (m) => frame(subscribeDef.responseSerialize(messageToWire(m)))),
        options.subscriptionLimits,
      );
      subs.add(sub);
      metrics.subscriptionsStarted.inc();
      metrics.subscriptionsActive.inc();
      let delivered = 0;
      let fallbacks = 0;
      const tick = setInterval(() => account(), 1000);
      tick.unref();
      const account = () => {
        metrics.subscriptionEvents.inc(sub.stats.delivered - delivered);
        metrics.subscriptionFallbacks.inc(sub.stats.fallbacks - fallbacks);
        delivered = sub.stats.delivered;
        fallbacks = sub.stats.fallbacks;
      };
      call.onCancel(() => sub.close());
      sub
        .run()
        .then(
          () => call.end(),
          (e: unknown) => call.end(toCallStatus(e)),
        )
        .finally(() => {
          clearInterval(tick);
          account();
          subs.delete(sub);
          metrics.subscriptionsActive.dec();
        });
    },
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

/** A request message through protobufjs; one it cannot read is PLX_CHRONACTA_BAD_INPUT. */
function decodeRequest(def: { requestDeserialize(b: Buffer): object }, method: string, request: Buffer): object {
  try {
    return def.requestDeserialize(request);
  } catch (e) {
    throw chronactaError(
      ChronactaCode.BAD_INPUT,
      `the ${method} request is not a well-formed protobuf message: ${(e as Error).message}`,
    );
  }
}

/** A server stream as a subscription sink: full when its write buffer is. */
function sinkOf(call: ServerStream, encode: (m: SubscriptionMessage) => Uint8Array): SubscriptionSink {
  return {
    get closed() {
      return call.cancelled;
    },
    write(msg: SubscriptionMessage) {
      return call.write(encode(msg));
    },
    drained() {
      return call.drained();
    },
  };
}
