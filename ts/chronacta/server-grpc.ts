/**
 * The gRPC port of a Chronacta server: the method table (server-methods.ts) served by the
 * lean gRPC server (grpc-server.ts) with the port's security, bounds and call metrics.
 */
import { status as grpcStatus } from '@grpc/grpc-js';
import type { ClockTimers } from '../core/clock.js';
import { isPlexusError } from '../core/errors.js';
import type { StorageLogger } from '../storage/types.js';
import type { ClientPortSecurity } from './client-auth.js';
import { ChronactaCode, chronactaError } from './errors.js';
import { type GrpcMethod, type GrpcServer, startGrpcServer } from './grpc-server.js';
import type { GrpcLimits } from './limits.js';
import { type ChronactaMetrics, limitMetrics } from './metrics.js';
import { MAX_MESSAGE_BYTES } from './proto.js';
import { CODE_KEY, DETAILS_KEY, toCallStatus } from './status.js';

export interface GrpcPortDeps {
  readonly host: string;
  /** 0: any free port. */
  readonly port: number;
  readonly methods: Map<string, GrpcMethod>;
  readonly security: ClientPortSecurity;
  readonly limits: GrpcLimits;
  readonly metrics: ChronactaMetrics;
  readonly logger?: StorageLogger | undefined;
  /** Time and timers of the port's sweeps and call timeouts (default `systemClock`). */
  readonly clock?: ClockTimers;
}

/** Counts ended calls by method and status (`chronacta_grpc_requests_total`). */
class CallCounter {
  private readonly ok = new Map<string, { inc(): void }>();
  private readonly names = new Map<string, string>();

  constructor(
    private readonly metrics: ChronactaMetrics,
    paths: Iterable<string>,
  ) {
    for (const path of paths) this.names.set(path, path.slice(path.lastIndexOf('/') + 1));
  }

  ended(path: string, code: number): void {
    const method = this.names.get(path) ?? 'unknown';
    if (code === 0) {
      let c = this.ok.get(method);
      if (!c) {
        c = this.metrics.grpcRequests.labels(method, 'OK');
        this.ok.set(method, c);
      }
      c.inc();
    } else this.metrics.grpcRequests.inc({ method, code: grpcStatus[code] ?? 'UNKNOWN' });
  }
}

/**
 * Binds and serves the gRPC port, then has `security` watch its files for the server.
 * Refuses with PLX_CHRONACTA_UNAVAILABLE when the port cannot be bound.
 */
export async function serveGrpcPort(deps: GrpcPortDeps): Promise<GrpcServer> {
  const { host, port, methods, security, limits, metrics, logger, clock } = deps;
  const calls = new CallCounter(metrics, methods.keys());
  let server: GrpcServer | undefined;
  const onLimit = limitMetrics(metrics, () => server?.load());
  try {
    server = await startGrpcServer(host, port, methods, {
      maxMessageBytes: MAX_MESSAGE_BYTES,
      ...(security.tls ? { tls: security.tls } : {}),
      ...(security.tokens ? { authenticate: security.authenticate } : {}),
      limits,
      ...(clock ? { clock } : {}),
      onLimit,
      limitMetadata: (reason) => ({
        [CODE_KEY]: ChronactaCode.OVERLOADED,
        [DETAILS_KEY]: JSON.stringify({ reason }),
      }),
      statusOf: (e: unknown) => {
        if (!isPlexusError(e)) logger?.warn('chronacta: unexpected failure in a call', { error: String(e) });
        return toCallStatus(e);
      },
      onEnd: (path, code) => calls.ended(path, code),
    });
  } catch (e) {
    throw chronactaError(ChronactaCode.UNAVAILABLE, `cannot bind gRPC on ${host}:${port}: ${(e as Error).message}`);
  }
  if (server.secure) security.watch(server.secure);
  else security.watch(undefined);
  return server;
}
