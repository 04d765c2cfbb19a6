/**
 * The bounds of a gRPC server's connections, calls and memory (docs/chronacta.md, "Server limits"),
 * and the accounting that enforces them: bytes buffered per connection and in total (request
 * messages being received, response bytes the client has not taken yet), server-streaming calls
 * (subscriptions) per connection and in total. grpc-server.ts asks before it takes more and
 * refuses with RESOURCE_EXHAUSTED beyond a bound.
 */
import { readFileSync } from 'node:fs';
import { type Clock, systemClock } from '../core/clock.js';
import { ChronactaCode, chronactaError } from './errors.js';

/** The largest delay a Node.js timer takes (2^31 - 1 ms, about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export interface GrpcLimits {
  /** Open connections in total; further ones are closed at once. */
  readonly maxConnections: number;
  /** Open connections from one remote address; further ones get GOAWAY and are closed. */
  readonly maxConnectionsPerClient: number;
  /** Concurrent calls (HTTP/2 streams) per connection: SETTINGS_MAX_CONCURRENT_STREAMS. */
  readonly maxConcurrentStreams: number;
  /** Bytes buffered for one connection: requests being received plus responses not yet taken. */
  readonly maxBufferedBytesPerConnection: number;
  /** The same, over every connection. */
  readonly maxBufferedBytes: number;
  /** Server-streaming calls (subscriptions) open in total. */
  readonly maxSubscriptions: number;
  /** Server-streaming calls (subscriptions) open on one connection. */
  readonly maxSubscriptionsPerConnection: number;
  /** A call whose client takes none of its pending response bytes for this long is reset. */
  readonly stallTimeoutMs: number;
  /** A call whose request has not fully arrived after this long ends with DEADLINE_EXCEEDED. */
  readonly requestTimeoutMs: number;
  /** A connection with no call open for this long is closed (GOAWAY). */
  readonly idleTimeoutMs: number;
}

/** The process's limit on open files (its soft RLIMIT_NOFILE), when /proc tells. */
export function openFileLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    const n = Number(soft);
    return Number.isSafeInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

/** 4096, but never more than half the open-file limit: the rest stays for the log, the disk and the Raft port. */
export function defaultMaxConnections(): number {
  const files = openFileLimit();
  return files === undefined ? 4096 : Math.max(8, Math.min(4096, Math.floor(files / 2)));
}

const MIB = 1024 * 1024;

export const DEFAULT_LIMITS: Omit<GrpcLimits, 'maxConnections'> = {
  maxConnectionsPerClient: 512,
  maxConcurrentStreams: 1024,
  // Above the largest message (80 MiB), so one append or read of any allowed size fits.
  maxBufferedBytesPerConnection: 128 * MIB,
  maxBufferedBytes: 512 * MIB,
  maxSubscriptions: 1024,
  maxSubscriptionsPerConnection: 128,
  stallTimeoutMs: 30_000,
  requestTimeoutMs: 60_000,
  idleTimeoutMs: 300_000,
};

/** The range each limit takes (inclusive); a value outside is PLX_CHRONACTA_BAD_INPUT. */
export const LIMIT_RANGES: Readonly<Record<keyof GrpcLimits, readonly [number, number]>> = {
  maxConnections: [1, 1_000_000],
  maxConnectionsPerClient: [1, 1_000_000],
  maxConcurrentStreams: [1, 2 ** 31 - 1],
  maxBufferedBytesPerConnection: [1024, Number.MAX_SAFE_INTEGER],
  maxBufferedBytes: [1024, Number.MAX_SAFE_INTEGER],
  maxSubscriptions: [0, 1_000_000],
  maxSubscriptionsPerConnection: [0, 1_000_000],
  stallTimeoutMs: [100, MAX_TIMER_MS],
  requestTimeoutMs: [100, MAX_TIMER_MS],
  idleTimeoutMs: [100, MAX_TIMER_MS],
};

/** The defaults with `given` over them, each checked against its range. */
export function grpcLimits(given: Partial<GrpcLimits> = {}): GrpcLimits {
  const out = { ...DEFAULT_LIMITS, maxConnections: defaultMaxConnections() } as Record<keyof GrpcLimits, number>;
  for (const [k, v] of Object.entries(given) as [keyof GrpcLimits, number | undefined][]) {
    if (v === undefined) continue;
    const range = LIMIT_RANGES[k];
    if (!range) throw chronactaError(ChronactaCode.BAD_INPUT, `unknown server limit "${k}"`);
    if (!Number.isSafeInteger(v) || v < range[0] || v > range[1]) {
      throw chronactaError(ChronactaCode.BAD_INPUT, `the server limit ${k} takes ${range[0]} to ${range[1]}, got ${v}`);
    }
    out[k] = v;
  }
  return out;
}

/** What one connection holds. */
export class ConnectionLoad {
  /** Bytes buffered for it (requests being received, responses not yet taken). */
  buffered = 0;
  /** Its open calls and, of those, its server-streaming ones. */
  calls = 0;
  streaming = 0;
  /** When its last call ended or it opened (by the server's clock). */
  idleSince: number;

  constructor(clock: Clock = systemClock) {
    this.idleSince = clock.now();
  }
}

/** Why the server refused something; the metric's `reason` label. */
export type Refusal =
  | 'connections'
  | 'connections_per_client'
  | 'buffered_bytes'
  | 'subscriptions'
  | 'stalled'
  | 'request_timeout'
  | 'idle';

/** The accounting over every connection of one server. */
export class ServerLoad {
  buffered = 0;
  streaming = 0;
  connections = 0;

  constructor(readonly limits: GrpcLimits) {}

  /** True while `conn` or the server is at or above its byte bound: new calls are refused. */
  full(conn: ConnectionLoad): boolean {
    return conn.buffered >= this.limits.maxBufferedBytesPerConnection || this.buffered >= this.limits.maxBufferedBytes;
  }

  /** Whether `n` more bytes fit; a connection (and a server) holding nothing takes one message of any size. */
  fits(conn: ConnectionLoad, n: number): boolean {
    return (
      (conn.buffered === 0 || conn.buffered + n <= this.limits.maxBufferedBytesPerConnection) &&
      (this.buffered === 0 || this.buffered + n <= this.limits.maxBufferedBytes)
    );
  }

  take(conn: ConnectionLoad, n: number): void {
    conn.buffered += n;
    this.buffered += n;
  }

  give(conn: ConnectionLoad, n: number): void {
    conn.buffered -= n;
    this.buffered -= n;
  }

  /** Opens a server-streaming call on `conn`; false (nothing taken) beyond either bound. */
  startStreaming(conn: ConnectionLoad): boolean {
    if (conn.streaming >= this.limits.maxSubscriptionsPerConnection || this.streaming >= this.limits.maxSubscriptions) {
      return false;
    }
    conn.streaming++;
    this.streaming++;
    return true;
  }

  endStreaming(conn: ConnectionLoad): void {
    conn.streaming--;
    this.streaming--;
  }
}
