/**
 * What the tests of the gRPC port's bounds share: `plexus chronacta serve` from dist/ in a child
 * process (optionally under a lower open-file limit), its resident memory from /proc, and a raw
 * HTTP/2 gRPC client that can do what a misbehaving client does (stop reading, never finish a
 * request, send any grpc-timeout).
 */
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import { join } from 'node:path';
import { methodDefinition } from '../../ts/chronacta/proto.js';
import { ROOT } from '../helpers/paths.js';
import { startNode } from '../helpers/processes.js';

/**
 * The CLI the tests start: dist/ of this checkout, or (PLEXUS_TEST_SERVE_MAIN) another build's
 * `dist/cli/main.js`, to measure the same cases against a plexus without these limits; with
 * PLEXUS_TEST_SERVE_PLAIN=1 the limit flags (which such a build refuses) are left out.
 */
export const MAIN = process.env.PLEXUS_TEST_SERVE_MAIN ?? join(ROOT, 'dist/cli/main.js');
const PLAIN = process.env.PLEXUS_TEST_SERVE_PLAIN === '1';
const LIMIT_FLAGS = new Set([
  '--max-connections',
  '--max-connections-per-client',
  '--max-concurrent-streams',
  '--max-buffered-bytes-per-connection',
  '--max-buffered-bytes',
  '--max-subscriptions',
  '--max-subscriptions-per-connection',
  '--stall-timeout-ms',
  '--request-timeout-ms',
  '--idle-timeout-ms',
]);

/** `flags` without the limit flags (and their values) when PLEXUS_TEST_SERVE_PLAIN is set. */
function served(flags: readonly string[]): string[] {
  if (!PLAIN) return [...flags];
  const out: string[] = [];
  for (let i = 0; i < flags.length; i++) {
    if (LIMIT_FLAGS.has(flags[i] as string)) i++;
    else out.push(flags[i] as string);
  }
  return out;
}

export interface Served {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly address: string;
  readonly metrics: string;
  output(): string;
  /** SIGTERM by PID, SIGKILL after 5 s; resolves once it exited. */
  stop(): Promise<void>;
}

/** `plexus chronacta serve --data DIR --port 0 --metrics-port 0 ...flags`, under `ulimit -n files` when given. */
export async function serveProcess(dataDir: string, flags: readonly string[], files?: number): Promise<Served> {
  const args = ['chronacta', 'serve', '--data', dataDir, '--port', '0', '--metrics-port', '0', ...served(flags)];
  // `exec` keeps the PID: the shell becomes node.
  const p = startNode(
    MAIN,
    args,
    files === undefined ? {} : { under: ['/bin/sh', '-c', `ulimit -n ${files} && exec "$0" "$@"`] },
  );
  p.child.stdin?.end();
  const stop = async () => {
    await p.stop('SIGTERM', 5000);
  };
  const first = await p
    .line((l) => l.includes('"serving"'), { timeoutMs: 30_000, what: 'serve to start' })
    .catch(async (e: unknown) => {
      await stop();
      throw new Error(`serve did not start: ${p.stdout()} ${p.stderr()}`, { cause: e });
    });
  const line = JSON.parse(first) as { address: string; metrics: string };
  return {
    child: p.child,
    pid: p.pid,
    address: line.address,
    metrics: line.metrics,
    output: () => `${p.stdout()}${p.stderr()}`,
    stop,
  };
}

/** The resident set size of process `pid` in bytes (VmRSS of /proc/PID/status). */
export function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

/** Samples the RSS of `pid` every 20 ms until `stop()`; `peak()` is the largest seen. */
export function rssSampler(pid: number): { peak(): number; stop(): void } {
  let peak = rssBytes(pid);
  const t = setInterval(() => {
    try {
      peak = Math.max(peak, rssBytes(pid));
    } catch {
      // the process has exited
    }
  }, 20);
  return {
    peak: () => Math.max(peak, rssBytes(pid)),
    stop: () => clearInterval(t),
  };
}

/** A metric's value from the Prometheus text of `metrics` (host:port); the sum over matching series. */
export async function metric(metrics: string, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`http://${metrics}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const [series, value] = line.split(' ');
    if (series === undefined || value === undefined) continue;
    const base = series.split('{')[0];
    if (base === name && series.includes(labels)) sum += Number(value);
  }
  return sum;
}

export async function readyz(metrics: string): Promise<{ status: number; body: string }> {
  const r = await fetch(`http://${metrics}/readyz`);
  return { status: r.status, body: await r.text() };
}

/** An HTTP/2 connection to `address` that takes data only as the test reads it (64 KiB windows). */
export function connect(address: string, localAddress?: string): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const s = http2.connect(`http://${address}`, {
      settings: { initialWindowSize: 65_535 },
      ...(localAddress ? { localAddress } : {}),
    });
    s.once('connect', () => {
      s.off('error', reject);
      s.on('error', () => {});
      resolve(s);
    });
    s.once('error', reject);
  });
}

/** A gRPC message with its 5-byte prefix. */
export function framed(message: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

export function request(method: string, req: object): Buffer {
  return framed(methodDefinition('EventStore', method).requestSerialize(req) as Buffer);
}

export interface RawCall {
  readonly stream: http2.ClientHttp2Stream;
  /** Response headers (or a trailers-only response), when they come. */
  readonly headers: Promise<http2.IncomingHttpHeaders & http2.IncomingHttpStatusHeader>;
  /** Once the stream closed: grpc-status (undefined: none came), grpc-message, the RST_STREAM code, bytes read. */
  readonly closed: Promise<{ status: number | undefined; message: string; rstCode: number; bytes: number }>;
}

/**
 * A gRPC call on `session` at `/plexus.chronacta.v1.EventStore/METHOD`: sends `body`, ends the
 * request unless `end` is false, and reads the response only when `read` is true.
 */
export function rawCall(
  session: http2.ClientHttp2Session,
  method: string,
  body: Uint8Array,
  opts: { end?: boolean; read?: boolean; headers?: Record<string, string> } = {},
): RawCall {
  const stream = session.request({
    ':method': 'POST',
    ':path': `/plexus.chronacta.v1.EventStore/${method}`,
    'content-type': 'application/grpc',
    te: 'trailers',
    ...opts.headers,
  });
  stream.on('error', () => {});
  let status: number | undefined;
  let message = '';
  let bytes = 0;
  const take = (h: http2.IncomingHttpHeaders) => {
    if (h['grpc-status'] !== undefined) status = Number(h['grpc-status']);
    if (typeof h['grpc-message'] === 'string') message = decodeURIComponent(h['grpc-message']);
  };
  const headers = new Promise<http2.IncomingHttpHeaders & http2.IncomingHttpStatusHeader>((resolve) =>
    stream.once('response', (h) => {
      take(h);
      resolve(h);
    }),
  );
  stream.on('trailers', take);
  if (opts.read) {
    stream.on('data', (d: Buffer) => {
      bytes += d.length;
    });
  } else stream.pause();
  const closed = new Promise<{ status: number | undefined; message: string; rstCode: number; bytes: number }>(
    (resolve) => stream.once('close', () => resolve({ status, message, rstCode: stream.rstCode ?? 0, bytes })),
  );
  if (opts.end === false) stream.write(body);
  else stream.end(body);
  return { stream, headers, closed };
}

export const MIB = 1024 * 1024;
