/**
 * Carries Raft messages between processes over TCP, or TLS 1.3 with mutual authentication
 * when `tls` is given (docs/raft-wire.md). With TLS, a connection is bound to the node its
 * certificate names (`tls.peerId`): the server refuses a client certificate that names no
 * node, and a greeting whose sender id is not the certificate's; the client refuses a server
 * whose certificate does not name the node it dialled (during the handshake); a connection
 * that does not start with a TLS record is refused (unless `tls.mode` is `permissive`, the
 * step that moves a plaintext cluster to TLS). Each node dials every peer it sends to and keeps
 * that one connection for its messages to the peer; it only reads on the connections peers
 * dial to it. A connection opens with a 24-byte greeting (magic `PXRH`, u32 version 1,
 * u64 sender id, u64 receiver id), then carries wire messages one after another.
 *
 * Raft tolerates lost messages, so the transport never blocks the core: a message for a
 * peer that is not connected, or whose socket already holds `maxQueuedBytes`, is dropped
 * and counted; the leader's next heartbeat or append retries. Messages to one peer sent in
 * the same tick are written together (the socket is corked until the next tick). A dropped connection is
 * dialled again after a backoff that doubles from `retryMs` up to `maxRetryMs`, with full jitter
 * (ts/core/retry.ts). A received
 * message must come from the id the connection greeted with and be addressed to this node;
 * anything else (and any message the decoder refuses) closes the connection.
 *
 * The same port also takes side streams for the application (`openStream`, `onStream`): a
 * connection whose greeting carries magic `PXRS` instead of `PXRH` is handed, after the
 * greeting and with the same TLS authentication, to `onStream` as a plain duplex socket.
 * Chronacta's replicated log uses one to send the records below a snapshot to a member that
 * catches up (docs/chronacta-ha.md, "Snapshots and catch-up").
 */
import { createServer as createTcpServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import {
  createServer as createTlsServer,
  type PeerCertificate,
  type TLSSocket,
  type Server as TlsServer,
  connect as tlsConnect,
} from 'node:tls';
import { decodeRaftGreeting, encodeRaftGreeting, RAFT_GREETING_BYTES } from '../codec/raft-greeting.js';
import { encodeRaftMessage, RaftMessageStream } from '../codec/raft-wire.js';
import { heldMonotonicClock, type TimerHandle, type Timers } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import type { Message } from '../raft/types.js';
import type { RaftTransport, RaftTransportStats } from './transport.js';

export type { RaftTransportStats } from './transport.js';

import { type Backoff, RetryPolicy } from '../core/retry.js';
import { type TlsEndpoint, tlsEndpoint } from '../net/tls-endpoint.js';

export interface RaftTlsOptions {
  /** PEM key and certificate of this node, and the CA that signs every member's certificate. */
  readonly key: string;
  readonly cert: string;
  readonly ca: string;
  /**
   * The node id a peer certificate (already checked against `ca`) names, or undefined when
   * it names none. Binds each connection to one node: the greeting and every message must
   * come from that id, and a dialled server must be the node dialled.
   */
  readonly peerId: (cert: PeerCertificate) => number | undefined;
  /**
   * `required` (default): every connection is TLS, plaintext is refused. `permissive`: also
   * accepts plaintext connections (their greeting is trusted, as without TLS) and dials a
   * peer in plaintext when its TLS handshake failed: only for the rolling restart that moves
   * a plaintext cluster to TLS (docs/chronacta-ha.md, "From plaintext to TLS").
   */
  readonly mode?: 'required' | 'permissive';
}

export interface RaftTransportOptions {
  readonly id: number;
  /** Where to listen; port 0 picks a free port. Default 127.0.0.1:0. */
  readonly host?: string;
  readonly port?: number;
  /** Peer id -> "host:port" to dial. */
  readonly peers?: ReadonlyMap<number, string>;
  readonly tls?: RaftTlsOptions;
  /** Called with each message received for this node, in arrival order per peer (or set later by `onMessage`). */
  readonly onMessage?: (m: Message) => void;
  /**
   * Called with each side stream a peer opens (`openStream`), after its greeting; the
   * callee owns the socket, which is paused (attach a reader, then `resume()`). Without
   * it, side streams are refused.
   */
  readonly onStream?: (from: number, socket: Socket) => void;
  /** First redial delay, doubled up to `maxRetryMs`. Defaults 50 and 1000 ms. */
  readonly retryMs?: number;
  readonly maxRetryMs?: number;
  /** Bytes a peer's socket may hold unsent before messages to it are dropped. Default 64 MiB. */
  readonly maxQueuedBytes?: number;
  /** How long an inbound connection may take to finish its TLS handshake and greeting. Default 10,000 ms. */
  readonly greetingTimeoutMs?: number;
  /**
   * Runs the redial pauses and the call and greeting timeouts (default `heldMonotonicClock`:
   * a pending redial keeps the process alive, as a member must keep reaching its peers).
   */
  readonly timers?: Timers;
  /**
   * The largest message body taken from a peer: a header announcing more closes the
   * connection before the body is held. Default MAX_MESSAGE_BYTES (80 MiB: a Chronacta
   * append of up to 64 MiB in one entry, with room).
   */
  readonly maxMessageBytes?: number;
  /**
   * Bytes of unfinished messages held over all inbound connections together: a connection
   * whose bytes would pass it is closed (its sender redials and sends again). Default twice
   * `maxMessageBytes`.
   */
  readonly maxInboundBytes?: number;
  /** Inbound connections open at once (Raft and side streams, TLS handshakes included); more are closed at once. Default 256. */
  readonly maxInboundConnections?: number;
  readonly logger?: { warn(message: string, details?: Record<string, unknown>): void };
}

/** The default largest message body a peer may send (`maxMessageBytes`). */
export const MAX_MESSAGE_BYTES = 80 * 1024 * 1024;
/** The default cap on inbound connections (`maxInboundConnections`). */
export const MAX_INBOUND_CONNECTIONS = 256;

function parseAddress(addr: string): { host: string; port: number } {
  const i = addr.lastIndexOf(':');
  const port = Number(addr.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new PlexusError('PLX_RAFT_TRANSPORT_BAD_ADDRESS', `"${addr}" is not host:port`, { address: addr });
  }
  return { host: addr.slice(0, i), port };
}

interface Peer {
  address: string;
  socket: Socket | undefined;
  connecting: boolean;
  /** Redial delays: the one retry policy, reset once a connection opened. */
  backoff: Backoff;
  timer: TimerHandle | undefined;
  /** Permissive TLS: the next dial is plaintext (the last TLS attempt failed). */
  plain: boolean;
}

/** The TLS endpoint of a member: its PEM files, peers named by `peerId`. */
function memberEndpoint(tls: RaftTlsOptions): TlsEndpoint<number> {
  return tlsEndpoint(tls, { kind: 'node', identify: tls.peerId });
}

/** The first byte of a TLS record carrying a handshake message (RFC 8446 §5.1, ContentType 22). */
const TLS_HANDSHAKE = 0x16;

export class RaftTcpTransport implements RaftTransport {
  readonly stats: RaftTransportStats = { sent: 0, received: 0, dropped: 0, refused: 0, dials: 0 };
  /** Bytes of unfinished messages held now over every inbound connection. */
  private inboundHeld = 0;
  /** Inbound TCP connections open now (side streams included). */
  private inboundOpen = 0;
  private readonly peers = new Map<number, Peer>();
  private readonly inbound = new Set<Socket>();
  private readonly streams = new Set<Socket>();
  private readonly corked = new Set<Socket>();
  private closed = false;
  private handler: (m: Message) => void;
  private readonly retryMs: number;
  private readonly maxRetryMs: number;
  private readonly retry: RetryPolicy;
  private readonly maxQueued: number;
  private readonly timers: Timers;

  private constructor(
    private readonly opts: RaftTransportOptions,
    private readonly server: Server,
    private readonly tlsServer: TlsServer | undefined,
  ) {
    this.handler = opts.onMessage ?? (() => undefined);
    this.retryMs = opts.retryMs ?? 50;
    this.maxRetryMs = opts.maxRetryMs ?? 1000;
    this.retry = new RetryPolicy({ baseMs: this.retryMs, capMs: Math.max(this.retryMs, this.maxRetryMs) });
    this.maxQueued = opts.maxQueuedBytes ?? 64 * 1024 * 1024;
    this.timers = opts.timers ?? heldMonotonicClock;
    for (const [id, addr] of opts.peers ?? []) this.setPeer(id, addr);
  }

  static async start(opts: RaftTransportOptions): Promise<RaftTcpTransport> {
    if (!Number.isSafeInteger(opts.id) || opts.id < 1) {
      throw new PlexusError('PLX_RAFT_TRANSPORT_BAD_ADDRESS', `node id ${opts.id} must be a positive integer`);
    }
    const tls = opts.tls;
    if (tls && typeof tls.peerId !== 'function') {
      throw new PlexusError('PLX_RAFT_TRANSPORT_BAD_ADDRESS', 'TLS needs peerId, the node id a certificate names');
    }
    if (tls?.mode !== undefined && tls.mode !== 'required' && tls.mode !== 'permissive') {
      throw new PlexusError('PLX_RAFT_TRANSPORT_BAD_ADDRESS', `TLS mode ${String(tls.mode)} is required or permissive`);
    }
    // One TCP listener; with TLS, a connection whose first byte starts a TLS record goes to
    // the TLS server (which never listens itself), anything else is plaintext.
    const server = createTcpServer();
    const tlsServer = tls
      ? createTlsServer(memberEndpoint(tls).serverOptions({ handshakeTimeout: opts.greetingTimeoutMs ?? 10_000 }))
      : undefined;
    const t = new RaftTcpTransport(opts, server, tlsServer);
    server.on('connection', (s: Socket) => t.sniff(s));
    tlsServer?.on('secureConnection', (s: TLSSocket) => t.secured(s));
    tlsServer?.on('tlsClientError', (err: Error, s: TLSSocket) => {
      t.stats.refused++;
      t.opts.logger?.warn('raft transport: refused a TLS handshake', {
        error: err.message,
        code: 'PLX_RAFT_TRANSPORT_REFUSED',
      });
      s.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    return t;
  }

  get port(): number {
    const a = this.server.address();
    if (a === null || typeof a === 'string') return 0;
    return a.port;
  }

  get address(): string {
    return `${this.opts.host ?? '127.0.0.1'}:${this.port}`;
  }

  /** Adds a peer or changes its address (an open connection to the old address is closed). */
  setPeer(id: number, address: string): void {
    parseAddress(address);
    const p = this.peers.get(id);
    if (p && p.address === address) return;
    if (p) this.dropPeer(p);
    this.peers.set(id, {
      address,
      socket: undefined,
      connecting: false,
      backoff: this.retry.start(),
      timer: undefined,
      plain: false,
    });
  }

  removePeer(id: number): void {
    const p = this.peers.get(id);
    if (p) this.dropPeer(p);
    this.peers.delete(id);
  }

  /** Sends each message to its `to`; never blocks and never throws for an unreachable peer. */
  send(messages: readonly Message[]): void {
    for (const m of messages) {
      const p = this.peers.get(m.to);
      if (!p || this.closed) {
        this.stats.dropped++;
        continue;
      }
      const s = p.socket;
      if (!s || s.destroyed || s.writableLength > this.maxQueued) {
        this.stats.dropped++;
        if (!s && !p.connecting && !p.timer) this.dial(m.to, p);
        continue;
      }
      // Messages to one peer within a tick leave in one write (corked until the next tick).
      if (!this.corked.has(s)) {
        s.cork();
        this.corked.add(s);
        if (this.corked.size === 1) process.nextTick(this.flush);
      }
      s.write(encodeRaftMessage(m));
      this.stats.sent++;
    }
  }

  /** Uncorks every socket written to in this tick (one write, a syscall, per peer): they leave now. */
  readonly flush = (): void => {
    for (const s of this.corked) if (!s.destroyed) s.uncork();
    this.corked.clear();
  };

  onMessage(handler: (m: Message) => void): void {
    this.handler = handler;
  }

  /** Whether a connection to the peer is open now. */
  connected(id: number): boolean {
    const s = this.peers.get(id)?.socket;
    return s !== undefined && !s.destroyed;
  }

  /**
   * Opens a side stream to peer `id` at its current address (TLS when configured) and
   * resolves with the socket once the greeting is written; the caller owns and closes it.
   * Fails with PLX_RAFT_TRANSPORT_UNREACHABLE when the peer is unknown or does not answer
   * within `timeoutMs`.
   */
  openStream(id: number, timeoutMs = 5000): Promise<Socket> {
    const p = this.peers.get(id);
    if (!p || this.closed) {
      return Promise.reject(
        new PlexusError('PLX_RAFT_TRANSPORT_UNREACHABLE', `no address is known for node ${id}`, { id }),
      );
    }
    const first = this.openStreamOnce(id, p.address, this.opts.tls !== undefined, timeoutMs);
    if (this.opts.tls?.mode !== 'permissive') return first;
    // Permissive: a peer that does not speak TLS yet is asked in plaintext.
    return first.catch(() => this.openStreamOnce(id, p.address, false, timeoutMs));
  }

  private openStreamOnce(id: number, address: string, useTls: boolean, timeoutMs: number): Promise<Socket> {
    const { host, port } = parseAddress(address);
    const s: Socket = useTls ? this.tlsDial(id, host, port) : tcpConnect(port, host);
    s.setNoDelay(true);
    this.streams.add(s);
    s.on('close', () => this.streams.delete(s));
    return new Promise<Socket>((resolve, reject) => {
      const fail = (why: string) => {
        this.timers.clearTimeout(timer);
        s.destroy();
        reject(
          new PlexusError(
            'PLX_RAFT_TRANSPORT_UNREACHABLE',
            `cannot open a stream to node ${id} at ${address}: ${why}`,
            {
              id,
              address,
            },
          ),
        );
      };
      const timer = this.timers.setTimeout(() => fail(`no answer within ${timeoutMs} ms`), timeoutMs);
      s.once('error', (err) => fail(err.message));
      s.once('close', () => fail('the connection closed'));
      s.once(useTls ? 'secureConnect' : 'connect', () => {
        this.timers.clearTimeout(timer);
        s.removeAllListeners('error');
        s.removeAllListeners('close');
        s.on('error', () => undefined);
        s.on('close', () => this.streams.delete(s));
        s.write(encodeRaftGreeting(this.opts.id, id, 'stream'));
        resolve(s);
      });
    });
  }

  /**
   * A TLS connection to node `id`: the server's certificate must chain to the CA and name
   * `id` (checked during the handshake, which fails otherwise).
   */
  private tlsDial(id: number, host: string, port: number): Socket {
    const tls = this.opts.tls as RaftTlsOptions;
    // Members are named by id, not by host: the certificate must name the node dialled.
    return tlsConnect(
      memberEndpoint(tls).clientOptions(
        {
          expect: id,
          mismatch: (named) => {
            this.stats.refused++;
            return new PlexusError(
              'PLX_RAFT_TRANSPORT_REFUSED',
              `the server at ${host}:${port} presented a certificate of ${named === undefined ? 'no node' : `node ${named}`}, not of node ${id}`,
              { id, named },
            );
          },
        },
        { host, port },
      ),
    );
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.peers.values()) this.dropPeer(p);
    for (const s of this.inbound) s.destroy();
    this.inbound.clear();
    for (const s of this.streams) s.destroy();
    this.streams.clear();
    this.tlsServer?.close();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private dropPeer(p: Peer): void {
    if (p.timer) this.timers.clearTimeout(p.timer);
    p.timer = undefined;
    p.socket?.destroy();
    p.socket = undefined;
    p.connecting = false;
  }

  private dial(id: number, p: Peer): void {
    if (this.closed) return;
    p.connecting = true;
    this.stats.dials++;
    const { host, port } = parseAddress(p.address);
    const useTls = this.opts.tls !== undefined && !p.plain;
    const s: Socket = useTls ? this.tlsDial(id, host, port) : tcpConnect(port, host);
    s.setNoDelay(true);
    const ready = useTls ? 'secureConnect' : 'connect';
    let opened = false;
    s.once(ready, () => {
      opened = true;
      if (this.peers.get(id) !== p || this.closed) {
        s.destroy();
        return;
      }
      p.connecting = false;
      p.socket = s;
      p.backoff.reset();
      s.write(encodeRaftGreeting(this.opts.id, id));
    });
    // The dialled side never writes; data here is a protocol error.
    s.on('data', () => s.destroy());
    s.on('error', () => undefined);
    s.on('close', () => {
      if (p.socket === s) p.socket = undefined;
      p.connecting = false;
      // Permissive: after a failed TLS attempt try plaintext once, then TLS again.
      if (this.opts.tls?.mode === 'permissive') p.plain = useTls && !opened;
      if (this.closed || this.peers.get(id) !== p) return;
      if (opened) p.backoff.reset();
      const wait = p.backoff.next() ?? this.maxRetryMs;
      p.timer = this.timers.setTimeout(() => {
        p.timer = undefined;
        if (!p.socket && !p.connecting) this.dial(id, p);
      }, wait);
    });
  }

  /**
   * A new TCP connection. Without TLS it is accepted as it is. With TLS its first byte
   * decides: a TLS handshake record goes to the TLS server; anything else is refused, or in
   * permissive mode accepted in plaintext.
   */
  private sniff(s: Socket): void {
    if (this.closed) {
      s.destroy();
      return;
    }
    if (this.inboundOpen >= (this.opts.maxInboundConnections ?? MAX_INBOUND_CONNECTIONS)) {
      this.refuse(s, `${this.inboundOpen} inbound connections are open, the most allowed`);
      return;
    }
    this.inboundOpen++;
    s.once('close', () => this.inboundOpen--);
    s.setNoDelay(true);
    this.inbound.add(s);
    s.on('close', () => this.inbound.delete(s));
    s.on('error', () => undefined);
    if (!this.tlsServer) {
      this.accept(s, undefined);
      return;
    }
    // A peer that says nothing is not held forever (then the TLS handshake timeout, then accept's).
    const timer = this.timers.setTimeout(
      () => this.refuse(s, 'no greeting in time'),
      this.opts.greetingTimeoutMs ?? 10_000,
    );
    s.once('close', () => this.timers.clearTimeout(timer));
    s.once('data', (chunk: Buffer) => {
      this.timers.clearTimeout(timer);
      s.pause();
      s.unshift(chunk);
      if (chunk[0] === TLS_HANDSHAKE) {
        (this.tlsServer as TlsServer).emit('connection', s);
      } else if (this.opts.tls?.mode === 'permissive') {
        this.accept(s, undefined);
        s.resume();
      } else {
        this.refuse(s, 'a plaintext connection on a TLS port');
      }
    });
  }

  /** A TLS connection whose client certificate chains to the CA: bound to the node it names. */
  private secured(s: TLSSocket): void {
    if (this.closed) {
      s.destroy();
      return;
    }
    const peer = memberEndpoint(this.opts.tls as RaftTlsOptions).accept(s);
    const named = peer.identity;
    if (named === undefined) {
      this.refuse(
        s,
        peer.refused === 'unnamed' ? 'the client certificate names no node' : 'an unauthorized client certificate',
      );
      return;
    }
    this.inbound.add(s);
    s.on('close', () => this.inbound.delete(s));
    this.accept(s, named);
  }

  private refuse(s: Socket, why: string, details: Record<string, unknown> = {}): void {
    this.stats.refused++;
    this.opts.logger?.warn(`raft transport: closing a connection: ${why}`, {
      ...details,
      code: 'PLX_RAFT_TRANSPORT_REFUSED',
    });
    s.destroy();
  }

  /** Reads the greeting and the messages of an inbound connection; `certified` is the id its certificate names. */
  private accept(s: Socket, certified: number | undefined): void {
    let from = 0;
    // Until the greeting is in: a peer that says nothing is not held forever.
    const timer = this.timers.setTimeout(
      () => this.refuse(s, 'no greeting in time'),
      this.opts.greetingTimeoutMs ?? 10_000,
    );
    s.once('close', () => this.timers.clearTimeout(timer));
    let head = new Uint8Array(0);
    const maxMessage = this.opts.maxMessageBytes ?? MAX_MESSAGE_BYTES;
    const maxHeld = this.opts.maxInboundBytes ?? 2 * maxMessage;
    const stream = new RaftMessageStream(maxMessage);
    // This connection's share of `inboundHeld`, given back when it closes.
    let held = 0;
    s.once('close', () => {
      this.inboundHeld -= held;
      held = 0;
    });
    const refuse = (why: string, details: Record<string, unknown> = {}) => this.refuse(s, why, details);
    s.on('data', (chunk: Buffer) => {
      // A plain view (no copy): decoded entries and snapshots are Uint8Arrays, never Buffers.
      let data = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length);
      if (from === 0) {
        const joined = new Uint8Array(head.length + data.length);
        joined.set(head);
        joined.set(data, head.length);
        if (joined.length < RAFT_GREETING_BYTES) {
          head = joined;
          return;
        }
        const g = decodeRaftGreeting(joined);
        if (g === undefined) return refuse('not a Raft greeting');
        const { to, from: sender } = g;
        if (to !== this.opts.id) return refuse(`the peer dialled node ${to}, this is node ${this.opts.id}`, { to });
        if (sender < 1n || sender > BigInt(Number.MAX_SAFE_INTEGER)) return refuse('bad sender id');
        if (certified !== undefined && sender !== BigInt(certified)) {
          return refuse(`the greeting claims node ${sender}, the certificate names node ${certified}`, {
            certified,
            claimed: String(sender),
          });
        }
        from = Number(sender);
        this.timers.clearTimeout(timer);
        data = joined.subarray(RAFT_GREETING_BYTES);
        head = new Uint8Array(0);
        if (g.kind === 'stream') {
          const onStream = this.opts.onStream;
          if (!onStream) return refuse('side streams are not served here', { from });
          // Hand the socket over: it is the callee's from here on, with the bytes after the greeting.
          s.pause();
          s.removeAllListeners('data');
          this.inbound.delete(s);
          this.streams.add(s);
          s.on('close', () => this.streams.delete(s));
          if (data.length > 0) s.unshift(Buffer.from(data.buffer, data.byteOffset, data.length));
          onStream(from, s);
          return;
        }
      }
      if (this.inboundHeld + data.length > maxHeld && held + data.length > 0) {
        // Over the cap for every connection together: this one goes (its sender redials).
        return refuse(`unfinished messages would hold more than ${maxHeld} bytes`, { from, held });
      }
      let msgs: Message[];
      try {
        msgs = stream.push(data);
      } catch (err) {
        return refuse(err instanceof Error ? err.message : String(err), { from });
      }
      this.inboundHeld += stream.buffered - held;
      held = stream.buffered;
      for (const m of msgs) {
        if (m.from !== from || m.to !== this.opts.id) {
          return refuse(`a message from ${m.from} to ${m.to} on node ${from}'s connection`, { from });
        }
        this.stats.received++;
        this.handler(m);
      }
    });
    s.on('error', () => undefined);
  }
}
