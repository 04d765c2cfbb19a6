/**
 * The HTTP endpoint of a process's metrics, on its own port: `/metrics` (Prometheus text from
 * a registry), `/healthz` (the process serves) and `/readyz` (the caller's readiness checks).
 * Chronacta's servers and cluster nodes both serve through it. Plain HTTP, or, with `tls`,
 * HTTPS with mutual TLS 1.3: a client without a certificate from the given CA (and, with
 * `authorize`, one it accepts) is refused at the handshake.
 */
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { PeerCertificate, TLSSocket } from 'node:tls';

/** What `/readyz` reports: ready when every check is ok. */
export interface Readiness {
  readonly ready: boolean;
  readonly checks: Record<string, { ok: boolean; detail?: string }>;
}

/** The metrics a server serves: prom-client's `Registry` has this shape. */
export interface MetricsSource {
  readonly contentType: string;
  metrics(): Promise<string>;
}

export interface MetricsHttpOptions {
  readonly host: string;
  /** 0: any free port. */
  readonly port: number;
  readonly source: MetricsSource;
  /** Called before each scrape (gauges that follow other state). */
  readonly refresh?: () => void;
  readonly readiness: () => Promise<Readiness>;
  /** Mutual TLS: PEM texts of this server's certificate and key and of the CA its clients' certificates come from. */
  readonly tls?: {
    readonly cert: string;
    readonly key: string;
    readonly ca: string;
    /** Whether a client certificate the CA signed may scrape (default: any it signed). */
    readonly authorize?: (peer: PeerCertificate) => boolean;
  };
}

export interface MetricsServer {
  readonly address: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Serves /metrics, /healthz and /readyz on `host:port`. */
export async function serveMetricsHttp(opts: MetricsHttpOptions): Promise<MetricsServer> {
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0];
    const reply = (code: number, type: string, body: string) => {
      res.writeHead(code, { 'content-type': type, 'cache-control': 'no-store' });
      res.end(body);
    };
    if (opts.tls?.authorize && !opts.tls.authorize((req.socket as TLSSocket).getPeerCertificate())) {
      return reply(403, 'text/plain', 'forbidden: this certificate may not scrape\n');
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, 'text/plain', 'method not allowed\n');
    if (path === '/metrics') {
      try {
        opts.refresh?.();
      } catch (e) {
        return reply(500, 'text/plain', `${(e as Error).message}\n`);
      }
      opts.source.metrics().then(
        (text) => reply(200, opts.source.contentType, text),
        (e: unknown) => reply(500, 'text/plain', `${(e as Error).message}\n`),
      );
    } else if (path === '/healthz') {
      reply(200, 'application/json', '{"status":"ok"}\n');
    } else if (path === '/readyz') {
      opts.readiness().then(
        (r) =>
          reply(
            r.ready ? 200 : 503,
            'application/json',
            `${JSON.stringify({ status: r.ready ? 'ready' : 'not ready', ...r })}\n`,
          ),
        (e: unknown) =>
          reply(503, 'application/json', `${JSON.stringify({ status: 'not ready', error: String(e) })}\n`),
      );
    } else reply(404, 'text/plain', 'not found: /metrics, /healthz, /readyz\n');
  };
  const server: Server = opts.tls
    ? createHttpsServer(
        {
          cert: opts.tls.cert,
          key: opts.tls.key,
          ca: opts.tls.ca,
          requestCert: true,
          rejectUnauthorized: true,
          minVersion: 'TLSv1.3',
        },
        handle,
      )
    : createHttpServer(handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const a = server.address() as AddressInfo;
  return {
    address: `${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${a.port}`,
    port: a.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
