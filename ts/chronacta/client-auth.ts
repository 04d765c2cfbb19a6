/**
 * The security of Chronacta's client (gRPC) port, as etcd secures its client URLs:
 *
 * - TLS (1.3) with a server certificate and key from PEM files (`certFile`, `keyFile`, etcd's
 *   `--cert-file`/`--key-file`);
 * - client certificates (mutual TLS, etcd's `--client-cert-auth` with `--trusted-ca-file`):
 *   a connection without a certificate that chains to the CA file is refused in the handshake;
 * - bearer tokens from a file (`authTokensFile`): a call without `authorization: Bearer <a
 *   token of the file>` ends with UNAUTHENTICATED (PLX_CHRONACTA_UNAUTHENTICATED) before any
 *   method runs. Only SHA-256 digests of the tokens are kept; a presented token's digest is
 *   compared with every one of them with `crypto.timingSafeEqual`.
 *
 * The files are checked every `reloadIntervalMs` (a stat: modification time, size, inode, so
 * an atomic rename is seen too). Changed certificate, key or CA files are loaded into the
 * server with `setSecureContext` (new connections get them; open ones keep theirs); a changed
 * tokens file replaces the tokens. A new file that cannot be used (unreadable, not PEM, a key
 * that is not the certificate's, no token) is not taken: the server keeps what it had and
 * logs a warning; it is tried again when it changes again.
 *
 * Nothing of this is on by default: a server on loopback serves plaintext without
 * authentication, for the demo. `exposureWarning` says when a bind address reaches beyond
 * loopback without TLS and client authentication (docs/chronacta.md#securing-the-client-port).
 */
import { createHash, timingSafeEqual, X509Certificate } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import type { IncomingHttpHeaders, SecureServerOptions } from 'node:http2';
import { isIP } from 'node:net';
import { createSecureContext, type SecureContextOptions } from 'node:tls';
import { type Clock, type ClockTimers, systemClock, type TimerHandle } from '../core/clock.js';
import type { StorageLogger } from '../storage/types.js';
import { ChronactaCode, chronactaError } from './errors.js';
import type { CallStatus } from './grpc-server.js';
import { toCallStatus } from './status.js';

/** The client port's security settings (all optional; none: plaintext, no authentication). */
export interface ClientPortSecurityOptions {
  /** The server certificate (PEM, the chain's leaf first); with `keyFile`, TLS is on. */
  readonly certFile?: string;
  /** The server certificate's private key (PEM). */
  readonly keyFile?: string;
  /**
   * CA certificates (PEM): with `clientCertAuth`, client certificates must chain to one of
   * them; in cluster mode also the roots a member trusts when it calls another member's
   * client port (follower-read probes). Needs TLS.
   */
  readonly trustedCaFile?: string;
  /** Require a client certificate signed by `trustedCaFile` (mutual TLS). */
  readonly clientCertAuth?: boolean;
  /** Bearer tokens, one a line (blank lines and lines starting with `#` are skipped). */
  readonly authTokensFile?: string;
  /** How often the files are checked for changes, in milliseconds (default 1000). */
  readonly reloadIntervalMs?: number;
  /**
   * Wall time of the certificate validity check and the warnings' pace, and the timers of the
   * reload checks (default `systemClock`).
   */
  readonly clock?: ClockTimers;
}

/** What a member presents when it calls another member's client port (see ChronactaClient's `tls`, `token`). */
export interface PeerCredentials {
  readonly tls?: { readonly ca?: string; readonly cert?: string; readonly key?: string };
  readonly token?: string;
}

/** A TLS server that takes new certificates (node:tls and node:http2 secure servers). */
export interface ReloadableTlsServer {
  setSecureContext(options: SecureContextOptions): void;
  on(event: 'tlsClientError', fn: (err: Error, socket: { remoteAddress?: string | undefined }) => void): unknown;
}

/** The client port's security in force: what the gRPC server takes, checks and reloads. */
export interface ClientPortSecurity {
  /** TLS options for `http2.createSecureServer`; undefined: plaintext. */
  readonly tls: SecureServerOptions | undefined;
  readonly clientCertAuth: boolean;
  readonly tokens: boolean;
  /** A call's refusal (UNAUTHENTICATED) when its headers carry no valid token; undefined: admitted. */
  authenticate(headers: IncomingHttpHeaders): CallStatus | undefined;
  /** What this server presents to other members' client ports (same CA, certificate and first token). */
  peerCredentials(): PeerCredentials;
  /** Starts watching the files: changes are loaded into `server` (undefined: plaintext, tokens only). */
  watch(server: ReloadableTlsServer | undefined): void;
  /** Stops watching. */
  close(): void;
}

/** The shortest and longest token taken (printable ASCII without spaces). */
export const MIN_TOKEN_LENGTH = 16;
export const MAX_TOKEN_LENGTH = 4096;
/** The most tokens a tokens file holds. */
export const MAX_TOKENS = 10_000;
/** The largest certificate, key, CA or tokens file read (bytes). */
export const MAX_SECURITY_FILE_BYTES = 4 * 1024 * 1024;
const TOKEN = /^[\x21-\x7e]+$/;
const BEARER = /^bearer +(\S+) *$/i;
const TLS_ERROR_EVERY_MS = 10_000;

function badTls(message: string, details: Record<string, unknown> = {}, cause?: unknown) {
  return chronactaError(ChronactaCode.BAD_TLS, message, details, cause);
}

function badTokens(message: string, details: Record<string, unknown> = {}, cause?: unknown) {
  return chronactaError(ChronactaCode.BAD_TOKENS, message, details, cause);
}

/** A file's contents (at most MAX_SECURITY_FILE_BYTES), or the coded error `fail` makes. */
function readSmall(
  file: string,
  what: string,
  fail: (m: string, d: Record<string, unknown>, c?: unknown) => Error,
): Buffer {
  let size: number;
  try {
    size = statSync(file).size;
  } catch (e) {
    throw fail(`cannot read the ${what} ${file}: ${(e as Error).message}`, { file }, e);
  }
  if (size > MAX_SECURITY_FILE_BYTES) {
    throw fail(`the ${what} ${file} is ${size} bytes, above ${MAX_SECURITY_FILE_BYTES}`, { file, size });
  }
  try {
    return readFileSync(file);
  } catch (e) {
    throw fail(`cannot read the ${what} ${file}: ${(e as Error).message}`, { file }, e);
  }
}

/** Whether `file` can be read by its group or others (a key or tokens file should not be). */
function readableByOthers(file: string): boolean {
  try {
    return (statSync(file).mode & 0o077) !== 0;
  } catch {
    return false;
  }
}

/** The PEM texts of the TLS files, checked: the certificate parses and the key is its key. */
export function loadTlsFiles(opts: ClientPortSecurityOptions): SecureContextOptions {
  const certFile = opts.certFile as string;
  const keyFile = opts.keyFile as string;
  const cert = readSmall(certFile, 'certificate file', badTls);
  const key = readSmall(keyFile, 'key file', badTls);
  const ca = opts.trustedCaFile ? readSmall(opts.trustedCaFile, 'trusted CA file', badTls) : undefined;
  try {
    new X509Certificate(cert);
  } catch (e) {
    throw badTls(
      `the certificate file ${certFile} holds no PEM certificate: ${(e as Error).message}`,
      { file: certFile },
      e,
    );
  }
  if (ca) {
    try {
      new X509Certificate(ca);
    } catch (e) {
      throw badTls(
        `the trusted CA file ${opts.trustedCaFile} holds no PEM certificate: ${(e as Error).message}`,
        { file: opts.trustedCaFile },
        e,
      );
    }
  }
  const context: SecureContextOptions = { cert, key, ...(ca ? { ca } : {}) };
  try {
    // Refuses a key that is not the certificate's, or that cannot be read.
    createSecureContext(context);
  } catch (e) {
    throw badTls(
      `the key file ${keyFile} and certificate file ${certFile} cannot serve TLS: ${(e as Error).message}`,
      { certFile, keyFile },
      e,
    );
  }
  return context;
}

/** Warns when the server certificate is expired or not valid yet (it is served all the same). */
function warnValidity(
  context: SecureContextOptions,
  file: string,
  logger: StorageLogger | undefined,
  clock: Clock,
): void {
  try {
    const x = new X509Certificate(context.cert as Buffer);
    const now = clock.now();
    if (Date.parse(x.validTo) < now) {
      logger?.warn('chronacta: the client port certificate has expired; clients will refuse it', {
        file,
        validTo: x.validTo,
      });
    } else if (Date.parse(x.validFrom) > now) {
      logger?.warn('chronacta: the client port certificate is not valid yet; clients will refuse it', {
        file,
        validFrom: x.validFrom,
      });
    }
  } catch {
    // loadTlsFiles read it already
  }
}

/** The tokens of a tokens file: one a line, `#` lines and blank lines skipped, each checked. */
export function parseTokens(text: string, file: string): string[] {
  const tokens: string[] = [];
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = (lines[i] as string).trim();
    if (line === '' || line.startsWith('#')) continue;
    if (!TOKEN.test(line) || line.length < MIN_TOKEN_LENGTH || line.length > MAX_TOKEN_LENGTH) {
      // The line is not quoted: it may be a token.
      throw badTokens(
        `line ${i + 1} of the tokens file ${file} is not a token: ${MIN_TOKEN_LENGTH} to ${MAX_TOKEN_LENGTH} printable ASCII characters without spaces`,
        { file, line: i + 1 },
      );
    }
    tokens.push(line);
    if (tokens.length > MAX_TOKENS) throw badTokens(`the tokens file ${file} holds more than ${MAX_TOKENS} tokens`);
  }
  if (tokens.length === 0) throw badTokens(`the tokens file ${file} holds no token`, { file });
  return tokens;
}

function digest(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

/** The tokens as SHA-256 digests, and a constant-time check of a presented token against all of them. */
class TokenSet {
  private readonly digests: Buffer[];

  constructor(
    tokens: readonly string[],
    /** The first token: what this member presents to the others. */
    readonly first: string,
  ) {
    this.digests = tokens.map(digest);
  }

  has(token: string): boolean {
    const d = digest(token);
    let ok = false;
    // Every digest is compared, so the time taken does not say which one matched.
    for (const x of this.digests) if (timingSafeEqual(d, x)) ok = true;
    return ok;
  }
}

function loadTokens(file: string): TokenSet {
  const tokens = parseTokens(readSmall(file, 'tokens file', badTokens).toString('utf8'), file);
  return new TokenSet(tokens, tokens[0] as string);
}

/** A stat that changes when the file is rewritten or replaced ('' when it cannot be read). */
function signature(file: string | undefined): string {
  if (!file) return '';
  try {
    const s = statSync(file);
    return `${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
  } catch {
    return '';
  }
}

const UNAUTHENTICATED_NO_TOKEN = toCallStatus(
  chronactaError(
    ChronactaCode.UNAUTHENTICATED,
    'this server takes calls with a bearer token only: send the metadata "authorization: Bearer <token>"',
  ),
);
const UNAUTHENTICATED_BAD_TOKEN = toCallStatus(
  chronactaError(ChronactaCode.UNAUTHENTICATED, 'the bearer token is not one this server takes'),
);

/** Checks the settings and reads the files once (coded errors: PLX_CHRONACTA_BAD_TLS, _BAD_TOKENS). */
export function loadClientPortSecurity(
  opts: ClientPortSecurityOptions = {},
  logger?: StorageLogger,
): ClientPortSecurity {
  const tlsOn = opts.certFile !== undefined || opts.keyFile !== undefined;
  if (tlsOn && (!opts.certFile || !opts.keyFile)) {
    throw badTls('TLS needs both a certificate file and a key file (--cert-file and --key-file)');
  }
  if (opts.trustedCaFile !== undefined && !tlsOn) {
    throw badTls('a trusted CA file (--trusted-ca-file) needs TLS: give --cert-file and --key-file too');
  }
  if (opts.clientCertAuth && !opts.trustedCaFile) {
    throw badTls(
      'client certificate authentication (--client-cert-auth) needs --trusted-ca-file, the CA they chain to',
    );
  }
  const every = opts.reloadIntervalMs ?? 1000;
  if (!Number.isSafeInteger(every) || every < 10 || every > 3_600_000) {
    throw badTls('the reload interval takes 10 to 3600000 ms');
  }
  const clock = opts.clock ?? systemClock;
  let context = tlsOn ? loadTlsFiles(opts) : undefined;
  if (context) warnValidity(context, opts.certFile as string, logger, clock);
  let tokens = opts.authTokensFile !== undefined ? loadTokens(opts.authTokensFile) : undefined;
  for (const f of [opts.keyFile, opts.authTokensFile]) {
    if (f && readableByOthers(f)) {
      logger?.warn('chronacta: a secret file can be read by other users; chmod 600 it', { file: f });
    }
  }
  const clientCertAuth = opts.clientCertAuth === true;
  const tlsFiles = [opts.certFile, opts.keyFile, opts.trustedCaFile];
  let seenTls = tlsFiles.map(signature).join('|');
  let seenTokens = signature(opts.authTokensFile);
  let timer: TimerHandle | undefined;

  const reload = (server: ReloadableTlsServer | undefined) => {
    if (context && server) {
      const now = tlsFiles.map(signature).join('|');
      if (now !== seenTls) {
        seenTls = now;
        try {
          const next = loadTlsFiles(opts);
          server.setSecureContext(next);
          context = next;
          warnValidity(next, opts.certFile as string, logger, clock);
          logger?.info?.('chronacta: reloaded the client port certificate', { certFile: opts.certFile });
        } catch (e) {
          logger?.warn('chronacta: the changed TLS files were not taken; the server keeps its certificate', {
            error: (e as Error).message,
          });
        }
      }
    }
    if (opts.authTokensFile) {
      const now = signature(opts.authTokensFile);
      if (now !== seenTokens) {
        seenTokens = now;
        try {
          tokens = loadTokens(opts.authTokensFile);
          logger?.info?.('chronacta: reloaded the tokens file', { file: opts.authTokensFile });
        } catch (e) {
          logger?.warn('chronacta: the changed tokens file was not taken; the server keeps its tokens', {
            error: (e as Error).message,
          });
        }
      }
    }
  };

  return {
    tls: context
      ? {
          ...context,
          minVersion: 'TLSv1.3',
          requestCert: clientCertAuth,
          rejectUnauthorized: clientCertAuth,
          ALPNProtocols: ['h2'],
        }
      : undefined,
    clientCertAuth,
    tokens: tokens !== undefined,
    authenticate(headers) {
      if (!tokens) return undefined;
      const h = headers.authorization;
      const m = typeof h === 'string' ? BEARER.exec(h) : null;
      if (!m) return UNAUTHENTICATED_NO_TOKEN;
      return tokens.has(m[1] as string) ? undefined : UNAUTHENTICATED_BAD_TOKEN;
    },
    peerCredentials() {
      const text = (b: unknown) => (b === undefined ? undefined : String(b));
      return {
        ...(context
          ? {
              tls: {
                ...(context.ca ? { ca: text(context.ca) as string } : {}),
                ...(clientCertAuth ? { cert: text(context.cert) as string, key: text(context.key) as string } : {}),
              },
            }
          : {}),
        ...(tokens ? { token: tokens.first } : {}),
      };
    },
    watch(server) {
      if (!context && !opts.authTokensFile) return;
      let refused = 0;
      let lastLog = 0;
      server?.on('tlsClientError', (err, socket) => {
        refused++;
        const now = clock.now();
        if (now - lastLog < TLS_ERROR_EVERY_MS) return;
        lastLog = now;
        logger?.warn('chronacta: refused a TLS connection on the client port', {
          from: socket.remoteAddress,
          error: err.message,
          refusedSinceLastWarning: refused,
        });
        refused = 0;
      });
      // Unreferenced timers (systemClock's): the checks never keep the process alive.
      const round = () => {
        timer = clock.setTimeout(round, every);
        reload(server);
      };
      timer = clock.setTimeout(round, every);
    },
    close() {
      if (timer !== undefined) clock.clearTimeout(timer);
      timer = undefined;
    },
  };
}

/** Whether `host` (a bind address) is a loopback address: 127.0.0.0/8, ::1 or `localhost`. */
export function isLoopback(host: string): boolean {
  const h = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./i.test(h);
  return false;
}

/**
 * The warning a server prints at start when its client port binds `host`, not loopback,
 * without TLS and client authentication (certificates or tokens); undefined when it need not.
 */
export function exposureWarning(
  host: string,
  sec: Pick<ClientPortSecurity, 'tls' | 'clientCertAuth' | 'tokens'>,
): string | undefined {
  if (isLoopback(host)) return undefined;
  const missing: string[] = [];
  if (!sec.tls) missing.push('TLS (--cert-file, --key-file)');
  if (!sec.clientCertAuth && !sec.tokens) {
    missing.push('client authentication (--client-cert-auth with --trusted-ca-file, or --auth-tokens-file)');
  }
  if (missing.length === 0) return undefined;
  const risks: string[] = [];
  if (!sec.tls)
    risks.push(`its traffic${sec.tokens ? ', bearer tokens included,' : ''} can be read and changed on the network`);
  if (!sec.clientCertAuth && !sec.tokens)
    risks.push('anyone who reaches it can read, append, delete and change the membership');
  return `WARNING: the gRPC client port binds ${host}, reachable beyond this machine, without ${missing.join(
    ' and without ',
  )}: ${risks.join('; ')}. See docs/chronacta.md#securing-the-client-port.`;
}
