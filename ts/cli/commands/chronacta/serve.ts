/** `plexus chronacta serve` and `plexus chronacta migrate`: run a server on a data directory, or bring a data directory to the current layout. */
import { access } from 'node:fs/promises';
import { findDataLogs, truncateDamagedTail } from '../../../chronacta/data-dir-logs.js';
import { ChronactaCode, chronactaError } from '../../../chronacta/errors.js';
import { dataPaths, haConfigOf, MAX_GROUP_COMMIT_BYTES, prepareDataDir } from '../../../chronacta/layout.js';
import { type GrpcLimits, LIMIT_RANGES } from '../../../chronacta/limits.js';
import { loadMemberTls } from '../../../chronacta/member-tls.js';
import { migrateDataDir } from '../../../chronacta/migrate.js';
import { startServer } from '../../../chronacta/server.js';
import type { PlexusError } from '../../../core/errors.js';
import { parse, UsageError, untilStopped } from '../../command.js';
import { applyHeapGrowingPercent, DEFAULT_HEAP_GROWING_PERCENT, MAX_HEAP_GROWING_PERCENT } from '../../heap.js';
import { num, out, port, quietIpServerName, ranged, warnLogger } from './shared.js';

/** The `serve` flags of the gRPC port's bounds (limits.ts). */
const LIMIT_FLAGS: readonly (readonly [string, keyof GrpcLimits])[] = [
  ['max-connections', 'maxConnections'],
  ['max-connections-per-client', 'maxConnectionsPerClient'],
  ['max-concurrent-streams', 'maxConcurrentStreams'],
  ['max-buffered-bytes-per-connection', 'maxBufferedBytesPerConnection'],
  ['max-buffered-bytes', 'maxBufferedBytes'],
  ['max-subscriptions', 'maxSubscriptions'],
  ['max-subscriptions-per-connection', 'maxSubscriptionsPerConnection'],
  ['stall-timeout-ms', 'stallTimeoutMs'],
  ['request-timeout-ms', 'requestTimeoutMs'],
  ['idle-timeout-ms', 'idleTimeoutMs'],
];

function limitsOf(values: Record<string, string | boolean | undefined>): Partial<GrpcLimits> {
  const out: Partial<Record<keyof GrpcLimits, number>> = {};
  for (const [flag, key] of LIMIT_FLAGS) {
    const v = num(flag, values[flag] as string | undefined);
    if (v === undefined) continue;
    const [lo, hi] = LIMIT_RANGES[key];
    if (v < lo || v > hi) throw new UsageError('chronacta', `--${flag} takes ${lo} to ${hi}, got ${v}`);
    out[key] = v;
  }
  return out;
}

export async function serve(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: {
      data: { type: 'string' },
      host: { type: 'string' },
      port: { type: 'string' },
      'metrics-port': { type: 'string' },
      fsync: { type: 'string' },
      'segment-bytes': { type: 'string' },
      'compact-every-ms': { type: 'string' },
      cluster: { type: 'boolean' },
      'tick-ms': { type: 'string' },
      'readiness-max-replication-lag': { type: 'string' },
      'max-read-lag': { type: 'string' },
      'max-read-staleness-ms': { type: 'string' },
      'group-commit-bytes': { type: 'string' },
      'heap-growing-percent': { type: 'string' },
      'truncate-damaged-tail': { type: 'boolean' },
      'cert-file': { type: 'string' },
      'key-file': { type: 'string' },
      'trusted-ca-file': { type: 'string' },
      'client-cert-auth': { type: 'boolean' },
      'auth-tokens-file': { type: 'string' },
      ...Object.fromEntries(LIMIT_FLAGS.map(([flag]) => [flag, { type: 'string' as const }])),
      'raft-tls': { type: 'string' },
    },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  const limits = limitsOf(values as Record<string, string | boolean | undefined>);
  const clustered = values.cluster === true;
  const clientAuth = {
    ...(values['cert-file'] !== undefined ? { certFile: values['cert-file'] } : {}),
    ...(values['key-file'] !== undefined ? { keyFile: values['key-file'] } : {}),
    ...(values['trusted-ca-file'] !== undefined ? { trustedCaFile: values['trusted-ca-file'] } : {}),
    ...(values['client-cert-auth'] ? { clientCertAuth: true } : {}),
    ...(values['auth-tokens-file'] !== undefined ? { authTokensFile: values['auth-tokens-file'] } : {}),
  };
  const raftTls = values['raft-tls'];
  if (raftTls !== undefined && !clustered) throw new UsageError('chronacta', '--raft-tls goes with --cluster');
  if (raftTls !== undefined && raftTls !== 'required' && raftTls !== 'permissive') {
    throw new UsageError('chronacta', `--raft-tls is required or permissive, got "${raftTls}"`);
  }
  const tickMs = num('tick-ms', values['tick-ms']);
  const maxLag = num('readiness-max-replication-lag', values['readiness-max-replication-lag']);
  const maxReadLag = num('max-read-lag', values['max-read-lag']);
  const maxReadStalenessMs = num('max-read-staleness-ms', values['max-read-staleness-ms']);
  const groupCommitBytes = num('group-commit-bytes', values['group-commit-bytes']);
  if (
    !clustered &&
    (tickMs !== undefined ||
      maxLag !== undefined ||
      maxReadLag !== undefined ||
      maxReadStalenessMs !== undefined ||
      groupCommitBytes !== undefined)
  ) {
    throw new UsageError(
      'chronacta',
      '--tick-ms, --readiness-max-replication-lag, --max-read-lag, --max-read-staleness-ms and --group-commit-bytes go with --cluster',
    );
  }
  if (groupCommitBytes !== undefined && groupCommitBytes > MAX_GROUP_COMMIT_BYTES) {
    throw new UsageError('chronacta', `--group-commit-bytes takes 0 to ${MAX_GROUP_COMMIT_BYTES}`);
  }
  if (maxReadStalenessMs !== undefined && (maxReadStalenessMs < 1 || maxReadStalenessMs > 3_600_000)) {
    throw new UsageError('chronacta', '--max-read-staleness-ms takes 1 to 3600000');
  }
  if (tickMs !== undefined && (tickMs < 1 || tickMs > 10_000)) {
    throw new UsageError('chronacta', '--tick-ms takes 1 to 10000');
  }
  if (clustered) {
    // A member's directory is made by `cluster init` or `cluster join-files`; anything else is
    // refused before a file is written into it.
    const file = dataPaths(values.data ?? 'data').clusterFile;
    const member = await access(file).then(
      () => true,
      () => false,
    );
    if (!member) {
      throw chronactaError(
        ChronactaCode.BAD_DATA_DIR,
        `${values.data ?? 'data'} is not a cluster member's data directory (no ${file}): make one with ` +
          '`plexus chronacta cluster init` or `plexus chronacta cluster join-files`',
        { file },
      );
    }
  }
  // A member made by `cluster join-files` starts empty and never bootstraps a configuration.
  const ha = clustered ? haConfigOf(await prepareDataDir(values.data ?? 'data')) : undefined;
  const joining = ha?.join === true;
  // Members speak mutual TLS with the certificates in the data directory; none, no start.
  const tls = ha ? await loadMemberTls(values.data ?? 'data', ha.id) : undefined;
  let fatal: (err: PlexusError) => void = () => undefined;
  const failed = new Promise<PlexusError>((resolve) => {
    fatal = resolve;
  });
  const fsync = values.fsync;
  if (fsync !== undefined && fsync !== 'batch' && fsync !== 'always' && fsync !== 'never') {
    throw new UsageError('chronacta', `--fsync is batch, always or never, got "${fsync}"`);
  }
  const segmentBytes = ranged('segment-bytes', values['segment-bytes'], 128, 1024 * 1024 * 1024);
  // A timer's longest delay (about 24.8 days); 0 would compact in a busy loop.
  const compactEveryMs = ranged('compact-every-ms', values['compact-every-ms'], 1, 2 ** 31 - 1);
  const heapGrowing = num('heap-growing-percent', values['heap-growing-percent']) ?? DEFAULT_HEAP_GROWING_PERCENT;
  if (heapGrowing > MAX_HEAP_GROWING_PERCENT) {
    throw new UsageError('chronacta', `--heap-growing-percent takes 0 to ${MAX_HEAP_GROWING_PERCENT}`);
  }
  const heapGrowingPercent = applyHeapGrowingPercent(heapGrowing);
  if (values['truncate-damaged-tail'] === true) {
    // Cut on purpose, before the store opens its logs: each cut is reported on standard error.
    for (const l of await findDataLogs(values.data ?? 'data', { allowEmpty: true })) {
      await truncateDamagedTail(l.dir, warnLogger);
    }
  }
  // A member with TLS dials its leader's client port by IP address (follower-read probes).
  if (clientAuth.certFile !== undefined) quietIpServerName();
  const server = await startServer({
    dataDir: values.data ?? 'data',
    host: values.host ?? '127.0.0.1',
    ...(clustered ? {} : { port: port('port', values.port) ?? 2113 }),
    ...(clustered && values.port !== undefined ? { port: port('port', values.port) } : {}),
    ...(clustered
      ? {
          cluster: true,
          replication: {
            ...(tickMs !== undefined ? { tickMs } : {}),
            ...(groupCommitBytes !== undefined ? { groupCommitBytes } : {}),
            ...(tls
              ? { tls: { ...tls, mode: raftTls === 'permissive' ? ('permissive' as const) : ('required' as const) } }
              : {}),
            onFatal: (err: PlexusError) => fatal(err),
          },
          ...(maxLag !== undefined ? { readinessMaxReplicationLag: maxLag } : {}),
          ...(maxReadLag !== undefined ? { maxReadLag } : {}),
          ...(maxReadStalenessMs !== undefined ? { maxReadStalenessMs } : {}),
        }
      : {}),
    metricsPort: port('metrics-port', values['metrics-port']) ?? 2114,
    clientAuth,
    limits,
    ...(fsync ? { fsync } : {}),
    ...(segmentBytes !== undefined ? { segmentBytes } : {}),
    ...(compactEveryMs !== undefined ? { compactEveryMs } : {}),
    logger: {
      warn: (message, details) =>
        process.stderr.write(
          `plexus chronacta: ${message}${details === undefined ? '' : ` ${JSON.stringify(details, (_k, v) => (typeof v === 'bigint' ? String(v) : v))}`}\n`,
        ),
    },
  });
  const api = server.clusterApi;
  // The signal handlers go in before the serving line: whoever reads it may send SIGTERM at once.
  const stopped = untilStopped();
  out({
    event: 'serving',
    address: server.address,
    metrics: server.metricsAddress,
    dataDir: server.store.dataDir,
    lastPosition: server.store.lastPosition,
    heapGrowingPercent,
    security: server.security,
    ...(clustered
      ? { cluster: true, id: server.store.clusterStatus()?.id, join: joining, raftTls: raftTls ?? 'required' }
      : {}),
    ...(api ? { followerReads: api.bounds } : {}),
  });
  // A member whose node stopped for good does not run on doing nothing: it exits with the code.
  const failure = await Promise.race([stopped.then(() => undefined), failed]);
  await server.close();
  if (failure) {
    out({ event: 'failed', code: failure.code, message: failure.message });
    throw failure;
  }
  out({ event: 'stopped' });
  return 0;
}

export async function migrate(args: string[]): Promise<number> {
  const { values, positionals } = parse('chronacta', {
    args,
    allowPositionals: true,
    options: { data: { type: 'string' } },
  });
  if (positionals.length > 0) throw new UsageError('chronacta', `unexpected argument "${positionals[0]}"`);
  out({ event: 'migrated', ...(await migrateDataDir(values.data ?? 'data')) });
  return 0;
}
