/**
 * The mediator's transports: DIDComm over HTTP (POST of one packed message with content type
 * `application/didcomm-encrypted+json`; the reply, when the request asks for one with
 * `return_route: "all"`, comes back as the response body with the same content type, otherwise
 * 202 Accepted) and over WebSocket (one packed message per text frame, replies and live
 * deliveries on the same socket), both on one port. `GET /` answers `{ did, url, ws }`.
 *
 * Refusals a sender cannot be answered in DIDComm (it is anonymous, or the message cannot be
 * read) are HTTP statuses with a JSON body `{ code, message }`: 400 unreadable, 401 not
 * authenticated, 404 unknown recipient, 413 too large, 415 wrong content type, 429 queue full
 * (with Retry-After), 503 shutting down, 507 the disk is full, 500 anything else.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import { monotonicClock, type Timers } from '../../core/clock.js';
import { PlexusError } from '../../core/errors.js';
import { type Link, Mediator, type MediatorOptions } from './mediator.js';
import { MEDIA_TYPE_ENCRYPTED } from './protocol.js';

export interface MediatorServerOptions extends Omit<MediatorOptions, 'url'> {
  /** Interface to listen on (default 127.0.0.1). */
  host?: string;
  /** Port (default 0: a free port). */
  port?: number;
  /** The public URL published in the DID (default `http://<host>:<port>/`). */
  url?: string;
  /** Runs the close's 2 s bound on open connections (default the process's timers, unreferenced). */
  timers?: Timers;
}

export interface MediatorServer {
  readonly mediator: Mediator;
  readonly did: string;
  /** The HTTP endpoint. */
  readonly url: string;
  /** The WebSocket endpoint (the same port). */
  readonly wsUrl: string;
  readonly port: number;
  close(): Promise<void>;
}

const STATUS_OF: Record<string, number> = {
  PLX_MEDIATOR_UNREADABLE: 400,
  PLX_MEDIATOR_BAD_INPUT: 400,
  PLX_DIDCOMM_BAD_FORWARD: 400,
  PLX_MEDIATOR_UNAUTHENTICATED: 401,
  PLX_MEDIATOR_UNKNOWN_RECIPIENT: 404,
  PLX_MEDIATOR_REPLAY: 409,
  PLX_MEDIATOR_TOO_LARGE: 413,
  PLX_MEDIATOR_BAD_CONTENT_TYPE: 415,
  PLX_MEDIATOR_QUEUE_FULL: 429,
  PLX_MEDIATOR_CLOSED: 503,
  PLX_STORAGE_CLOSED: 503,
  PLX_STORAGE_DISK_FULL: 507,
};

/** Messages one WebSocket may have waiting for the mediator before it is closed (1013). */
const MAX_WS_BACKLOG = 256;

function refuse(res: ServerResponse, e: unknown): void {
  const code = e instanceof PlexusError ? e.code : 'PLX_MEDIATOR_INTERNAL';
  const status = STATUS_OF[code] ?? 500;
  const message = e instanceof PlexusError ? e.message : 'the mediator failed to handle the message';
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (status === 429) headers['retry-after'] = '1';
  if (status === 413) headers.connection = 'close';
  res.writeHead(status, headers).end(JSON.stringify({ code, message }));
}

/** Starts a mediator with its HTTP and WebSocket transports. */
export async function startMediator(opts: MediatorServerOptions): Promise<MediatorServer> {
  const host = opts.host ?? '127.0.0.1';
  const server: Server = createServer();
  // Until the mediator is open (it needs the port for its DID), requests and upgrades get 503.
  let ready = false;
  let stopping = false;
  const unavailable = (req: IncomingMessage, res: ServerResponse) => {
    if (ready) return;
    req.resume();
    refuse(res, new PlexusError('PLX_MEDIATOR_CLOSED', 'the mediator is starting: try again shortly', {}));
  };
  server.on('request', unavailable);
  server.on('upgrade', (_req: IncomingMessage, socket: Duplex) => {
    if (!ready) socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const hostInUrl = host.includes(':') ? `[${host}]` : host === '0.0.0.0' ? '127.0.0.1' : host;
  const url = opts.url ?? `http://${hostInUrl}:${port}/`;
  let mediator: Mediator;
  try {
    mediator = await Mediator.open({ ...opts, url });
  } catch (e) {
    await new Promise<void>((r) => server.close(() => r()));
    throw e;
  }
  const maxBytes = mediator.limits.maxMessageBytes;
  const wsUrl = url.replace(/^http/, 'ws');

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (stopping) {
      req.resume();
      refuse(res, new PlexusError('PLX_MEDIATOR_CLOSED', 'the mediator is shutting down: try again later', {}));
      return;
    }
    if (req.method === 'GET') {
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ did: mediator.did, url, ws: wsUrl }));
      return;
    }
    if (req.method !== 'POST') {
      res.writeHead(405, { allow: 'GET, POST' }).end();
      return;
    }
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== MEDIA_TYPE_ENCRYPTED) {
      req.resume();
      refuse(
        res,
        new PlexusError(
          'PLX_MEDIATOR_BAD_CONTENT_TYPE',
          `POST a DIDComm message with content type ${MEDIA_TYPE_ENCRYPTED}`,
          {},
        ),
      );
      return;
    }
    const declared = Number(req.headers['content-length'] ?? 0);
    const tooLarge = () =>
      new PlexusError('PLX_MEDIATOR_TOO_LARGE', `a message above ${maxBytes} bytes is refused`, { max: maxBytes });
    if (declared > maxBytes) {
      req.resume();
      refuse(res, tooLarge());
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (c: Buffer) => {
      if (over) return;
      size += c.length;
      if (size > maxBytes) {
        over = true;
        chunks.length = 0;
        refuse(res, tooLarge());
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (over) return;
      const text = Buffer.concat(chunks).toString('utf8');
      mediator.handle(text).then(
        (a) => {
          if (a.kind === 'reply') res.writeHead(200, { 'content-type': MEDIA_TYPE_ENCRYPTED }).end(a.packed);
          else res.writeHead(202).end();
        },
        (e: unknown) => refuse(res, e),
      );
    });
    req.on('error', () => res.destroy());
  });

  const wss = new WebSocketServer({ noServer: true, maxPayload: maxBytes });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (!ready) return;
    if (stopping) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
  });
  const sockets = new Set<WebSocket>();
  wss.on('connection', (ws: WebSocket) => {
    if (stopping) {
      ws.terminate();
      return;
    }
    sockets.add(ws);
    const link: Link = {
      duplex: true,
      live: false,
      closed: false,
      inflight: new Set(),
      send: (packed) => {
        if (ws.readyState === ws.OPEN) ws.send(packed);
      },
    };
    // One message at a time per socket, in order; a client that sends far ahead of the answers is cut off.
    let chain: Promise<void> = Promise.resolve();
    let waiting = 0;
    ws.on('message', (data) => {
      const text = Array.isArray(data)
        ? Buffer.concat(data).toString('utf8')
        : Buffer.from(data as ArrayBuffer).toString('utf8');
      if (++waiting > MAX_WS_BACKLOG) {
        ws.close(1013, 'too many messages waiting for an answer');
        return;
      }
      chain = chain.then(async () => {
        try {
          const a = await mediator.handle(text, link);
          if (a.kind === 'reply') link.send(a.packed);
        } catch (e) {
          // Refusals without a DIDComm answer: a JSON frame, like the HTTP body.
          const code = e instanceof PlexusError ? e.code : 'PLX_MEDIATOR_INTERNAL';
          const message = e instanceof PlexusError ? e.message : 'the mediator failed to handle the message';
          if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ code, message }));
        } finally {
          waiting--;
        }
      });
    });
    ws.on('close', () => {
      sockets.delete(ws);
      mediator.disconnect(link);
    });
    ws.on('error', () => ws.terminate());
  });

  server.off('request', unavailable);
  ready = true;
  let closing: Promise<void> | undefined;
  return {
    mediator,
    did: mediator.did,
    url,
    wsUrl,
    port,
    close() {
      closing ??= (async () => {
        stopping = true;
        for (const ws of sockets) ws.close(1001, 'mediator stopping');
        await new Promise<void>((r) => wss.close(() => r()));
        server.closeIdleConnections?.();
        const closed = new Promise<void>((r) => server.close(() => r()));
        const force = (opts.timers ?? monotonicClock).setTimeout(() => server.closeAllConnections?.(), 2000);
        void closed.then(() => (opts.timers ?? monotonicClock).clearTimeout(force));
        for (const ws of sockets) ws.terminate();
        await mediator.close();
        await closed;
      })();
      return closing;
    },
  };
}
