/**
 * Catch-up streams on the simulator: the byte streams a replica opens to another member
 * (`openStream` of its Raft transport) and serves (`onStream`), as `CatchUpSocket`s
 * (ts/replication/snapshot.ts) carried over the simulated network on simulated time.
 *
 * A stream behaves as a TCP connection does: bytes arrive in order, each write after a seeded
 * delay; a partition between the two members stalls them (retransmission) until it heals or a
 * reader's timeout gives up; a cut (the seed's `cutRate` per write, or `cutAll`) loses what
 * is in flight and closes both ends; a crashed member's ends fall silent (nothing more runs
 * there) and the other end sees the connection close after a delay. Opening one takes a
 * round trip; it is refused at once when nobody listens at the other member and times out
 * when the two cannot reach each other. Every event runs on the `ManualClock`'s timers, so a
 * run stays one deterministic loop.
 */
import type { ClockTimers } from '../../core/clock.js';
import { PlexusError } from '../../core/errors.js';
import type { CatchUpSocket } from '../../replication/snapshot.js';
import type { SimRandom } from '../rng.js';

/** Bytes a stream may have in flight before `write` asks its caller to wait for `drain`. */
const HIGH_WATER = 64 * 1024;
/** How often a stalled stream (its two members cut off from each other) tries again. */
const STALL_RETRY_MS = 10;

export interface SimStreamOptions {
  readonly minDelay: number;
  readonly maxDelay: number;
  /** The chance that a write cuts the connection (both ends close, what is in flight is lost). */
  readonly cutRate: number;
}

export interface SimStreamStats {
  opened: number;
  refused: number;
  cut: number;
  bytes: number;
}

/**
 * Rewrites what a member sends on a stream it serves, before the network carries it (a
 * planted bug of a catch-up source; see `ReplicationSimOptions.plant`).
 */
export type SimStreamTamper = (bytes: Uint8Array) => Uint8Array;

type Item = { readonly at: number; readonly bytes: Uint8Array } | { readonly at: number; readonly fin: true };

/** One member's incarnation: what it serves, and its ends of streams (silenced when it crashes). */
export class SimStreamEndpoint {
  alive = true;
  readonly sockets = new Set<SimSocket>();

  constructor(
    readonly id: number,
    readonly serve: ((from: number, socket: CatchUpSocket) => void) | undefined,
  ) {}
}

export class SimStreamNetwork {
  readonly stats: SimStreamStats = { opened: 0, refused: 0, cut: 0, bytes: 0 };
  private readonly endpoints = new Map<number, SimStreamEndpoint>();

  constructor(
    readonly clock: ClockTimers,
    readonly rng: SimRandom,
    /** Whether the two members can reach each other now (the Raft network's partitions). */
    readonly connected: (a: number, b: number) => boolean,
    public opts: SimStreamOptions,
    readonly tamper?: SimStreamTamper,
  ) {}

  /** A member's new incarnation; the last one, if any, crashes (its ends fall silent). */
  join(id: number, serve: ((from: number, socket: CatchUpSocket) => void) | undefined): SimStreamEndpoint {
    this.crash(id);
    const e = new SimStreamEndpoint(id, serve);
    this.endpoints.set(id, e);
    return e;
  }

  /** The member's process ends: its ends say nothing more; their peers see the connections close. */
  crash(id: number): void {
    const e = this.endpoints.get(id);
    if (!e) return;
    this.endpoints.delete(id);
    e.alive = false;
    for (const s of e.sockets) s.silence();
  }

  /** Cuts every open stream (both ends close; what is in flight is lost). */
  cutAll(): number {
    let n = 0;
    for (const id of this.endpoints.keys()) n += this.cutOf(id);
    return n;
  }

  /** Cuts every open stream with an end at member `id`. */
  cutOf(id: number): number {
    let n = 0;
    const e = this.endpoints.get(id);
    if (e) {
      for (const s of [...e.sockets]) {
        if (!s.destroyed && s.peer && !s.peer.destroyed) {
          s.cut();
          n++;
        }
      }
    }
    return n;
  }

  delay(): number {
    return this.rng.between(this.opts.minDelay, this.opts.maxDelay);
  }

  /** Opens a stream from `from`'s incarnation to member `to`: resolves with `from`'s end. */
  open(from: SimStreamEndpoint, to: number, timeoutMs: number): Promise<CatchUpSocket> {
    return new Promise<CatchUpSocket>((resolve, reject) => {
      const unreachable = (why: string) =>
        new PlexusError('PLX_RAFT_TRANSPORT_UNREACHABLE', `cannot open a stream to node ${to}: ${why}`, {
          id: to,
          reason: why,
        });
      if (!from.alive) {
        reject(unreachable('the transport is closed'));
        return;
      }
      const there = this.endpoints.get(to);
      const reach = this.delay();
      this.clock.setTimeout(() => {
        if (!from.alive) return; // the opener crashed: nothing more runs there
        const server = this.endpoints.get(to);
        if (!this.connected(from.id, to)) {
          // No answer to the handshake: the opener's timeout ends the wait.
          this.clock.setTimeout(() => from.alive && reject(unreachable('timeout')), Math.max(0, timeoutMs - reach));
          return;
        }
        if (!server || server !== there || !server.serve) {
          this.stats.refused++;
          this.clock.setTimeout(() => from.alive && reject(unreachable('refused')), this.delay());
          return;
        }
        this.stats.opened++;
        const a = new SimSocket(this, from, to, false);
        const b = new SimSocket(this, server, from.id, true);
        a.peer = b;
        b.peer = a;
        server.serve(from.id, b);
        // The handshake's answer travels back before the opener may write.
        this.clock.setTimeout(() => {
          if (!from.alive) return;
          if (a.destroyed) reject(unreachable('closed'));
          else resolve(a);
        }, this.delay());
      }, reach);
    });
  }
}

type Listener = (...args: never[]) => void;

/** One end of a simulated stream. */
export class SimSocket implements CatchUpSocket {
  peer: SimSocket | undefined;
  destroyed = false;
  /** The owner crashed: no event reaches this end any more. */
  private silent = false;
  private paused = true;
  /** Arrived while paused. */
  private readonly inbox: Uint8Array[] = [];
  /** On the way to the peer, in order. */
  private readonly queue: Item[] = [];
  private pumping = false;
  private lastAt = 0;
  private inFlight = 0;
  private wantDrain = false;
  /** The peer closed while data waited in the inbox: close once it is handed over. */
  private closing = false;
  private readonly listeners = new Map<string, { fn: Listener; once: boolean }[]>();

  constructor(
    private readonly net: SimStreamNetwork,
    private readonly owner: SimStreamEndpoint,
    /** The member at the other end. */
    readonly remote: number,
    /** The end a member serves (a catch-up source), not the one it opened. */
    readonly serving: boolean,
  ) {
    owner.sockets.add(this);
  }

  on(event: string, listener: Listener): this {
    this.add(event, listener, false);
    return this;
  }

  once(event: string, listener: Listener): this {
    this.add(event, listener, true);
    return this;
  }

  private add(event: string, fn: Listener, once: boolean): void {
    const l = this.listeners.get(event) ?? [];
    l.push({ fn, once });
    this.listeners.set(event, l);
  }

  private emit(event: string, ...args: unknown[]): void {
    if (this.silent) return;
    const l = this.listeners.get(event);
    if (!l) return;
    this.listeners.set(
      event,
      l.filter((x) => !x.once),
    );
    for (const x of l) (x.fn as (...a: unknown[]) => void)(...args);
  }

  write(bytes: Uint8Array): boolean {
    if (this.destroyed || this.silent) return false;
    const sent = this.net.tamper && this.serving ? this.net.tamper(bytes) : bytes;
    if (this.net.rng.chance(this.net.opts.cutRate)) {
      this.cut();
      return false;
    }
    this.net.stats.bytes += sent.length;
    this.enqueue({ at: this.nextAt(), bytes: sent.slice() });
    this.inFlight += sent.length;
    if (this.inFlight >= HIGH_WATER) {
      this.wantDrain = true;
      return false;
    }
    return true;
  }

  pause(): this {
    this.paused = true;
    return this;
  }

  resume(): this {
    if (!this.paused) return this;
    this.paused = false;
    // As a socket does, what waited is handed over on a later turn, not inside resume().
    if (this.inbox.length > 0) this.net.clock.setTimeout(() => this.flushInbox(), 0);
    return this;
  }

  isPaused(): boolean {
    return this.paused;
  }

  destroy(): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    this.owner.sockets.delete(this);
    this.enqueue({ at: this.nextAt(), fin: true });
    this.net.clock.setTimeout(() => this.emit('close'), 0);
    return this;
  }

  /** The owner crashed: this end falls silent; the peer sees the connection close. */
  silence(): void {
    if (this.silent) return;
    const wasOpen = !this.destroyed;
    this.silent = true;
    this.destroyed = true;
    this.owner.sockets.delete(this);
    if (wasOpen) this.enqueue({ at: this.nextAt(), fin: true });
  }

  /** The network cuts the connection: what is in flight either way is lost, both ends close. */
  cut(): void {
    this.net.stats.cut++;
    for (const s of [this, this.peer]) {
      if (!s || s.destroyed) continue;
      s.queue.length = 0;
      s.destroyed = true;
      s.owner.sockets.delete(s);
      this.net.clock.setTimeout(() => {
        s.emit('error', new Error('the connection was reset'));
        s.emit('close');
      }, this.net.delay());
    }
  }

  private nextAt(): number {
    this.lastAt = Math.max(this.lastAt, this.net.clock.now() + this.net.delay());
    return this.lastAt;
  }

  private enqueue(item: Item): void {
    this.queue.push(item);
    if (!this.pumping) this.schedule();
  }

  private schedule(): void {
    const head = this.queue[0];
    if (!head) {
      this.pumping = false;
      return;
    }
    this.pumping = true;
    this.net.clock.setTimeout(() => this.pump(), Math.max(0, head.at - this.net.clock.now()));
  }

  private pump(): void {
    const head = this.queue[0];
    const peer = this.peer;
    if (!head || !peer) {
      this.pumping = false;
      return;
    }
    if (!this.net.connected(this.owner.id, this.remote)) {
      // Cut off: retransmitted until the two can reach each other again.
      this.pumping = true;
      this.net.clock.setTimeout(() => this.pump(), STALL_RETRY_MS);
      return;
    }
    this.queue.shift();
    if ('fin' in head) peer.closedByPeer();
    else {
      this.inFlight -= head.bytes.length;
      peer.arrive(head.bytes);
      if (this.wantDrain && this.inFlight < HIGH_WATER && !this.destroyed) {
        this.wantDrain = false;
        this.emit('drain');
      }
    }
    this.schedule();
  }

  private arrive(bytes: Uint8Array): void {
    if (this.destroyed) return;
    if (this.paused || this.inbox.length > 0) this.inbox.push(bytes);
    else this.emit('data', bytes);
  }

  private flushInbox(): void {
    while (!this.paused && !this.destroyed && this.inbox.length > 0) this.emit('data', this.inbox.shift());
    if (this.closing && this.inbox.length === 0) this.closedByPeer();
  }

  private closedByPeer(): void {
    if (this.destroyed) return;
    if (this.inbox.length > 0) {
      this.closing = true;
      return;
    }
    this.destroyed = true;
    this.owner.sockets.delete(this);
    this.emit('close');
  }
}
