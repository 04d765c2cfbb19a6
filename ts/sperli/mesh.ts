/**
 * The connections of a SPERLI rank: a mesh of mutually authenticated TLS 1.3
 * connections, one per pair of ranks (the SPERLI protocol, "Transport and security" and
 * "Connections"), behind the RankTransport seam (ts/sperli/transport.ts).
 *
 * `openMesh(desc)` listens on the rank's own host list entry, connects to every higher
 * rank (again every `retryMs` until `connectTimeoutMs`, since the peer may not listen
 * yet), accepts one connection from every lower rank, and resolves once every peer's
 * HELLO has been accepted.
 *
 * - TLS 1.3 only; both sides demand a certificate and verify it against the job CA only
 *   (no system trust store). The rank's certificate and key come from the job
 *   description and are handed to `node:tls` from memory; nothing is written to a file.
 * - The connecting side checks the server's subjectAltName against the host list entry
 *   it dials (a dotted IPv4 address as an IP address, never as a DNS name).
 * - Both sides read the peer's certificate common name `sperli-<job>-<rank>` and refuse
 *   another job or an unexpected rank (the dialled rank; on accept, a lower rank that is
 *   not yet connected). That rank is the only source rank the peer may use.
 * - Both sides send HELLO at once; the peer's join token is checked against the job
 *   (signature with the job public key, job id, rank, size, incarnation, host, expiry).
 *
 * A connection that fails before it belongs to a peer on the accepting side (a failed
 * handshake, a certificate of another job or an unexpected rank) is closed and reported
 * to `onRefused`; it does not end the job. On the connecting side the dialled rank is
 * needed, so the same refusals end the setup. After setup, ts/sperli/mesh-links.ts keeps
 * the order, the heartbeats, the silence limit, ABORT and BYE.
 */
import { once } from 'node:events';
import type { ConnectOpts, Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import * as tls from 'node:tls';
import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import type { FrameHeader } from '../codec/sperli-frame.js';
import type { JobDescription } from '../codec/sperli-jobdesc.js';
import { decodeHello, encodeHello } from '../codec/sperli-payloads.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import { RetryPolicy } from '../core/retry.js';
import {
  certificateIdentity,
  isDottedIPv4,
  jobIdHex,
  normalizeHost,
  type RankIdentity,
  serverIdentityCheck,
} from '../crypto/x509.js';
import { type IdentityPolicy, tlsEndpoint } from '../net/tls-endpoint.js';
import { type RefusedHosts, refusedHosts } from './hosts.js';
import { AbortReason, abortFor, badArgument, lostPeerError } from './mesh-errors.js';
import { type Link, PeerLinks, TAKEN, transportOf } from './mesh-links.js';
import { StaticReader } from './static-reader.js';
import { verifyJoinToken } from './tokens.js';
import type { RankTransport } from './transport.js';

export interface MeshOptions {
  /** A peer that sends no frame for this long is lost (default 5000 ms). */
  readonly silenceMs?: number;
  /**
   * A HEARTBEAT goes out on a connection after this long without another frame
   * (default 1000 ms, or a third of `silenceMs` when that is shorter). Below `silenceMs`.
   */
  readonly heartbeatMs?: number;
  /** How long the rank tries to reach every peer (default 30000 ms). */
  readonly connectTimeoutMs?: number;
  /** The pause between two tries to connect to a peer that does not listen yet (default 100 ms). */
  readonly retryMs?: number;
  /** Hosts that never run a rank (default: only the reserved names). */
  readonly refused?: RefusedHosts;
  /** The clock join tokens expire by, ms since 1970 (default Date.now). */
  readonly now?: () => number;
  /**
   * Hears of each connection refused before it belonged to a peer: H1610 `tls-handshake`
   * or `peer-certificate`. Such a connection is closed and the job goes on.
   */
  readonly onRefused?: (error: PlexusError) => void;
}

export const DEFAULT_SILENCE_MS = 5000;
export const DEFAULT_HEARTBEAT_MS = 1000;
export const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;
export const DEFAULT_RETRY_MS = 100;

interface Settings {
  readonly silenceMs: number;
  readonly heartbeatMs: number;
  readonly connectTimeoutMs: number;
  readonly retryMs: number;
}

function positive(name: string, v: unknown, fallback: number): number {
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 2 ** 31 - 1) {
    throw badArgument(name, `${name} must be a whole number of milliseconds from 1 to 2^31 - 1, got ${String(v)}`);
  }
  return v;
}

function settings(o: MeshOptions): Settings {
  const silenceMs = positive('silenceMs', o.silenceMs, DEFAULT_SILENCE_MS);
  const heartbeatMs = positive(
    'heartbeatMs',
    o.heartbeatMs,
    Math.max(1, Math.min(DEFAULT_HEARTBEAT_MS, Math.floor(silenceMs / 3))),
  );
  if (heartbeatMs >= silenceMs) {
    throw badArgument(
      'heartbeatMs',
      `heartbeatMs (${heartbeatMs}) must be below silenceMs (${silenceMs}), or every peer would be lost`,
    );
  }
  return {
    silenceMs,
    heartbeatMs,
    connectTimeoutMs: positive('connectTimeoutMs', o.connectTimeoutMs, DEFAULT_CONNECT_TIMEOUT_MS),
    retryMs: positive('retryMs', o.retryMs, DEFAULT_RETRY_MS),
  };
}

function descriptionRefused(field: string, message: string, details: Record<string, unknown> = {}): PlexusError {
  return sperliError(SperliCode.frame, 'job-description', `job description refused: ${message}`, {
    ...details,
    field,
  });
}

/** The checks of a description that `openMesh` relies on (the decoder makes them too). */
function checkDescription(desc: JobDescription, refused: RefusedHosts): RankIdentity {
  const { size, rank } = desc;
  if (!Number.isInteger(size) || size < 1 || !Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw descriptionRefused('rank', `rank ${rank} of size ${size} is not a rank of the job`);
  }
  if (desc.hosts.length !== size) {
    throw descriptionRefused('hosts', `the host list has ${desc.hosts.length} entries for ${size} ranks`);
  }
  desc.hosts.forEach((h, i) => {
    if (!Number.isInteger(h.port) || h.port < 1 || h.port > 65535) {
      throw descriptionRefused(`hosts[${i}].port`, `the port of rank ${i} is ${h.port}; the launcher assigns 1..65535`);
    }
    refused.assertAllowed(h.name, `host of rank ${i}`);
  });
  let own: RankIdentity;
  try {
    own = certificateIdentity(Buffer.from(desc.rankCert).toString('latin1'));
  } catch (e) {
    throw descriptionRefused('rankCert', `the rank certificate cannot be read: ${(e as Error).message}`);
  }
  if (own.jobId !== jobIdHex(desc.jobId) || own.rank !== rank) {
    throw descriptionRefused(
      'rankCert',
      `the rank certificate names rank ${own.rank} of job ${own.jobId}, not rank ${rank} of job ${jobIdHex(desc.jobId)}`,
    );
  }
  return own;
}

function peerCertificateRefused(rule: string, message: string, details: Record<string, unknown> = {}, cause?: unknown) {
  return sperliError(
    SperliCode.frame,
    'peer-certificate',
    `connection refused: ${message}`,
    { ...details, rule },
    cause,
  );
}

function handshakeRefused(peer: number | undefined, cause: unknown): PlexusError {
  const who = peer === undefined ? 'a connecting peer' : `rank ${peer}`;
  const why = cause instanceof Error ? cause.message : String(cause);
  return sperliError(
    SperliCode.frame,
    'tls-handshake',
    `the TLS 1.3 handshake with ${who} failed (${why}); both sides need TLS 1.3 and a certificate of the job CA`,
    {
      ...(peer === undefined ? {} : { peer }),
      tlsCode: isPlexusError(cause) ? null : ((cause as NodeJS.ErrnoException)?.code ?? null),
    },
    cause,
  );
}

/** The mesh's identity policy: a rank certificate's common name names its job and rank. */
const rankIdentityPolicy: IdentityPolicy<RankIdentity> = {
  kind: 'rank',
  identify: (cert) => {
    try {
      return certificateIdentity(cert);
    } catch {
      return undefined;
    }
  },
};

/** The job and rank of the peer's certificate on an established connection. */
function peerIdentity(socket: tls.TLSSocket): RankIdentity {
  const cert = socket.getPeerCertificate();
  if (!socket.authorized || cert?.raw === undefined) {
    throw peerCertificateRefused('name', 'the peer presented no certificate of the job CA');
  }
  try {
    return certificateIdentity(cert);
  } catch (e) {
    throw peerCertificateRefused('name', `the peer's certificate names no rank: ${(e as Error).message}`, {}, e);
  }
}

/** A TLS socket as a Link: writes with backpressure, ends with close_notify. */
class SocketLink implements Link {
  private drain: Promise<void> | undefined;
  private drained: (() => void) | undefined;
  private gone: ((e: Error) => void) | undefined;
  private readonly closed: Promise<void>;
  private isClosed = false;

  constructor(
    private readonly socket: tls.TLSSocket,
    private readonly endTimeoutMs: number,
  ) {
    this.closed = new Promise((resolve) => {
      socket.once('close', () => {
        this.isClosed = true;
        this.gone?.(new PlexusError('PLX_SPERLI_CLOSED', 'the connection closed'));
        resolve();
      });
    });
    socket.on('drain', () => {
      const done = this.drained;
      this.drain = undefined;
      this.drained = undefined;
      this.gone = undefined;
      done?.();
    });
  }

  write(bytes: Uint8Array, flushed = false): Promise<void> {
    const s = this.socket;
    if (this.isClosed || s.destroyed || s.writableEnded)
      return Promise.reject(new PlexusError('PLX_SPERLI_CLOSED', 'the connection is closed'));
    if (flushed) {
      // Resolves once the socket has taken the bytes (encrypted them), so the caller may
      // reuse its buffer: the write callback, after any wait for drain.
      const taken = new Promise<void>((resolve, reject) => {
        s.write(bytes, (err) => (err ? reject(err) : resolve()));
      });
      return taken.then(() => this.drain ?? undefined);
    }
    if (s.write(bytes)) return this.drain ?? TAKEN;
    this.drain ??= new Promise<void>((resolve, reject) => {
      this.drained = resolve;
      this.gone = reject;
    });
    return this.drain;
  }

  end(): Promise<void> {
    if (!this.isClosed) {
      if (!this.socket.writableEnded) this.socket.end();
      const t = setTimeout(() => this.socket.destroy(), this.endTimeoutMs);
      t.unref?.();
      void this.closed.then(() => clearTimeout(t));
    }
    return this.closed;
  }
}

type Attempt = { socket: tls.TLSSocket; reader: StaticReader } | { error: unknown; retry: boolean };

/**
 * Opens the mesh of the rank `desc` describes. Resolves with its transport once every
 * other rank is connected and its HELLO accepted; rejects with the failure otherwise
 * (H1610 for a refused description, certificate, handshake or HELLO; H1612 for a peer
 * that never connected or was lost; PLX_SPERLI_LISTEN when the rank cannot listen),
 * after closing whatever it opened.
 */
export async function openMesh(desc: JobDescription, options: MeshOptions = {}): Promise<RankTransport> {
  const cfg = settings(options);
  const refused = options.refused ?? refusedHosts();
  checkDescription(desc, refused);
  const now = options.now ?? Date.now;
  const { rank, size } = desc;
  const jobHex = jobIdHex(desc.jobId);
  const hostNames = desc.hosts.map((h) => h.name);
  const own = desc.hosts[rank] as { name: string; port: number };
  const endpoint = tlsEndpoint(
    { ca: [Buffer.from(desc.caCert)], cert: Buffer.from(desc.rankCert), key: Buffer.from(desc.rankKey) },
    rankIdentityPolicy,
  );
  const started = performance.now();
  let stopped = false;
  const dialing = new Set<tls.TLSSocket>();
  const waits = new Set<() => void>();
  const rawSockets = new Set<Socket>();
  let setupTimer: NodeJS.Timeout | undefined;

  const server = tls.createServer(endpoint.serverOptions({ handshakeTimeout: cfg.connectTimeoutMs }));
  const serverClosed = new Promise<void>((resolve) => server.once('close', () => resolve()));
  let serverClosing = false;
  const closeServer = (): void => {
    if (serverClosing) return;
    serverClosing = true;
    server.close();
  };

  const links = new PeerLinks({
    jobId: desc.jobId,
    rank,
    size,
    incarnation: desc.incarnation,
    heartbeatMs: cfg.heartbeatMs,
    silenceMs: cfg.silenceMs,
    closeGraceMs: Math.min(200, Math.floor(cfg.silenceMs / 4)),
    hello: {
      payload: encodeHello(desc.joinToken),
      check: (peer: number, header: FrameHeader, payload: Uint8Array) => {
        const hello = decodeHello(payload);
        verifyJoinToken(
          hello.token,
          {
            jobId: desc.jobId,
            headerRank: header.sourceRank,
            certificateRank: peer,
            size,
            incarnation: desc.incarnation,
            hosts: hostNames,
            now: now(),
          },
          desc.jobPublicKey,
        );
      },
    },
    onShutdown: async () => {
      stopped = true;
      if (setupTimer !== undefined) clearTimeout(setupTimer);
      for (const s of dialing) s.destroy();
      for (const w of waits) w();
      closeServer();
      const t = setTimeout(() => {
        for (const s of rawSockets) s.destroy();
      }, cfg.silenceMs);
      t.unref?.();
      await serverClosed;
      clearTimeout(t);
    },
  });

  const report = (e: PlexusError): void => {
    try {
      options.onRefused?.(e);
    } catch {
      // A listener's fault is not the connection's.
    }
  };

  const attached: tls.TLSSocket[] = [];
  const attach = (peer: number, socket: tls.TLSSocket, reader?: StaticReader): void => {
    attached.push(socket);
    socket.setNoDelay(true);
    let lastError: unknown;
    socket.on('error', (e) => {
      lastError = e;
    });
    links.attach(peer, new SocketLink(socket, cfg.silenceMs));
    if (reader !== undefined) reader.attach((bytes, transient) => links.receive(peer, bytes, transient));
    else socket.on('data', (chunk: Buffer) => links.receive(peer, chunk));
    socket.on('close', () => links.linkClosed(peer, lastError));
  };

  const lowerAttached = (): boolean => {
    for (let r = 0; r < rank; r++) if (!links.hasLink(r)) return false;
    return true;
  };

  server.on('connection', (s: Socket) => {
    rawSockets.add(s);
    s.once('close', () => rawSockets.delete(s));
  });
  server.on('tlsClientError', (err, socket) => {
    socket.destroy();
    report(handshakeRefused(undefined, err));
  });
  server.on('secureConnection', (socket: tls.TLSSocket) => {
    socket.on('error', () => {});
    const refuse = (e: PlexusError): void => {
      socket.destroy();
      report(e);
    };
    if (stopped) {
      socket.destroy();
      return;
    }
    let id: RankIdentity;
    try {
      id = peerIdentity(socket);
    } catch (e) {
      refuse(e as PlexusError);
      return;
    }
    if (id.jobId !== jobHex) {
      refuse(peerCertificateRefused('job-id', `the peer is of job ${id.jobId}, not ${jobHex}`, { jobId: id.jobId }));
      return;
    }
    if (id.rank >= rank || links.hasLink(id.rank)) {
      const why = id.rank >= rank ? `rank ${rank} connects to it, not the other way` : 'it is already connected';
      refuse(peerCertificateRefused('rank', `rank ${id.rank} is not expected here: ${why}`, { rank: id.rank }));
      return;
    }
    // Accepted connections decrypt into one reused buffer too (node:tls has no `onread` for them).
    attach(id.rank, socket, StaticReader.adopt(socket));
    if (lowerAttached()) {
      closeServer();
      if (setupTimer !== undefined) clearTimeout(setupTimer);
    }
  });

  // Listen first.
  try {
    server.listen(own.port, own.name);
    await once(server, 'listening');
  } catch (e) {
    await links.close();
    const code = (e as NodeJS.ErrnoException).code ?? null;
    throw new PlexusError(
      'PLX_SPERLI_LISTEN',
      `rank ${rank} cannot listen on ${own.name}:${own.port} (${(e as Error).message}); the host list entry must be this machine and the port free`,
      { host: own.name, port: own.port, code },
      { cause: e },
    );
  }

  const sleep = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(t);
        waits.delete(done);
        resolve();
      };
      const t = setTimeout(done, ms);
      waits.add(done);
    });

  const attempt = (peer: number, timeoutMs: number): Promise<Attempt> =>
    new Promise((resolve) => {
      const entry = desc.hosts[peer] as { name: string; port: number };
      const reader = new StaticReader();
      // node:tls takes `onread` on a connection it opens itself (its types omit it).
      const options: tls.ConnectionOptions & ConnectOpts = endpoint.clientOptions(
        { check: serverIdentityCheck(entry.name) },
        {
          onread: reader.onread,
          host: entry.name,
          port: entry.port,
          ...(isDottedIPv4(entry.name) ? {} : { servername: normalizeHost(entry.name) as string }),
        },
      );
      const socket = tls.connect(options);
      dialing.add(socket);
      let tcp = false;
      const timer = setTimeout(
        () =>
          socket.destroy(
            sperliError(SperliCode.frame, 'tls-handshake', `no TLS handshake within ${timeoutMs} ms`, { peer }),
          ),
        timeoutMs,
      );
      timer.unref?.();
      const settle = (a: Attempt): void => {
        clearTimeout(timer);
        dialing.delete(socket);
        socket.removeListener('error', onError);
        resolve(a);
      };
      const onError = (e: unknown): void => {
        socket.destroy();
        settle({ error: e, retry: !tcp });
      };
      socket.once('connect', () => {
        tcp = true;
      });
      socket.once('error', onError);
      socket.once('secureConnect', () => settle({ socket, reader }));
    });

  const dial = async (peer: number): Promise<void> => {
    const deadline = started + cfg.connectTimeoutMs;
    const pauses = new RetryPolicy({ baseMs: cfg.retryMs, capMs: cfg.retryMs, factor: 1, jitter: 'equal' }).start();
    for (;;) {
      if (stopped) return;
      const left = deadline - performance.now();
      const a = await attempt(peer, Math.max(1, left));
      if (stopped) {
        if ('socket' in a) a.socket.destroy();
        return;
      }
      if ('socket' in a) {
        const socket = a.socket;
        socket.on('error', () => {});
        let id: RankIdentity;
        try {
          id = peerIdentity(socket);
        } catch (e) {
          socket.destroy();
          throw e;
        }
        if (id.jobId !== jobHex || id.rank !== peer) {
          socket.destroy();
          throw id.jobId !== jobHex
            ? peerCertificateRefused('job-id', `rank ${peer}'s server is of job ${id.jobId}, not ${jobHex}`, {
                peer,
                jobId: id.jobId,
              })
            : peerCertificateRefused('rank', `the server dialled as rank ${peer} is rank ${id.rank}`, {
                peer,
                rank: id.rank,
              });
        }
        attach(peer, socket, a.reader);
        return;
      }
      if (!a.retry) {
        if (isPlexusError(a.error, 'PLX_CRYPTO_HOST_MISMATCH')) {
          throw peerCertificateRefused(
            'host',
            `the server dialled as rank ${peer} at ${desc.hosts[peer]?.name} does not name that host in its certificate`,
            { peer, host: desc.hosts[peer]?.name },
            a.error,
          );
        }
        throw handshakeRefused(peer, a.error);
      }
      if (performance.now() + cfg.retryMs >= deadline) throw lostPeerError(peer, 'connect', undefined, a.error);
      await sleep(pauses.next() ?? cfg.retryMs);
    }
  };

  const failSetup = (e: unknown): void => {
    const error = isPlexusError(e) ? e : handshakeRefused(undefined, e);
    if (error.code === SperliCode.aborted) {
      links.failWith(error, abortFor(AbortReason.lostPeer, error, error.details.peer as number));
    } else {
      links.failWith(error, abortFor(AbortReason.protocolViolation, error, rank));
    }
  };

  if (lowerAttached()) closeServer();
  else {
    setupTimer = setTimeout(() => {
      for (let r = 0; r < rank; r++) {
        if (!links.hasLink(r)) {
          failSetup(lostPeerError(r, 'connect'));
          return;
        }
      }
    }, cfg.connectTimeoutMs);
    setupTimer.unref?.();
  }
  for (let r = rank + 1; r < size; r++) dial(r).catch(failSetup);

  try {
    await new Promise<void>((resolve, reject) => links.watch(resolve, reject));
  } catch (e) {
    await links.close();
    throw e;
  }
  // From here on the connections do not keep the process alive: a rank whose program has
  // nothing left to do ends (and its peers see a close without BYE unless it finalized).
  // A call that waits for a peer holds the process open itself (KeepAlive, spin.ts).
  for (const s of attached) s.unref();
  return transportOf(links);
}
