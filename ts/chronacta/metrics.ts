/**
 * Metrics of a Chronacta node (prom-client, one registry per server) and the HTTP endpoint
 * that serves them on their own port: `/metrics` (Prometheus text), `/healthz` (the
 * process serves) and `/readyz` (the store is open, its log takes writes, and the data
 * directory's disk takes an fsync and has room).
 */
import { randomUUID } from 'node:crypto';
import { open, statfs, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { type MetricsServer, type Readiness, serveMetricsHttp } from '../net/metrics-http.js';
import type { EventStore, StoreObserver } from './store.js';

const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

export class ChronactaMetrics {
  readonly registry = new Registry();
  readonly appends = new Counter({
    name: 'chronacta_appends_total',
    help: 'Appends finished, by outcome (ok, or the PlexusError code)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly appendedEvents = new Counter({
    name: 'chronacta_appended_events_total',
    help: 'Events appended durably',
    registers: [this.registry],
  });
  readonly appendedBytes = new Counter({
    name: 'chronacta_appended_bytes_total',
    help: 'Bytes of log record payloads appended durably',
    registers: [this.registry],
  });
  readonly appendSeconds = new Histogram({
    name: 'chronacta_append_duration_seconds',
    help: 'From handing an append to the log until it is durable (write, group commit fsync) and applied',
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly reads = new Counter({
    name: 'chronacta_reads_total',
    help: 'Reads, by kind (stream, all)',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly readEvents = new Counter({
    name: 'chronacta_read_events_total',
    help: 'Events returned by reads, by kind',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly readSeconds = new Histogram({
    name: 'chronacta_read_duration_seconds',
    help: 'Time of a read, by kind',
    labelNames: ['kind'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly logFsyncs = new Counter({
    name: 'chronacta_log_fsyncs_total',
    help: 'fsyncs of log segment files (one per group commit)',
    registers: [this.registry],
  });
  readonly fsyncSeconds = new Histogram({
    name: 'chronacta_fsync_duration_seconds',
    help: 'Time to write and fsync a probe file in the data directory (each readiness check)',
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly subscriptionsActive = new Gauge({
    name: 'chronacta_subscriptions_active',
    help: 'Subscriptions open now',
    registers: [this.registry],
  });
  readonly subscriptionsStarted = new Counter({
    name: 'chronacta_subscriptions_total',
    help: 'Subscriptions started',
    registers: [this.registry],
  });
  readonly subscriptionEvents = new Counter({
    name: 'chronacta_subscription_events_total',
    help: 'Events delivered to subscribers',
    registers: [this.registry],
  });
  readonly subscriptionFallbacks = new Counter({
    name: 'chronacta_subscription_fallbacks_total',
    help: 'Times a slow subscriber fell back from live delivery to catching up from disk',
    registers: [this.registry],
  });
  readonly grpcRequests = new Counter({
    name: 'chronacta_grpc_requests_total',
    help: 'gRPC calls finished, by method and status code name',
    labelNames: ['method', 'code'] as const,
    registers: [this.registry],
  });
  readonly lastPosition = new Gauge({
    name: 'chronacta_last_position',
    help: 'Global position of the last durable event',
    registers: [this.registry],
  });
  readonly clusterLeader = new Gauge({
    name: 'chronacta_cluster_leader',
    help: '1 when this node is the leader (always, in standalone mode)',
    registers: [this.registry],
  });
  readonly clusterEpoch = new Gauge({
    name: 'chronacta_cluster_epoch',
    help: 'The cluster epoch: the Raft term in cluster mode, 0 in standalone mode',
    registers: [this.registry],
  });
  readonly replicationLag = new Gauge({
    name: 'chronacta_replication_lag_positions',
    help: 'On the leader: positions the furthest-behind voting member lags (0 on followers and standalone)',
    registers: [this.registry],
  });
  readonly replicationAppendEntries = new Counter({
    name: 'chronacta_replication_append_entries_total',
    help: "Replicated batches (committed Raft entries) applied to this node's log",
    registers: [this.registry],
  });
  readonly replicationAppendGroups = new Counter({
    name: 'chronacta_replication_append_groups_total',
    help: 'On a leader: Raft entries it proposed carrying appends (group commit puts several in one)',
    registers: [this.registry],
  });
  readonly replicationGroupedAppends = new Counter({
    name: 'chronacta_replication_grouped_appends_total',
    help: 'On a leader: appends it proposed, counted in the entries of chronacta_replication_append_groups_total',
    registers: [this.registry],
  });
  /** What each counter that follows a replicated-log total has counted so far. */
  private readonly followed = new Map<Counter, number>();

  /** Moves `counter` up to `total`, a count the replicated log keeps (it never goes down). */
  private follow(counter: Counter, total: number): void {
    const seen = this.followed.get(counter) ?? 0;
    if (total <= seen) return;
    counter.inc(total - seen);
    this.followed.set(counter, total);
  }

  /** Sets the cluster gauges from the store's replication state (standalone: leader, epoch 0). */
  refreshCluster(store: EventStore): void {
    this.lastPosition.set(Number(store.lastPosition));
    const s = store.clusterStatus();
    if (!s) {
      this.clusterLeader.set(1);
      this.clusterEpoch.set(0);
      this.replicationLag.set(0);
      return;
    }
    this.clusterLeader.set(s.role === 'leader' ? 1 : 0);
    this.clusterEpoch.set(s.term);
    this.replicationLag.set(replicationLagOf(s));
    this.follow(this.replicationAppendEntries, s.appendEntriesApplied);
    this.follow(this.replicationAppendGroups, s.appendGroupsProposed);
    this.follow(this.replicationGroupedAppends, s.appendsGrouped);
  }

  /** The hooks the store reports through. */
  observer(): StoreObserver {
    const ok = this.appends.labels('ok');
    return {
      appended: (events, bytes, seconds) => {
        ok.inc();
        this.appendedEvents.inc(events);
        this.appendedBytes.inc(bytes);
        this.appendSeconds.observe(seconds);
      },
      appendFailed: (code) => this.appends.inc({ outcome: code }),
      read: (kind, events, seconds) => {
        this.reads.inc({ kind });
        this.readEvents.inc({ kind }, events);
        this.readSeconds.observe({ kind }, seconds);
      },
      synced: () => this.logFsyncs.inc(),
    };
  }
}

export type { Readiness } from '../net/metrics-http.js';

/** Below this much free space the node says it is not ready. */
export const DEFAULT_MIN_FREE_BYTES = 64 * 1024 * 1024;

/** On a leader: the largest lag in positions of a voting member; 0 elsewhere. */
export function replicationLagOf(s: NonNullable<ReturnType<EventStore['clusterStatus']>>): number {
  if (s.role !== 'leader') return 0;
  let lag = 0;
  for (const f of s.followers ?? []) if (!f.learner && f.lagPositions > lag) lag = f.lagPositions;
  return lag;
}

/** Checks the store, the disk (a probe file written and fsynced) and the free space. */
export async function checkReadiness(
  store: EventStore,
  metrics: ChronactaMetrics,
  minFreeBytes = DEFAULT_MIN_FREE_BYTES,
  maxReplicationLag = 0,
): Promise<Readiness> {
  const checks: Record<string, { ok: boolean; detail?: string }> = {};
  const h = store.healthy;
  checks.wal = h.ok ? { ok: true } : { ok: false, detail: h.reason ?? 'unhealthy' };
  const cs = store.clusterStatus();
  if (cs) {
    // ReadinessMaxReplicationLag: a leader is not ready while a voter lags more than this.
    const lag = replicationLagOf(cs);
    checks.replication =
      lag <= maxReplicationLag
        ? { ok: true, detail: `${cs.role}, term ${cs.term}, lag ${lag}` }
        : { ok: false, detail: `replication lag ${lag} positions is above ${maxReplicationLag}` };
  }
  const probe = join(store.dataDir, `.probe-${randomUUID()}`);
  const started = performance.now();
  try {
    const fh = await open(probe, 'w');
    try {
      await fh.writeFile('probe');
      await fh.sync();
    } finally {
      await fh.close();
    }
    metrics.fsyncSeconds.observe((performance.now() - started) / 1000);
    checks.disk = { ok: true };
  } catch (e) {
    checks.disk = { ok: false, detail: `cannot write and fsync in the data directory: ${(e as Error).message}` };
  } finally {
    await unlink(probe).catch(() => {});
  }
  try {
    const s = await statfs(store.dataDir);
    const free = s.bavail * s.bsize;
    checks.space =
      free >= minFreeBytes ? { ok: true } : { ok: false, detail: `${free} bytes free, below ${minFreeBytes}` };
  } catch (e) {
    checks.space = { ok: false, detail: (e as Error).message };
  }
  return { ready: Object.values(checks).every((c) => c.ok), checks };
}

export type { MetricsServer } from '../net/metrics-http.js';

/** Serves /metrics, /healthz and /readyz on `host:port` (port 0: any free port). */
export function startMetricsServer(
  host: string,
  port: number,
  store: EventStore,
  metrics: ChronactaMetrics,
  opts: { minFreeBytes?: number; maxReplicationLag?: number } = {},
): Promise<MetricsServer> {
  return serveMetricsHttp({
    host,
    port,
    source: metrics.registry,
    refresh: () => metrics.refreshCluster(store),
    readiness: () => checkReadiness(store, metrics, opts.minFreeBytes, opts.maxReplicationLag),
  });
}

/**
 * The gRPC server's bounds as metrics (docs/chronacta.md, "Server limits"): connections and buffered
 * bytes now, and what each bound refused or ended. Returns the hook the server calls.
 */
export function limitMetrics(
  metrics: ChronactaMetrics,
  load: () => { connections: number; bufferedBytes: number } | undefined,
): (reason: string) => void {
  const registers = [metrics.registry];
  new Gauge({
    name: 'chronacta_grpc_connections',
    help: 'gRPC connections open now',
    registers,
    collect() {
      this.set(load()?.connections ?? 0);
    },
  });
  new Gauge({
    name: 'chronacta_grpc_buffered_bytes',
    help: 'Bytes the gRPC server holds for its connections: requests being received, responses not yet taken',
    registers,
    collect() {
      this.set(load()?.bufferedBytes ?? 0);
    },
  });
  const limited = new Counter({
    name: 'chronacta_grpc_limited_total',
    help: 'Connections and calls refused or ended by a server limit, by reason (docs/chronacta.md, "Server limits")',
    labelNames: ['reason'] as const,
    registers,
  });
  return (reason) => limited.inc({ reason });
}
