/**
 * The Chronacta gRPC server: the EventStore service over one store, the ClusterService
 * stub of standalone mode, and (optionally) the metrics endpoint on its own port.
 * `startServer` opens the store, binds (port 0: any free port) and resolves once it
 * serves; `close` ends every subscription, stops the server and closes the store.
 */
import * as grpc from '@grpc/grpc-js';
import { isPlexusError } from '../core/errors.js';
import type { FsyncMode, StorageLogger } from '../storage/types.js';
import { ChronactaCode, chronactaError } from './errors.js';
import { type PreparedDataDir, recordAddress } from './layout.js';
import { ChronactaMetrics, type MetricsServer, startMetricsServer } from './metrics.js';
import {
  CHANNEL_OPTIONS,
  compactionToWire,
  definitions,
  expectedFromWire,
  messageToWire,
  recordedToWire,
  targetFromWire,
  toBig,
  type WireEvent,
  type WireExpected,
  type WireLong,
  type WireSubscribeRequest,
} from './proto.js';
import { toServiceError } from './status.js';
import { EventStore } from './store.js';
import {
  checkTarget,
  Subscription,
  type SubscriptionLimits,
  type SubscriptionSink,
  type SubscriptionStats,
} from './subscription.js';
import type { Direction, SubscriptionMessage } from './types.js';

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
  /** /readyz reports not ready below this much free disk space (default 64 MiB). */
  readonly minFreeBytes?: number;
  /** Run a compaction this often (milliseconds); absent: only when asked. */
  readonly compactEveryMs?: number;
  readonly logger?: StorageLogger;
  readonly clock?: () => number;
}

export interface ChronactaServer {
  /** `host:port` of the gRPC server, for `new ChronactaClient(address)`. */
  readonly address: string;
  readonly port: number;
  /** `host:port` of the metrics endpoint, when there is one. */
  readonly metricsAddress: string | undefined;
  readonly store: EventStore;
  readonly metrics: ChronactaMetrics;
  /** Statistics of the open subscriptions. */
  subscriptions(): SubscriptionStats[];
  close(): Promise<void>;
}

type Unary<Req, Res> = (call: grpc.ServerUnaryCall<Req, Res>, callback: grpc.sendUnaryData<Res>) => void;

function dir(v: string | undefined): Direction {
  return v === 'BACKWARDS' ? 'backwards' : 'forwards';
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
  const metrics = new ChronactaMetrics();
  const store = await EventStore.open({
    dataDir: options.dataDir,
    ...(options.fsync ? { fsync: options.fsync } : {}),
    ...(options.segmentBytes !== undefined ? { segmentBytes: options.segmentBytes } : {}),
    ...(options.idempotencyTtlMs !== undefined ? { idempotencyTtlMs: options.idempotencyTtlMs } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
    observer: metrics.observer(),
  });
  const subs = new Set<Subscription>();
  const server = new grpc.Server(CHANNEL_OPTIONS);
  const defs = definitions();

  function unary<Req, Res>(method: string, fn: (req: Req) => Promise<Res>): Unary<Req, Res> {
    return (call, callback) => {
      fn(call.request).then(
        (res) => {
          metrics.grpcRequests.inc({ method, code: 'OK' });
          callback(null, res);
        },
        (e: unknown) => {
          const se = toServiceError(e);
          metrics.grpcRequests.inc({ method, code: grpc.status[se.code ?? grpc.status.INTERNAL] ?? 'UNKNOWN' });
          if (!isPlexusError(e))
            options.logger?.warn('chronacta: unexpected failure in a call', { method, error: String(e) });
          callback(se as grpc.ServiceError, null);
        },
      );
    };
  }

  const prepared: PreparedDataDir = store.prepared;
  let cluster = prepared;

  server.addService(defs.EventStore.service, {
    Append: unary(
      'Append',
      async (req: { stream: string; events: WireEvent[]; expectedVersion?: WireExpected; idempotencyKey: string }) => {
        const r = await store.append(
          req.stream,
          (req.events ?? []).map((e) => ({
            ...(e.id ? { id: e.id } : {}),
            type: e.type,
            data: e.data,
            metadata: e.metadata,
          })),
          {
            expectedVersion: expectedFromWire(req.expectedVersion),
            ...(req.idempotencyKey ? { idempotencyKey: req.idempotencyKey } : {}),
          },
        );
        return {
          firstVersion: r.firstVersion.toString(),
          lastVersion: r.lastVersion.toString(),
          firstPosition: r.firstPosition.toString(),
          lastPosition: r.lastPosition.toString(),
          batchId: r.batchId,
          duplicate: r.duplicate,
        };
      },
    ),
    ReadStream: unary(
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
          direction: dir(req.direction),
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
    ),
    ReadAll: unary(
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
          direction: dir(req.direction),
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
    ),
    Delete: unary('Delete', async (req: { stream: string; expectedVersion?: WireExpected; hard: boolean }) => {
      const r = await store.deleteStream(req.stream, {
        expectedVersion: expectedFromWire(req.expectedVersion),
        hard: req.hard === true,
      });
      return { position: r.position.toString(), lastVersion: r.lastVersion.toString() };
    }),
    Truncate: unary(
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
    ),
    Compact: unary('Compact', async () => compactionToWire(await store.compact())),
    Subscribe: (call: grpc.ServerWritableStream<WireSubscribeRequest, unknown>) => {
      let sub: Subscription;
      try {
        sub = new Subscription(
          store,
          checkTarget(targetFromWire(call.request)),
          sinkOf(call),
          options.subscriptionLimits,
        );
      } catch (e) {
        metrics.grpcRequests.inc({ method: 'Subscribe', code: 'INVALID_ARGUMENT' });
        call.emit('error', toServiceError(e));
        return;
      }
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
      call.on('cancelled', () => sub.close());
      sub
        .run()
        .then(
          () => {
            metrics.grpcRequests.inc({ method: 'Subscribe', code: 'OK' });
            if (!call.cancelled) call.end();
          },
          (e: unknown) => {
            const se = toServiceError(e);
            metrics.grpcRequests.inc({ method: 'Subscribe', code: grpc.status[se.code ?? 2] ?? 'UNKNOWN' });
            if (!call.cancelled) call.emit('error', se);
          },
        )
        .finally(() => {
          clearInterval(tick);
          account();
          subs.delete(sub);
          metrics.subscriptionsActive.dec();
        });
    },
  });

  server.addService(defs.ClusterService.service, {
    GetStatus: unary('GetStatus', async () => ({
      mode: cluster.cluster.mode,
      clusterId: cluster.cluster.clusterId,
      nodeId: cluster.node.id,
      leaderId: cluster.cluster.leader,
      epoch: String(cluster.cluster.epoch),
      members: cluster.cluster.members.map((m) => ({ id: m.id, address: m.address })),
    })),
  });

  let port: number;
  try {
    port = await new Promise<number>((resolve, reject) => {
      server.bindAsync(
        `${host.includes(':') ? `[${host}]` : host}:${options.port ?? 0}`,
        grpc.ServerCredentials.createInsecure(),
        (err, p) => (err ? reject(err) : resolve(p)),
      );
    });
  } catch (e) {
    await store.close();
    throw chronactaError(
      ChronactaCode.UNAVAILABLE,
      `cannot bind gRPC on ${host}:${options.port ?? 0}: ${(e as Error).message}`,
    );
  }
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  cluster = await recordAddress(prepared, address);

  let metricsServer: MetricsServer | undefined;
  if (options.metricsPort !== undefined) {
    try {
      metricsServer = await startMetricsServer(options.metricsHost ?? host, options.metricsPort, store, metrics, {
        ...(options.minFreeBytes !== undefined ? { minFreeBytes: options.minFreeBytes } : {}),
      });
    } catch (e) {
      server.forceShutdown();
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
    subscriptions: () => [...subs].map((s) => ({ ...s.stats })),
    close() {
      if (!closing) {
        closing = (async () => {
          if (compactTimer) clearInterval(compactTimer);
          for (const s of subs) s.close();
          await new Promise<void>((resolve) => {
            const force = setTimeout(() => {
              server.forceShutdown();
              resolve();
            }, 2000);
            server.tryShutdown(() => {
              clearTimeout(force);
              resolve();
            });
          });
          await metricsServer?.close();
          await store.close();
        })();
      }
      return closing;
    },
  };
}

/** A gRPC server stream as a subscription sink: full when its write buffer is. */
function sinkOf(call: grpc.ServerWritableStream<WireSubscribeRequest, unknown>): SubscriptionSink {
  let closed = false;
  const waiters = new Set<() => void>();
  const finish = () => {
    closed = true;
    for (const w of waiters) w();
    waiters.clear();
  };
  call.on('cancelled', finish);
  call.on('close', finish);
  call.on('error', finish);
  call.on('drain', () => {
    for (const w of waiters) w();
    waiters.clear();
  });
  return {
    get closed() {
      return closed || call.cancelled || call.destroyed;
    },
    write(msg: SubscriptionMessage) {
      return call.write(messageToWire(msg));
    },
    drained() {
      if (closed || call.cancelled) return Promise.resolve();
      return new Promise<void>((resolve) => waiters.add(resolve));
    },
  };
}
