/** Helpers shared by the `plexus chronacta` subcommands: number and address flags, the client flags, JSON output. */
import { ChronactaClient } from '../../../chronacta/client.js';
import { clientSecurityFromFiles } from '../../../chronacta/client-credentials.js';
import type { ExpectedVersion, SubscriptionTarget } from '../../../chronacta/types.js';
import { UsageError } from '../../command.js';

export const DEFAULT_SERVER = '127.0.0.1:2113';

export function num(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v)) throw new UsageError('chronacta', `--${name} takes a whole number, got "${v}"`);
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new UsageError('chronacta', `--${name} ${v} is above 2^53 - 1`);
  return n;
}

/** A whole number from `min` to `max`, or undefined when the option is absent. */
export function ranged(name: string, v: string | undefined, min: number, max: number): number | undefined {
  const n = num(name, v);
  if (n !== undefined && (n < min || n > max)) throw new UsageError('chronacta', `--${name} takes ${min} to ${max}`);
  return n;
}

/** A port to listen on: 0 (any free port) to 65535. */
export const port = (name: string, v: string | undefined) => ranged(name, v, 0, 65535);

/** --server: host:port with a port from 1 to 65535. */
function serverAddress(v: string | undefined): string {
  if (v === undefined) return DEFAULT_SERVER;
  const i = v.lastIndexOf(':');
  const p = i > 0 && /^\d{1,5}$/.test(v.slice(i + 1)) ? Number(v.slice(i + 1)) : 0;
  if (p < 1 || p > 65535) {
    throw new UsageError('chronacta', `--server takes host:port with a port from 1 to 65535, got "${v}"`);
  }
  return v;
}

export function big(name: string, v: string | undefined): bigint | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v)) throw new UsageError('chronacta', `--${name} takes a whole number, got "${v}"`);
  return BigInt(v);
}

export function expectedVersion(v: string | undefined): ExpectedVersion | undefined {
  if (v === undefined) return undefined;
  if (v === 'any' || v === 'no_stream' || v === 'exists') return v;
  if (/^\d+$/.test(v)) return BigInt(v);
  throw new UsageError('chronacta', `--expected-version is any, no_stream, exists or a version, got "${v}"`);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

export function text(b: Uint8Array): { text: string } | { base64: string } {
  try {
    return { text: utf8.decode(b) };
  } catch {
    return { base64: Buffer.from(b).toString('base64') };
  }
}

export function out(o: unknown): void {
  process.stdout.write(`${JSON.stringify(o, (_k, v) => (typeof v === 'bigint' ? Number(v) : v))}\n`);
}

/** Warnings of the log engine and the store, one line each on standard error. */
export const warnLogger = {
  warn: (message: string, details?: Record<string, unknown>) =>
    process.stderr.write(
      `plexus chronacta: ${message} ${JSON.stringify(details ?? {}, (_k, v) => (typeof v === 'bigint' ? String(v) : v))}\n`,
    ),
};

export function target(
  command: string,
  positionals: string[],
  values: { all?: boolean; from?: string; prefix?: string; type?: string[] },
): SubscriptionTarget {
  if (values.all && positionals.length > 0)
    throw new UsageError('chronacta', `${command}: give a STREAM or --all, not both`);
  if (!values.all && positionals.length !== 1)
    throw new UsageError('chronacta', `${command}: give one STREAM or --all`);
  const from = values.from;
  const f = from === undefined || from === 'start' ? 'start' : from === 'end' ? 'end' : big('from', from);
  if (values.all) {
    return {
      all: true,
      fromPosition: f ?? 'start',
      ...(values.prefix ? { streamPrefix: values.prefix } : {}),
      ...(values.type ? { types: values.type } : {}),
    };
  }
  return { stream: positionals[0] as string, fromVersion: f ?? 'start' };
}

/** The flags of every command that calls a server: its address, TLS and bearer token. */
export const CLIENT_FLAGS = {
  server: { type: 'string' },
  tls: { type: 'boolean' },
  cacert: { type: 'string' },
  cert: { type: 'string' },
  key: { type: 'string' },
  'server-name': { type: 'string' },
  'token-file': { type: 'string' },
} as const;

interface ClientFlagValues {
  server?: string | undefined;
  tls?: boolean | undefined;
  cacert?: string | undefined;
  cert?: string | undefined;
  key?: string | undefined;
  'server-name'?: string | undefined;
  'token-file'?: string | undefined;
}

/**
 * grpc-js sends the host it dials as the TLS server name (SNI) even when it is an IP address,
 * which RFC 6066 does not allow: Node ignores it (the certificate is still checked against the
 * IP address) and prints a DeprecationWarning (DEP0123) that would end up in every TLS
 * command's output. This drops that one warning, and only in the CLI.
 */
export function quietIpServerName(): void {
  const emit = process.emitWarning;
  process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
    const code = typeof rest[0] === 'object' && rest[0] !== null ? (rest[0] as { code?: string }).code : rest[1];
    if (code === 'DEP0123') return;
    (emit as (...a: unknown[]) => void).call(process, warning, ...rest);
  }) as typeof process.emitWarning;
}

/** A client of --server with the TLS files and token the flags (or PLEXUS_CHRONACTA_TOKEN) give. */
export async function withClient<T>(flags: ClientFlagValues, fn: (c: ChronactaClient) => Promise<T>): Promise<T> {
  const security = clientSecurityFromFiles({
    ...(flags.tls ? { tls: true } : {}),
    ...(flags.cacert !== undefined ? { caFile: flags.cacert } : {}),
    ...(flags.cert !== undefined ? { certFile: flags.cert } : {}),
    ...(flags.key !== undefined ? { keyFile: flags.key } : {}),
    ...(flags['server-name'] !== undefined ? { serverName: flags['server-name'] } : {}),
    ...(flags['token-file'] !== undefined ? { tokenFile: flags['token-file'] } : {}),
  });
  if (security.tls) quietIpServerName();
  const client = new ChronactaClient(serverAddress(flags.server), security);
  try {
    return await fn(client);
  } finally {
    client.close();
  }
}
