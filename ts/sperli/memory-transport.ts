/**
 * A whole job's transports in one process, for fast tests of what runs above the seam
 * (ts/sperli/transport.ts). Ranks exchange real SPERLI frames over in-memory pipes, one
 * per pair of ranks, and each rank judges what arrives with the same code as the TLS
 * mesh (ts/sperli/mesh-links.ts): the same order per peer, the same frame checks, the
 * same failures (a refused frame sends ABORT reason 2; an ABORT received fails with
 * H1612; a pipe closed without BYE is a lost peer) and BYE on `close()`. HELLO is taken as
 * exchanged when the pipes are made, and there are no heartbeats or silence limit: a
 * pipe in memory cannot fall silent.
 *
 * Delivery is asynchronous (each pipe delivers on a later turn of the event loop), and a
 * pipe holding more than 1 MiB makes `send` wait until it has delivered.
 */
import { encodeFrame, type FrameInit } from '../codec/sperli-frame.js';
import { PlexusError } from '../core/errors.js';
import { badArgument } from './mesh-errors.js';
import { type Link, PeerLinks, transportOf } from './mesh-links.js';
import type { RankTransport } from './transport.js';

/** Bytes a pipe holds before `send` waits for it. */
const HIGH_WATER = 1 << 20;

export interface MemoryTransport extends RankTransport {
  /**
   * Test hook: bytes that arrive at this rank as if `peer` had sent them on its pipe,
   * after what `peer` already sent. They pass the same frame checks as any other bytes.
   */
  inject(peer: number, bytes: Uint8Array): void;
  /**
   * Test hook: the bytes of a frame from `peer` to this rank with every header field as
   * `peer` would send it unless `fields` says otherwise (for `inject`).
   */
  frameFrom(peer: number, type: number, payload?: Uint8Array, fields?: Partial<FrameInit>): Uint8Array;
  /** Test hook: drops every pipe of this rank at once, without BYE, as a crashed process would. */
  crash(): void;
}

export interface MemoryTransportOptions {
  /** The job id (default 16 zero bytes). */
  readonly jobId?: Uint8Array;
  /** The incarnation every rank runs (default 1). */
  readonly incarnation?: number;
  /**
   * Receive as a dialled TLS connection of the mesh does (a read buffer used again for
   * every read): the bytes of each delivery arrive in reads of at most this many bytes,
   * each copied into one buffer per rank that is overwritten after the read, so anything
   * kept without a copy shows as wrong bytes. Default: every delivery as one chunk of its own.
   */
  readonly readBuffer?: number;
}

/** One direction of a pair's pipe. */
class Half {
  readonly queue: Uint8Array[] = [];
  queued = 0;
  scheduled = false;
  waiters: { resolve: () => void; reject: (e: Error) => void }[] = [];
  ending = false;
  /** Ended, and everything before the end delivered. */
  finished = false;
}

/**
 * The pipe between two ranks. Ending one direction delivers what it holds, then ends the
 * other direction after what that one holds (as a TCP peer answers a FIN); the pipe is
 * closed when both have ended. `cut` drops it at once.
 */
class Pipe {
  readonly halves: [Half, Half] = [new Half(), new Half()];
  open = true;
  private readonly closedWaiters: (() => void)[] = [];

  constructor(
    readonly ranks: [number, number],
    private readonly deliver: (to: number, from: number, bytes: Uint8Array) => void,
    private readonly closedAt: (rank: number, peer: number) => void,
  ) {}

  private side(from: number): 0 | 1 {
    return from === this.ranks[0] ? 0 : 1;
  }

  private other(from: number): number {
    return from === this.ranks[0] ? this.ranks[1] : this.ranks[0];
  }

  push(from: number, bytes: Uint8Array): Promise<void> {
    const h = this.halves[this.side(from)];
    if (!this.open || h.ending) return Promise.reject(new PlexusError('PLX_SPERLI_CLOSED', 'the pipe is closed'));
    h.queue.push(bytes);
    h.queued += bytes.length;
    this.schedule(from);
    if (h.queued <= HIGH_WATER) return Promise.resolve();
    return new Promise((resolve, reject) => h.waiters.push({ resolve, reject }));
  }

  end(from: number): Promise<void> {
    const closed = new Promise<void>((resolve) => {
      if (this.open) this.closedWaiters.push(resolve);
      else resolve();
    });
    if (this.open) {
      this.halves[this.side(from)].ending = true;
      this.schedule(from);
    }
    return closed;
  }

  /** Closes both directions now; what is still queued is lost. */
  cut(): void {
    if (!this.open) return;
    this.open = false;
    for (const h of this.halves) {
      h.queue.length = 0;
      h.queued = 0;
      for (const w of h.waiters.splice(0)) w.reject(new PlexusError('PLX_SPERLI_CLOSED', 'the pipe is closed'));
    }
    for (const r of this.closedWaiters.splice(0)) r();
    const [a, b] = this.ranks;
    setImmediate(() => {
      this.closedAt(a, b);
      this.closedAt(b, a);
    });
  }

  private schedule(from: number): void {
    const h = this.halves[this.side(from)];
    if (h.scheduled) return;
    h.scheduled = true;
    setImmediate(() => {
      h.scheduled = false;
      const to = this.other(from);
      while (this.open && h.queue.length > 0) {
        const bytes = h.queue.shift() as Uint8Array;
        h.queued -= bytes.length;
        this.deliver(to, from, bytes);
      }
      if (h.queued <= HIGH_WATER) for (const w of h.waiters.splice(0)) w.resolve();
      if (!this.open || !h.ending || h.queue.length > 0 || h.finished) return;
      h.finished = true;
      const back = this.halves[this.side(to)];
      if (back.finished) this.cut();
      else {
        back.ending = true;
        this.schedule(to);
      }
    });
  }
}

/**
 * The transports of a job of `size` ranks (1..4096), rank `i` at index `i`, every pair
 * connected and ready.
 */
export function createMemoryTransports(size: number, options: MemoryTransportOptions = {}): MemoryTransport[] {
  if (!Number.isInteger(size) || size < 1 || size > 4096) {
    throw badArgument('size', `a job has 1..4096 ranks, not ${String(size)}`);
  }
  const jobId = options.jobId ?? new Uint8Array(16);
  const incarnation = options.incarnation ?? 1;
  const links: PeerLinks[] = [];
  const pipes = new Map<string, Pipe>();
  const key = (a: number, b: number): string => (a < b ? `${a}:${b}` : `${b}:${a}`);
  const pipeOf = (a: number, b: number): Pipe | undefined => pipes.get(key(a, b));

  for (let rank = 0; rank < size; rank++) {
    links.push(new PeerLinks({ jobId, rank, size, incarnation, heartbeatMs: 0, silenceMs: 0, closeGraceMs: 0 }));
  }
  const readSize = options.readBuffer;
  if (readSize !== undefined && (!Number.isInteger(readSize) || readSize < 1 || readSize > HIGH_WATER)) {
    throw badArgument('readBuffer', `readBuffer takes 1..${HIGH_WATER} bytes, not ${String(readSize)}`);
  }
  const readBuffers = readSize === undefined ? [] : links.map(() => new Uint8Array(readSize));
  const deliver = (to: number, from: number, bytes: Uint8Array): void => {
    const buf = readBuffers[to];
    if (buf === undefined) {
      links[to]?.receive(from, bytes);
      return;
    }
    for (let at = 0; at < bytes.length; at += buf.length) {
      const n = Math.min(buf.length, bytes.length - at);
      buf.set(bytes.subarray(at, at + n));
      links[to]?.receive(from, buf.subarray(0, n), true);
      buf.fill(0xee);
    }
  };
  const closedAt = (rank: number, peer: number): void => links[rank]?.linkClosed(peer);
  for (let a = 0; a < size; a++) {
    for (let b = a + 1; b < size; b++) pipes.set(key(a, b), new Pipe([a, b], deliver, closedAt));
  }
  for (let rank = 0; rank < size; rank++) {
    for (let peer = 0; peer < size; peer++) {
      if (peer === rank) continue;
      const pipe = pipeOf(rank, peer) as Pipe;
      // A socket copies what it is given; so does this link (the caller may reuse its bytes).
      const link: Link = { write: (bytes) => pipe.push(rank, Uint8Array.from(bytes)), end: () => pipe.end(rank) };
      (links[rank] as PeerLinks).attach(peer, link);
    }
  }

  return links.map((l, rank) => {
    const checkPeer = (peer: number): Pipe => {
      const pipe = Number.isInteger(peer) && peer !== rank ? pipeOf(rank, peer) : undefined;
      if (pipe === undefined) throw badArgument('peer', `peer ${peer} is not another rank of this job`, { peer });
      return pipe;
    };
    const hooks: Pick<MemoryTransport, 'inject' | 'frameFrom' | 'crash'> = {
      inject(peer, bytes) {
        const pipe = checkPeer(peer);
        pipe.push(peer, Uint8Array.from(bytes)).catch(() => {});
      },
      frameFrom(peer, type, payload = new Uint8Array(0), fields = {}) {
        checkPeer(peer);
        return encodeFrame({ type, jobId, sourceRank: peer, targetRank: rank, incarnation, ...fields }, payload);
      },
      crash() {
        for (let peer = 0; peer < size; peer++) if (peer !== rank) pipeOf(rank, peer)?.cut();
      },
    };
    return Object.assign(transportOf(l), hooks);
  });
}
