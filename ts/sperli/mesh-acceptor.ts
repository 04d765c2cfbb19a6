/**
 * The accepting side of a SPERLI mesh: the rank's listener, which takes one connection
 * from every lower rank (the SPERLI protocol, "Connections"). A connection refused before
 * it belongs to a peer (a failed handshake, a certificate of another job or an unexpected
 * rank) is closed and reported; it does not end the job. Once every lower rank is linked
 * the listener closes; a lower rank still missing after `connectTimeoutMs` is reported to
 * `onMissing`.
 */
import { once } from 'node:events';
import type { Socket } from 'node:net';
import * as tls from 'node:tls';
import type { TimerHandle, Timers } from '../core/clock.js';
import type { PlexusError } from '../core/errors.js';
import type { RankIdentity } from '../crypto/x509.js';
import { acceptedPeerRank, handshakeRefused } from './mesh-identity.js';
import { StaticReader } from './static-reader.js';

export interface MeshAcceptorDeps {
  /** This rank; only lower ranks connect to it. */
  readonly rank: number;
  /** The job id in hex, as rank certificates name it. */
  readonly jobHex: string;
  /** The options of the TLS server (from the job's TLS endpoint). */
  readonly serverOptions: tls.TlsOptions;
  /** The rank identity of an accepted connection (the job's TLS endpoint); throws the refusal. */
  readonly identityOf: (socket: tls.TLSSocket) => RankIdentity;
  /** How long the lower ranks have to connect. */
  readonly connectTimeoutMs: number;
  /** Timers of that wait and of the shutdown's grace. */
  readonly timers: Timers;
  /** Whether `peer` has a link already. */
  readonly isLinked: (peer: number) => boolean;
  /** Makes an accepted connection the link to `peer` (its bytes through `reader` when there is one). */
  readonly attach: (peer: number, socket: tls.TLSSocket, reader?: StaticReader) => void;
  /** Hears of each connection refused before it belonged to a peer. */
  readonly report: (error: PlexusError) => void;
  /** Hears of the first lower rank that did not connect in time. */
  readonly onMissing: (peer: number) => void;
}

export class MeshAcceptor {
  private readonly server: tls.Server;
  private readonly closed: Promise<void>;
  private readonly rawSockets = new Set<Socket>();
  private closing = false;
  private stopped = false;
  private deadline: TimerHandle | undefined;

  constructor(private readonly deps: MeshAcceptorDeps) {
    const server = tls.createServer(deps.serverOptions);
    this.server = server;
    this.closed = new Promise<void>((resolve) => server.once('close', () => resolve()));
    server.on('connection', (s: Socket) => {
      this.rawSockets.add(s);
      s.once('close', () => this.rawSockets.delete(s));
    });
    server.on('tlsClientError', (err, socket) => {
      socket.destroy();
      deps.report(handshakeRefused(undefined, err));
    });
    server.on('secureConnection', (socket: tls.TLSSocket) => this.accept(socket));
  }

  /** Listens on `host:port`; rejects with the listener's error. */
  async listen(host: string, port: number): Promise<void> {
    this.server.listen(port, host);
    await once(this.server, 'listening');
  }

  /** Closes the listener at once when there is no lower rank to wait for, else starts the wait. */
  awaitLowerRanks(): void {
    const { rank, connectTimeoutMs, timers, isLinked, onMissing } = this.deps;
    if (this.lowerLinked()) {
      this.close();
      return;
    }
    this.deadline = timers.setTimeout(() => {
      for (let r = 0; r < rank; r++) {
        if (!isLinked(r)) {
          onMissing(r);
          return;
        }
      }
    }, connectTimeoutMs);
  }

  /** Stops accepting; the sockets it accepted stay open. */
  close(): void {
    if (this.closing) return;
    this.closing = true;
    this.server.close();
  }

  /**
   * Refuses further connections, closes the listener and waits for it to close, destroying
   * any connection still open after `graceMs`.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.stopped = true;
    if (this.deadline !== undefined) this.deps.timers.clearTimeout(this.deadline);
    this.close();
    const t = this.deps.timers.setTimeout(() => {
      for (const s of this.rawSockets) s.destroy();
    }, graceMs);
    await this.closed;
    this.deps.timers.clearTimeout(t);
  }

  private accept(socket: tls.TLSSocket): void {
    const { rank, jobHex, isLinked, attach, report, identityOf } = this.deps;
    socket.on('error', () => {});
    if (this.stopped) {
      socket.destroy();
      return;
    }
    let peer: number;
    try {
      peer = acceptedPeerRank(identityOf(socket), jobHex, rank, isLinked);
    } catch (e) {
      socket.destroy();
      report(e as PlexusError);
      return;
    }
    // Accepted connections decrypt into one reused buffer too (node:tls has no `onread` for them).
    attach(peer, socket, StaticReader.adopt(socket));
    if (this.lowerLinked()) {
      this.close();
      if (this.deadline !== undefined) this.deps.timers.clearTimeout(this.deadline);
    }
  }

  private lowerLinked(): boolean {
    for (let r = 0; r < this.deps.rank; r++) if (!this.deps.isLinked(r)) return false;
    return true;
  }
}
