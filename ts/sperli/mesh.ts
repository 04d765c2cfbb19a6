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
 *
 * `openMesh` wires the parts: the listener (mesh-acceptor.ts), the dialer (mesh-dialer.ts),
 * the certificate and description checks (mesh-identity.ts), the sockets as links of the
 * link table (mesh-sockets.ts, mesh-links.ts); a shutdown of the table stops the dialer and
 * closes the listener.
 */
import { SperliCode } from '../codec/sperli-errors.js';
import type { FrameHeader } from '../codec/sperli-frame.js';
import type { JobDescription } from '../codec/sperli-jobdesc.js';
import { decodeHello, encodeHello } from '../codec/sperli-payloads.js';
import { type Clock, type ClockTimers, heldMonotonicClock, systemClock } from '../core/clock.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import { jobIdHex } from '../crypto/x509.js';
import { tlsEndpoint } from '../net/tls-endpoint.js';
import { type RefusedHosts, refusedHosts } from './hosts.js';
import { MeshAcceptor } from './mesh-acceptor.js';
import { MeshDialer } from './mesh-dialer.js';
import { AbortReason, abortFor, badArgument, lostPeerError } from './mesh-errors.js';
import { checkDescription, handshakeRefused, rankIdentityPolicy } from './mesh-identity.js';
import { PeerLinks, transportOf } from './mesh-links.js';
import { MeshSockets } from './mesh-sockets.js';
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
  /** The wall clock join tokens expire by, ms since 1970 (default `systemClock`). */
  readonly clock?: Clock;
  /**
   * Time and timers of the setup: the connect timeout, the pauses between tries to connect,
   * the handshake timeout of a try, and the wait for the lower ranks (default `heldMonotonicClock`: a pause between tries keeps the
   * process alive).
   */
  readonly timers?: ClockTimers;
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
  const clock = options.clock ?? systemClock;
  const timers = options.timers ?? heldMonotonicClock;
  const { rank, size } = desc;
  const jobHex = jobIdHex(desc.jobId);
  const hostNames = desc.hosts.map((h) => h.name);
  const own = desc.hosts[rank] as { name: string; port: number };
  const endpoint = tlsEndpoint(
    { ca: [Buffer.from(desc.caCert)], cert: Buffer.from(desc.rankCert), key: Buffer.from(desc.rankKey) },
    rankIdentityPolicy,
  );
  const started = timers.now();

  const links: PeerLinks = new PeerLinks({
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
            now: clock.now(),
          },
          desc.jobPublicKey,
        );
      },
    },
    onShutdown: async () => {
      dialer.stop();
      await acceptor.shutdown(cfg.silenceMs);
    },
  });
  const sockets = new MeshSockets(links, cfg.silenceMs);
  const attach = sockets.attach.bind(sockets);

  const failSetup = (e: unknown): void => {
    const error = isPlexusError(e) ? e : handshakeRefused(undefined, e);
    if (error.code === SperliCode.aborted) {
      links.failWith(error, abortFor(AbortReason.lostPeer, error, error.details.peer as number));
    } else {
      links.failWith(error, abortFor(AbortReason.protocolViolation, error, rank));
    }
  };

  const acceptor = new MeshAcceptor({
    rank,
    jobHex,
    serverOptions: endpoint.serverOptions({ handshakeTimeout: cfg.connectTimeoutMs }),
    identityOf: (socket) => endpoint.identityOf(socket),
    connectTimeoutMs: cfg.connectTimeoutMs,
    timers,
    isLinked: (peer) => links.hasLink(peer),
    attach,
    report: (e) => {
      try {
        options.onRefused?.(e);
      } catch {
        // A listener's fault is not the connection's.
      }
    },
    onMissing: (peer) => failSetup(lostPeerError(peer, 'connect')),
  });
  const dialer = new MeshDialer({
    hosts: desc.hosts,
    jobHex,
    endpoint,
    timers,
    started,
    connectTimeoutMs: cfg.connectTimeoutMs,
    retryMs: cfg.retryMs,
    attach,
  });

  // Listen first.
  try {
    await acceptor.listen(own.name, own.port);
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

  acceptor.awaitLowerRanks();
  for (let r = rank + 1; r < size; r++) dialer.dial(r).catch(failSetup);

  try {
    await new Promise<void>((resolve, reject) => links.watch(resolve, reject));
  } catch (e) {
    await links.close();
    throw e;
  }
  // From here on the connections do not keep the process alive: a rank whose program has
  // nothing left to do ends (and its peers see a close without BYE unless it finalized).
  // A call that waits for a peer holds the process open itself (KeepAlive, spin.ts).
  sockets.unref();
  return transportOf(links);
}
