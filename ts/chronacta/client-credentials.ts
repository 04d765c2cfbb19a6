/**
 * What a Chronacta client presents to a server whose client port is secured (client-auth.ts):
 * the TLS it dials with (the CA that signed the server's certificate, and its own certificate
 * and key for mutual TLS) and the bearer token it sends with every call.
 *
 * `clientSecurityFromFiles` reads them from PEM files and a token file or the
 * PLEXUS_CHRONACTA_TOKEN environment variable (the CLI's flags); the token is never printed,
 * not even in an error.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { ChronactaCode, chronactaError } from './errors.js';

/** TLS for a client: PEM texts. `{}` dials TLS trusting Node's default CA list. */
export interface ClientTls {
  /** CA certificates the server's certificate must chain to (default: Node's CA list). */
  readonly ca?: string | Uint8Array;
  /** The client certificate (mutual TLS), with `key`. */
  readonly cert?: string | Uint8Array;
  readonly key?: string | Uint8Array;
  /**
   * The name the server's certificate must carry, when it is not the host of the address
   * dialled (e.g. a DNS name in the certificate while the address is an IP address).
   */
  readonly serverName?: string;
}

/** The environment variable the CLI reads a bearer token from (when no --token-file is given). */
export const TOKEN_ENV = 'PLEXUS_CHRONACTA_TOKEN';

const TOKEN = /^[\x21-\x7e]{1,4096}$/;
const MAX_FILE_BYTES = 4 * 1024 * 1024;

function pem(v: string | Uint8Array | undefined, what: string): Buffer | undefined {
  if (v === undefined) return undefined;
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  if (v instanceof Uint8Array) return Buffer.from(v);
  throw chronactaError(ChronactaCode.BAD_TLS, `tls.${what} must be PEM text or bytes`);
}

/** The grpc-js channel credentials and channel options of `tls` (undefined: plaintext). */
export function channelSecurity(tls: ClientTls | undefined): {
  credentials: grpc.ChannelCredentials;
  options: Record<string, string>;
} {
  if (tls === undefined) return { credentials: grpc.credentials.createInsecure(), options: {} };
  if (typeof tls !== 'object' || tls === null) {
    throw chronactaError(ChronactaCode.BAD_TLS, 'tls must be an object { ca?, cert?, key?, serverName? }');
  }
  const cert = pem(tls.cert, 'cert');
  const key = pem(tls.key, 'key');
  if ((cert === undefined) !== (key === undefined)) {
    throw chronactaError(ChronactaCode.BAD_TLS, 'a client certificate needs its key, and a key its certificate');
  }
  let credentials: grpc.ChannelCredentials;
  try {
    credentials = grpc.credentials.createSsl(pem(tls.ca, 'ca') ?? null, key ?? null, cert ?? null);
  } catch (e) {
    throw chronactaError(
      ChronactaCode.BAD_TLS,
      `the client TLS settings cannot be used: ${(e as Error).message}`,
      {},
      e,
    );
  }
  const options: Record<string, string> = {};
  if (tls.serverName !== undefined) {
    if (typeof tls.serverName !== 'string' || tls.serverName === '') {
      throw chronactaError(ChronactaCode.BAD_TLS, 'tls.serverName must be a host name');
    }
    options['grpc.ssl_target_name_override'] = tls.serverName;
    options['grpc.default_authority'] = tls.serverName;
  }
  return { credentials, options };
}

/** Checks a bearer token (printable ASCII without spaces); the message never shows it. */
export function checkToken(token: unknown): string {
  if (typeof token !== 'string' || !TOKEN.test(token)) {
    throw chronactaError(
      ChronactaCode.BAD_TOKENS,
      'a bearer token is 1 to 4096 printable ASCII characters without spaces',
    );
  }
  return token;
}

function read(file: string, what: string, code: typeof ChronactaCode.BAD_TLS | typeof ChronactaCode.BAD_TOKENS) {
  try {
    const size = statSync(file).size;
    if (size > MAX_FILE_BYTES) throw chronactaError(code, `${size} bytes, above ${MAX_FILE_BYTES}`, { file, size });
    return readFileSync(file);
  } catch (e) {
    throw chronactaError(code, `cannot read the ${what} ${file}: ${(e as Error).message}`, { file }, e);
  }
}

/** The files and token a CLI command was given. */
export interface ClientSecurityFiles {
  /** CA certificates (PEM) to trust; TLS on. */
  readonly caFile?: string;
  /** Client certificate and key (PEM); TLS on. */
  readonly certFile?: string;
  readonly keyFile?: string;
  /** TLS with Node's default CA list, when no CA file is given. */
  readonly tls?: boolean;
  readonly serverName?: string;
  /** A file whose first line is the bearer token. */
  readonly tokenFile?: string;
  /** The environment (for PLEXUS_CHRONACTA_TOKEN); default process.env. */
  readonly env?: NodeJS.ProcessEnv;
}

/** The `tls` and `token` options of ChronactaClient from files (coded errors: PLX_CHRONACTA_BAD_TLS, _BAD_TOKENS). */
export function clientSecurityFromFiles(f: ClientSecurityFiles): { tls?: ClientTls; token?: string } {
  const on =
    f.tls === true ||
    f.caFile !== undefined ||
    f.certFile !== undefined ||
    f.keyFile !== undefined ||
    f.serverName !== undefined;
  let tls: ClientTls | undefined;
  if (on) {
    if ((f.certFile === undefined) !== (f.keyFile === undefined)) {
      throw chronactaError(
        ChronactaCode.BAD_TLS,
        'give the client certificate and its key together (--cert and --key)',
      );
    }
    const ca = f.caFile !== undefined ? read(f.caFile, 'CA file', ChronactaCode.BAD_TLS) : undefined;
    if (ca !== undefined) {
      try {
        new X509Certificate(ca);
      } catch (e) {
        throw chronactaError(
          ChronactaCode.BAD_TLS,
          `the CA file ${f.caFile} holds no PEM certificate: ${(e as Error).message}`,
          { file: f.caFile },
          e,
        );
      }
    }
    tls = {
      ...(ca !== undefined ? { ca } : {}),
      ...(f.certFile !== undefined ? { cert: read(f.certFile, 'certificate file', ChronactaCode.BAD_TLS) } : {}),
      ...(f.keyFile !== undefined ? { key: read(f.keyFile, 'key file', ChronactaCode.BAD_TLS) } : {}),
      ...(f.serverName !== undefined ? { serverName: f.serverName } : {}),
    };
  }
  let token: string | undefined;
  if (f.tokenFile !== undefined) {
    const first = read(f.tokenFile, 'token file', ChronactaCode.BAD_TOKENS).toString('utf8').split(/\r?\n/)[0] ?? '';
    try {
      token = checkToken(first.trim());
    } catch (e) {
      throw chronactaError(
        ChronactaCode.BAD_TOKENS,
        `the first line of the token file ${f.tokenFile} is not a token: 1 to 4096 printable ASCII characters without spaces`,
        { file: f.tokenFile },
        e,
      );
    }
  } else {
    const v = (f.env ?? process.env)[TOKEN_ENV];
    if (v !== undefined && v !== '') {
      try {
        token = checkToken(v);
      } catch (e) {
        throw chronactaError(
          ChronactaCode.BAD_TOKENS,
          `${TOKEN_ENV} is not a token: 1 to 4096 printable ASCII characters without spaces`,
          {},
          e,
        );
      }
    }
  }
  return { ...(tls ? { tls } : {}), ...(token !== undefined ? { token } : {}) };
}
