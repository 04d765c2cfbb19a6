/**
 * The TLS sockets of a SPERLI mesh as links of its link table (ts/sperli/mesh-links.ts):
 * `SocketLink` writes with backpressure and ends with close_notify; `MeshSockets` hands
 * every connected socket's bytes and its close to the table.
 */
import type * as tls from 'node:tls';
import { monotonicClock, type Timers } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import { type Link, type PeerLinks, TAKEN } from './mesh-links.js';
import type { StaticReader } from './static-reader.js';

/** A TLS socket as a Link: writes with backpressure, ends with close_notify. */
export class SocketLink implements Link {
  private drain: Promise<void> | undefined;
  private drained: (() => void) | undefined;
  private gone: ((e: Error) => void) | undefined;
  private readonly closed: Promise<void>;
  private isClosed = false;

  constructor(
    private readonly socket: tls.TLSSocket,
    private readonly endTimeoutMs: number,
    /** Runs the end timeout (default unreferenced process timers). */
    private readonly timers: Timers = monotonicClock,
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
      const t = this.timers.setTimeout(() => this.socket.destroy(), this.endTimeoutMs);
      void this.closed.then(() => this.timers.clearTimeout(t));
    }
    return this.closed;
  }
}

/** The sockets attached to a mesh's link table. */
export class MeshSockets {
  private readonly attached: tls.TLSSocket[] = [];

  /** `endTimeoutMs`: how long a closing link waits for the peer's close before it destroys the socket. */
  constructor(
    private readonly links: PeerLinks,
    private readonly endTimeoutMs: number,
    private readonly timers: Timers = monotonicClock,
  ) {}

  /** Makes `socket` the link to `peer`; its bytes arrive through `reader` when given, else as 'data'. */
  attach(peer: number, socket: tls.TLSSocket, reader?: StaticReader): void {
    const links = this.links;
    this.attached.push(socket);
    socket.setNoDelay(true);
    let lastError: unknown;
    socket.on('error', (e) => {
      lastError = e;
    });
    links.attach(peer, new SocketLink(socket, this.endTimeoutMs, this.timers));
    if (reader !== undefined) reader.attach((bytes, transient) => links.receive(peer, bytes, transient));
    else socket.on('data', (chunk: Buffer) => links.receive(peer, chunk));
    socket.on('close', () => links.linkClosed(peer, lastError));
  }

  /** Lets the process end while the sockets are open. */
  unref(): void {
    for (const s of this.attached) s.unref();
  }
}
