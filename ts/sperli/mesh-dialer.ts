/**
 * The connecting side of a SPERLI mesh: a rank dials every higher rank (the SPERLI
 * protocol, "Connections"), again every `retryMs` until `connectTimeoutMs` has passed since
 * `started`, since the peer may not listen yet. The server must name the dialled host in
 * its certificate and be the dialled rank of the job; any other failure after TCP connected
 * is a refusal that ends the setup.
 */
import type { ConnectOpts } from 'node:net';
import * as tls from 'node:tls';
import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import type { JobDescription } from '../codec/sperli-jobdesc.js';
import type { ClockTimers, TimerHandle } from '../core/clock.js';
import { isPlexusError } from '../core/errors.js';
import { RetryPolicy } from '../core/retry.js';
import { isDottedIPv4, normalizeHost, type RankIdentity, serverIdentityCheck } from '../crypto/x509.js';
import type { TlsEndpoint } from '../net/tls-endpoint.js';
import { lostPeerError } from './mesh-errors.js';
import { checkDialledPeer, handshakeRefused, peerCertificateRefused } from './mesh-identity.js';
import { StaticReader } from './static-reader.js';

export interface MeshDialerDeps {
  /** The job's host list, one entry per rank. */
  readonly hosts: JobDescription['hosts'];
  /** The job id in hex, as rank certificates name it. */
  readonly jobHex: string;
  /** The job's TLS endpoint. */
  readonly endpoint: TlsEndpoint<RankIdentity>;
  /** Time of the connect timeout; timers of the pauses between tries and of each try's handshake. */
  readonly timers: ClockTimers;
  /** `timers.now()` when the setup began; the connect timeout counts from there. */
  readonly started: number;
  readonly connectTimeoutMs: number;
  readonly retryMs: number;
  /** Makes a dialled connection the link to `peer`. */
  readonly attach: (peer: number, socket: tls.TLSSocket, reader: StaticReader) => void;
}

type Attempt = { socket: tls.TLSSocket; reader: StaticReader } | { error: unknown; retry: boolean };

export class MeshDialer {
  private stopped = false;
  private readonly dialing = new Set<tls.TLSSocket>();
  private readonly waits = new Set<() => void>();

  constructor(private readonly deps: MeshDialerDeps) {}

  /**
   * Connects to `peer` and attaches the connection. Resolves once attached, or at once
   * after `stop()`; rejects with the refusal or with H1612 when the time is up.
   */
  async dial(peer: number): Promise<void> {
    const { timers, started, connectTimeoutMs, retryMs, jobHex, hosts } = this.deps;
    const deadline = started + connectTimeoutMs;
    const pauses = new RetryPolicy({ baseMs: retryMs, capMs: retryMs, factor: 1, jitter: 'equal' }).start(timers);
    for (;;) {
      if (this.stopped) return;
      const left = deadline - timers.now();
      const a = await this.attempt(peer, Math.max(1, left));
      if (this.stopped) {
        if ('socket' in a) a.socket.destroy();
        return;
      }
      if ('socket' in a) {
        const socket = a.socket;
        socket.on('error', () => {});
        try {
          checkDialledPeer(this.deps.endpoint.identityOf(socket), jobHex, peer);
        } catch (e) {
          socket.destroy();
          throw e;
        }
        this.deps.attach(peer, socket, a.reader);
        return;
      }
      if (!a.retry) {
        if (isPlexusError(a.error, 'PLX_CRYPTO_HOST_MISMATCH')) {
          throw peerCertificateRefused(
            'host',
            `the server dialled as rank ${peer} at ${hosts[peer]?.name} does not name that host in its certificate`,
            { peer, host: hosts[peer]?.name },
            a.error,
          );
        }
        throw handshakeRefused(peer, a.error);
      }
      if (timers.now() + retryMs >= deadline) throw lostPeerError(peer, 'connect', undefined, a.error);
      await this.sleep(pauses.next() ?? retryMs);
    }
  }

  /** Ends every dial: connections being made are destroyed, pauses end. */
  stop(): void {
    this.stopped = true;
    for (const s of this.dialing) s.destroy();
    for (const w of this.waits) w();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        this.deps.timers.clearTimeout(t);
        this.waits.delete(done);
        resolve();
      };
      const t: TimerHandle = this.deps.timers.setTimeout(done, ms);
      this.waits.add(done);
    });
  }

  /** One try: the TLS connection to `peer`, or its error (`retry` when TCP never connected). */
  private attempt(peer: number, timeoutMs: number): Promise<Attempt> {
    return new Promise((resolve) => {
      const entry = this.deps.hosts[peer] as { name: string; port: number };
      const reader = new StaticReader();
      // node:tls takes `onread` on a connection it opens itself (its types omit it).
      const options: tls.ConnectionOptions & ConnectOpts = this.deps.endpoint.clientOptions(
        { check: serverIdentityCheck(entry.name) },
        {
          onread: reader.onread,
          host: entry.name,
          port: entry.port,
          ...(isDottedIPv4(entry.name) ? {} : { servername: normalizeHost(entry.name) as string }),
        },
      );
      const socket = tls.connect(options);
      this.dialing.add(socket);
      let tcp = false;
      const timer = this.deps.timers.setTimeout(
        () =>
          socket.destroy(
            sperliError(SperliCode.frame, 'tls-handshake', `no TLS handshake within ${timeoutMs} ms`, { peer }),
          ),
        timeoutMs,
      );
      const settle = (a: Attempt): void => {
        this.deps.timers.clearTimeout(timer);
        this.dialing.delete(socket);
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
  }
}
