/**
 * Metrics of a cluster node (prom-client, one registry per node) and its metrics port:
 * `/metrics` (Prometheus text), `/healthz` (the process serves), `/readyz` (the node joined,
 * is not leaving, and its data directory's disk takes an fsync). The HTTP part is
 * ts/net/metrics-http.ts, shared with Chronacta. On loopback the port serves plain HTTP;
 * bound to any other address it serves HTTPS with mutual TLS 1.3 and takes only client
 * certificates of the cluster's CA that name a node of the cluster.
 */
import { randomUUID } from 'node:crypto';
import { open as openFile, unlink } from 'node:fs/promises';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { nodeOfPeer } from '../net/ca.js';
import { type MetricsServer, type Readiness, serveMetricsHttp } from '../net/metrics-http.js';
import type { MacrostepEntry } from '../runtime/types.js';
import type { AppendOptions, FramedBatch, LogStorage } from '../storage/types.js';
import { ClusterCode, clusterError } from './errors.js';
import type { ClusterNode } from './node.js';

const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/** Whether `host` is a loopback address or `localhost` (the metrics port then serves plain HTTP). */
export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (isIP(host) === 6) return host === '::1' || /^::ffff:127\./i.test(host);
  return false;
}

/** A counter that follows a total kept elsewhere (it never goes down), read at each scrape. */
function followingCounter(registry: Registry, name: string, help: string, total: () => number | bigint): Counter {
  let seen = 0;
  return new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      const now = Number(total());
      if (now > seen) {
        this.inc(now - seen);
        seen = now;
      }
    },
  });
}

export class NodeMetrics {
  readonly registry = new Registry();
  readonly macrosteps = new Counter({
    name: 'plexus_node_macrosteps_total',
    help: 'Macrosteps this node ran and journaled',
    registers: [this.registry],
  });
  readonly journalAppends = new Counter({
    name: 'plexus_node_journal_appends_total',
    help: 'Appends to shard journals acknowledged durable, by outcome (ok, or the error code)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly journalAppendSeconds = new Histogram({
    name: 'plexus_node_journal_append_duration_seconds',
    help: 'From handing a journal append to the log until it is durable (write and group-commit fsync)',
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly fsyncSeconds = new Histogram({
    name: 'plexus_node_fsync_duration_seconds',
    help: 'Time to write and fsync a probe file in the data directory (each readiness check)',
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  /** Called by the runtime after each macrostep. */
  readonly onMacrostep = (_iri: string, _entry: MacrostepEntry): void => {
    this.macrosteps.inc();
  };

  /** `open` with every store it opens counting and timing its appends. */
  observeOpen(open: (shard: number) => Promise<LogStorage>): (shard: number) => Promise<LogStorage> {
    return async (shard) => this.observe(await open(shard));
  }

  private observe(log: LogStorage): LogStorage {
    const timed =
      <A extends unknown[], R>(fn: (...a: A) => Promise<R>) =>
      async (...a: A): Promise<R> => {
        const t0 = performance.now();
        try {
          const r = await fn(...a);
          this.journalAppends.inc({ outcome: 'ok' });
          this.journalAppendSeconds.observe((performance.now() - t0) / 1000);
          return r;
        } catch (e) {
          this.journalAppends.inc({ outcome: String((e as { code?: unknown }).code ?? 'error') });
          throw e;
        }
      };
    const append = timed((p: readonly Uint8Array[], o?: AppendOptions) => log.append(p, o));
    const framed = log.appendFramed
      ? timed((b: FramedBatch, o?: AppendOptions) =>
          (log.appendFramed as NonNullable<LogStorage['appendFramed']>)(b, o),
        )
      : undefined;
    return new Proxy(log, {
      get(target, prop) {
        if (prop === 'append') return append;
        if (prop === 'appendFramed') return framed;
        const v = Reflect.get(target, prop, target);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
  }

  /** The metrics read from a running node at each scrape. */
  follow(cn: ClusterNode, deadLetters: () => bigint): void {
    const r = this.registry;
    const stats = cn.processor.stats;
    followingCounter(
      r,
      'plexus_node_messages_out_total',
      'Actor messages this node sent to other nodes',
      () => stats.sent,
    );
    followingCounter(
      r,
      'plexus_node_messages_in_total',
      'Actor messages from other nodes delivered to actors here',
      () => stats.delivered,
    );
    followingCounter(
      r,
      'plexus_node_wire_retries_total',
      'Sends tried again (another attempt after a failed or unacknowledged one)',
      () => stats.retries,
    );
    followingCounter(
      r,
      'plexus_node_messages_forwarded_total',
      'Actor messages this node forwarded to the owner of their shard',
      () => stats.forwarded,
    );
    followingCounter(
      r,
      'plexus_node_messages_failed_total',
      'Actor messages whose sender got error.communication (deadline, hop limit)',
      () => stats.failed,
    );
    followingCounter(
      r,
      'plexus_node_dead_letters_total',
      "Frames dropped into this node's dead-letter log (stale fencing epoch, hop limit), since the log began",
      deadLetters,
    );
    followingCounter(
      r,
      'plexus_node_communication_errors_total',
      'error.communication events delivered to actors here',
      () => cn.node.stats.communicationErrors,
    );
    followingCounter(r, 'plexus_node_activations_total', 'Actors activated here', () => cn.node.stats.activations);
    new Gauge({
      name: 'plexus_node_leases_held',
      help: 'Shard leases this node holds now',
      registers: [r],
      collect() {
        this.set(cn.membership.held().filter((l) => cn.membership.leaseFor(l.shard) !== undefined).length);
      },
    });
    new Gauge({
      name: 'plexus_node_members',
      help: 'Members in this node’s view, by status',
      labelNames: ['status'] as const,
      registers: [r],
      collect() {
        this.reset();
        for (const m of cn.membership.view().members) this.inc({ status: m.status });
      },
    });
  }

  /** Ready: the node is an alive member of its view, has not left, and its data directory takes an fsync. */
  async readiness(cn: ClusterNode, dataDir: string): Promise<Readiness> {
    const checks: Record<string, { ok: boolean; detail?: string }> = {};
    const me = cn.membership.view().members.find((m) => m.id === cn.self);
    checks.member =
      me?.status === 'alive' && !cn.left
        ? { ok: true }
        : { ok: false, detail: cn.left ? 'left the cluster' : `membership status ${me?.status ?? 'not joined'}` };
    const probe = join(dataDir, `.probe-${randomUUID()}`);
    const t0 = performance.now();
    try {
      const fh = await openFile(probe, 'w');
      try {
        await fh.writeFile('probe');
        await fh.sync();
      } finally {
        await fh.close();
      }
      this.fsyncSeconds.observe((performance.now() - t0) / 1000);
      checks.disk = { ok: true };
    } catch (e) {
      checks.disk = { ok: false, detail: `cannot write and fsync in the data directory: ${(e as Error).message}` };
    } finally {
      await unlink(probe).catch(() => {});
    }
    return { ready: Object.values(checks).every((c) => c.ok), checks };
  }
}

/**
 * Starts a node's metrics port (`metrics: { host, port }` of its config). Loopback: plain
 * HTTP. Any other host: HTTPS with mutual TLS 1.3 with the node's own certificate, and only
 * clients with a certificate of the cluster's CA naming a node of `cluster` may scrape.
 * PLX_CLUSTER_LISTEN when the port cannot be bound.
 */
export async function startNodeMetrics(opts: {
  readonly metrics: NodeMetrics;
  readonly node: ClusterNode;
  readonly cluster: string;
  readonly dataDir: string;
  readonly deadLetters: () => bigint;
  readonly host?: string;
  readonly port: number;
  /** PEM texts of the node's certificate, key and the cluster CA. */
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string };
}): Promise<MetricsServer> {
  const host = opts.host ?? '127.0.0.1';
  opts.metrics.follow(opts.node, opts.deadLetters);
  try {
    return await serveMetricsHttp({
      host,
      port: opts.port,
      source: opts.metrics.registry,
      readiness: () => opts.metrics.readiness(opts.node, opts.dataDir),
      ...(isLoopbackHost(host)
        ? {}
        : { tls: { ...opts.tls, authorize: (peer) => nodeOfPeer(peer, opts.cluster) !== undefined } }),
    });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw clusterError(
      ClusterCode.LISTEN,
      `node ${opts.node.self} cannot serve metrics on ${host}:${opts.port}: ${code === 'EADDRINUSE' ? 'the port is taken' : (e as Error).message}`,
      { field: 'metrics', address: `${host}:${opts.port}`, errno: code },
      e,
    );
  }
}
