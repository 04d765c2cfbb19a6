/**
 * One rank's links to its peers, over any ordered byte pipe: the part of a RankTransport
 * that the TLS mesh (ts/sperli/mesh.ts) and the in-memory transport
 * (ts/sperli/memory-transport.ts) share. The owner of the pipes attaches one `Link` per
 * peer and feeds what arrives to `receive`; everything else happens here:
 *
 * - Each peer's bytes go through its own FrameStream (a FrameContext whose only allowed
 *   source rank is that peer), so frames of one peer reach `onFrame` in the order sent.
 * - HELLO goes to the owner's `onHello` (the mesh checks the join token there); HEARTBEAT
 *   counters must start at 1 and grow by one; ABORT ends the job with H1612 and is not
 *   forwarded; BYE marks the peer as gone normally.
 * - A refused frame ends the job: ABORT reason 2 to every peer, H1610. A peer that sends
 *   nothing for `silenceMs`, or whose link closes without BYE, is lost: ABORT reason 1,
 *   H1612 `lost-peer`.
 * - A HEARTBEAT goes out on a link every `heartbeatMs` when nothing else went out on it.
 *
 * Timers use a monotonic clock and are cleared when the job ends or closes.
 */
import { SperliCode, sperliError } from '../codec/sperli-errors.js';
import {
  encodeFrameHeader,
  FRAME_HEADER_SIZE,
  FrameContext,
  type FrameHeader,
  FrameType,
} from '../codec/sperli-frame.js';

/** Frames up to this payload size are written as one buffer (sendNow's limit too). */
const SMALL_FRAME = SEND_NOW_MAX;
/**
 * Larger payloads are written in pieces of this size, each after the link has taken the
 * one before (its backpressure), so that encryption here and decryption at the peer
 * overlap instead of following each other.
 */
const WRITE_PIECE = 128 * 1024;

import { type PieceEvent, PieceStream } from '../codec/sperli-mesh-stream.js';
import {
  type Abort,
  CKPT_DATA_HEADER_SIZE,
  COLLECTIVE_HEADER_SIZE,
  decodeAbort,
  decodeHeartbeat,
  encodeAbort,
  encodeHeartbeat,
} from '../codec/sperli-payloads.js';
import { type Clock, heldMonotonicClock, monotonicClock, type TimerHandle, type Timers } from '../core/clock.js';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { IncomingFrame } from './comm-stream.js';
import type { GrowingBytes } from './growing-bytes.js';
import {
  AbortReason,
  abortFor,
  abortReceivedError,
  checkAbort,
  checkSend,
  closedError,
  type LostCause,
  lostPeerError,
} from './mesh-errors.js';
import { type RankTransport, SEND_NOW_MAX, type TransportFrame } from './transport.js';

/**
 * What a Link's `write` may return when the link took the bytes and can take more at
 * once: nothing to wait for, and it never rejects.
 */
export const TAKEN: Promise<void> = Promise.resolve();

/** One ordered byte pipe to a peer, as its owner provides it. */
export interface Link {
  /**
   * Writes bytes; resolves when the pipe can take more (its backpressure), rejects when it
   * is gone. May return TAKEN when the pipe can take more at once. With `flushed`,
   * resolves only once the link has taken the bytes (the caller may reuse them).
   */
  write(bytes: Uint8Array, flushed?: boolean): Promise<void>;
  /** Ends the pipe once everything written is on its way; resolves when it is closed. */
  end(): Promise<void>;
}

export interface PeerLinksOptions {
  readonly jobId: Uint8Array;
  readonly rank: number;
  readonly size: number;
  readonly incarnation: number;
  /** A HEARTBEAT after this many ms without a frame sent on a link; 0: none. */
  readonly heartbeatMs: number;
  /** A peer silent for this many ms is lost; 0: never. */
  readonly silenceMs: number;
  /**
   * How long a close without BYE waits before it counts as a lost peer, so that an
   * ABORT already on its way over another link is the failure reported.
   */
  readonly closeGraceMs: number;
  /**
   * The HELLO payload this rank sends first on every link, and the check of each peer's
   * HELLO (throws the refusal). Without them, links start as if HELLOs were exchanged.
   */
  readonly hello?: {
    readonly payload: Uint8Array;
    readonly check: (peer: number, header: FrameHeader, payload: Uint8Array) => void;
  };
  /** Runs once when the job fails or closes; what it returns is awaited by `close()` and `abort()`. */
  readonly onShutdown?: () => Promise<void>;
  /** Monotonic milliseconds (default `monotonicClock`). */
  readonly clock?: Clock;
  /** Runs the heartbeat and silence timers (default `monotonicClock`'s: unreferenced). */
  readonly timers?: Timers;
  /**
   * Runs the close grace timer, which must keep the process alive until a lost link is
   * reported (default `heldMonotonicClock`'s).
   */
  readonly heldTimers?: Timers;
}

interface Peer {
  readonly rank: number;
  link: Link | undefined;
  stream: PieceStream | undefined;
  /** The COLLECTIVE frame whose payload is arriving piece by piece. */
  incoming: IncomingFrame | undefined;
  /** The event handler of this peer's stream (made once). */
  emit: (event: PieceEvent) => void;
  helloDone: boolean;
  /** The peer sent BYE. */
  bye: boolean;
  /** The pipe is closed. */
  closed: boolean;
  heartbeatIn: bigint;
  heartbeatOut: bigint;
  lastReceived: number;
  lastSent: number;
  heartbeatTimer: TimerHandle | undefined;
  silenceTimer: TimerHandle | undefined;
  ending: Promise<void> | undefined;
  /** A large frame is being written piece by piece; other writes wait in `backlog`. */
  busy: boolean;
  /** Writes that wait for the large frame in progress, in order. */
  backlog: (() => void)[];
  /** The bytes the frame in progress is sent from while they are still being filled (sendGrowing). */
  growing: GrowingBytes | undefined;
  /**
   * The 52 header bytes every frame to this peer shares (job id, source and target rank,
   * incarnation), encoded once when the link is attached; each frame's own fields are
   * written over a copy.
   */
  template: Uint8Array;
}

type State = 'open' | 'failed' | 'closed';

function noop(): void {}

const EMPTY = new Uint8Array(0);
/** What finishes a frame whose bytes will never come (see sendGrowing). */
const ZEROS = new Uint8Array(WRITE_PIECE);

export class PeerLinks implements RankTransport {
  readonly rank: number;
  readonly size: number;
  private readonly peers: Peer[] = [];
  private state: State = 'open';
  private failureError: PlexusError | undefined;
  private frameHandler: ((peer: number, frame: TransportFrame) => void) | undefined;
  private failureHandler: ((error: PlexusError) => void) | undefined;
  private leftHandler: ((peer: number) => void) | undefined;
  private failureReported = false;
  private readonly pending: [number, TransportFrame][] = [];
  private flushing = false;
  private graceTimers = new Set<TimerHandle>();
  private readonly timers: Timers;
  private readonly heldTimers: Timers;
  private streaming = false;
  /** The bytes being fed are a read buffer the owner uses again (see `receive`). */
  private transientInput = false;
  private shutdown: Promise<void> | undefined;
  private readonly clock: Clock;
  /** Called when every peer's HELLO has been accepted. */
  private readyListener: (() => void) | undefined;
  /** Called with the failure, before the failure handler (the mesh's setup listens here). */
  private failureListener: ((error: PlexusError) => void) | undefined;

  constructor(private readonly opts: PeerLinksOptions) {
    this.rank = opts.rank;
    this.size = opts.size;
    this.clock = opts.clock ?? monotonicClock;
    this.timers = opts.timers ?? monotonicClock;
    this.heldTimers = opts.heldTimers ?? heldMonotonicClock;
    for (let r = 0; r < opts.size; r++) {
      this.peers.push({
        rank: r,
        link: undefined,
        stream: undefined,
        helloDone: false,
        bye: false,
        closed: false,
        heartbeatIn: 0n,
        heartbeatOut: 0n,
        lastReceived: 0,
        lastSent: 0,
        heartbeatTimer: undefined,
        silenceTimer: undefined,
        ending: undefined,
        busy: false,
        backlog: [],
        growing: undefined,
        template: EMPTY,
        incoming: undefined,
        emit: noop,
      });
      const p = this.peers[r] as Peer;
      p.emit = (event) => {
        if (this.state === 'open') this.onEvent(p, event);
      };
    }
  }

  get failure(): PlexusError | undefined {
    return this.failureError;
  }

  /** Whether every peer's link is attached and its HELLO accepted. */
  get ready(): boolean {
    return this.peers.every((p) => p.rank === this.rank || p.helloDone);
  }

  /** Whether `peer` already has a link. */
  hasLink(peer: number): boolean {
    return this.peers[peer]?.link !== undefined;
  }

  /** Listeners for the owner's setup: all HELLOs accepted, or the job failed. */
  watch(onReady: () => void, onFailure: (error: PlexusError) => void): void {
    this.readyListener = onReady;
    this.failureListener = onFailure;
    if (this.failureError) onFailure(this.failureError);
    else if (this.ready) onReady();
  }

  /**
   * Attaches the pipe to `peer` (once). With `hello`, sends this rank's HELLO at once;
   * starts the heartbeat and silence timers.
   */
  attach(peer: number, link: Link): void {
    const p = this.peers[peer];
    if (p === undefined || peer === this.rank || p.link !== undefined) {
      throw new RangeError(`rank ${peer} cannot be attached to rank ${this.rank}`);
    }
    p.link = link;
    p.template = encodeFrameHeader({
      type: FrameType.HELLO,
      jobId: this.opts.jobId,
      sourceRank: this.rank,
      targetRank: peer,
      incarnation: this.opts.incarnation,
      length: 0,
    });
    const hello = this.opts.hello;
    p.stream = new PieceStream(
      new FrameContext(
        { jobId: this.opts.jobId, peerRank: peer, ownRank: this.rank, incarnation: this.opts.incarnation },
        { helloReceived: hello === undefined },
      ),
    );
    p.stream.streaming = this.streaming;
    p.helloDone = hello === undefined;
    const now = this.clock.now();
    p.lastReceived = now;
    p.lastSent = now;
    if (this.state !== 'open') {
      p.ending = this.endLink(p);
      return;
    }
    if (hello !== undefined) this.write(p, FrameType.HELLO, hello.payload);
    this.armHeartbeat(p, this.opts.heartbeatMs);
    this.armSilence(p, this.opts.silenceMs);
  }

  /**
   * Feeds bytes that arrived from `peer`. With `transient`, the owner uses `bytes` again
   * once this returns (a read buffer): whatever outlives the call is copied here.
   */
  receive(peer: number, bytes: Uint8Array, transient = false): void {
    const p = this.peers[peer];
    if (p?.stream === undefined || this.state !== 'open') return;
    const outer = this.transientInput;
    this.transientInput = transient;
    try {
      p.stream.push(bytes, p.emit, transient);
    } finally {
      this.transientInput = outer;
    }
  }

  /**
   * From now on, COLLECTIVE and CKPT_DATA frames of at least STREAM_MIN payload bytes
   * that do not arrive in one piece reach the frame handler at their header, with `incoming` set
   * (and an empty `payload`); their bytes follow through it as they arrive.
   */
  enableStreams(): void {
    this.streaming = true;
    for (const p of this.peers) if (p.stream !== undefined) p.stream.streaming = true;
  }

  /** The pipe to `peer` closed (or failed). Without a BYE before, the peer is lost. */
  linkClosed(peer: number, error?: unknown): void {
    const p = this.peers[peer];
    if (p === undefined || p.closed) return;
    p.closed = true;
    this.stopTimers(p);
    if (this.state !== 'open' || p.bye) return;
    // Ref'd: the loss must be found even when nothing else keeps the process alive (a
    // pending call's promise alone does not), so the call settles with H1612.
    const t = this.heldTimers.setTimeout(() => {
      this.graceTimers.delete(t);
      this.lose(peer, 'close', error);
    }, this.opts.closeGraceMs);
    this.graceTimers.add(t);
  }

  /** Ends the job with `error`; `abort`, when given, goes to every peer first. */
  failWith(error: PlexusError, abort?: Abort): void {
    if (this.state !== 'open') return;
    this.state = 'failed';
    this.failureError = error;
    this.stopAll();
    for (const p of this.peers) {
      p.incoming?.fail(error);
      p.incoming = undefined;
      // A frame sent as its bytes are filled will not get them: it is finished now, so the ABORT can follow.
      p.growing?.fail(error);
    }
    for (const p of this.peers) {
      if (p.link === undefined || p.closed || p.ending) continue;
      if (abort !== undefined && !p.bye) this.write(p, FrameType.ABORT, encodeAbort(abort)).catch(noop);
      p.ending = this.endLink(p);
    }
    this.startShutdown();
    this.failureListener?.(error);
    this.reportFailure();
  }

  // ----------------------------------------------------------------------------------
  // RankTransport

  send(peer: number, type: number, tag: number, payload: Uint8Array, epoch: bigint = 0n): Promise<void> {
    return this.sendPrefixed(peer, type, tag, undefined, payload, epoch);
  }

  /**
   * `send` of a frame whose payload is `prefix` followed by `payload` (e.g. a collective
   * header and the caller's data), without joining them into one buffer first.
   */
  async sendPrefixed(
    peer: number,
    type: number,
    tag: number,
    prefix: Uint8Array | undefined,
    payload: Uint8Array,
    epoch: bigint = 0n,
  ): Promise<void> {
    checkSend(this.rank, this.size, peer, type, tag, payload, epoch, prefix);
    if (this.failureError) throw this.failureError;
    if (this.state === 'closed') throw closedError();
    const p = this.peers[peer] as Peer;
    if (p.bye || p.link === undefined) throw closedError(peer);
    if (p.closed) throw lostPeerError(peer, 'close');
    try {
      await this.write(p, type, payload, tag, epoch, prefix);
    } catch {
      throw (
        this.failureError ??
        (p.bye || (this.state as State) === 'closed' ? closedError(peer) : lostPeerError(peer, 'close'))
      );
    }
  }

  /**
   * RankTransport.sendNow: `sendPrefixed` of a frame of at most SMALL_FRAME payload bytes,
   * copied into one buffer and handed to the link before this returns (behind a large
   * frame in progress, if any), so the caller may reuse `prefix` and `payload` at once.
   * Undefined when the link took the frame and can take more at once; else a promise the
   * caller handles, as `send`'s.
   */
  sendNow(peer: number, type: number, prefix: Uint8Array, payload: Uint8Array): Promise<void> | undefined {
    try {
      checkSend(this.rank, this.size, peer, type, 0, payload, 0n, prefix);
      if (prefix.length + payload.length > SMALL_FRAME) {
        throw new RangeError(`sendNow takes at most ${SMALL_FRAME} payload bytes`);
      }
      if (this.failureError) throw this.failureError;
      if (this.state === 'closed') throw closedError();
    } catch (e) {
      return Promise.reject(e);
    }
    const p = this.peers[peer] as Peer;
    if (p.bye || p.link === undefined) return Promise.reject(closedError(peer));
    if (p.closed) return Promise.reject(lostPeerError(peer, 'close'));
    const done = this.write(p, type, payload, 0, 0n, prefix);
    if (done === TAKEN) return undefined;
    return done.then(undefined, () => {
      throw (
        this.failureError ??
        (p.bye || (this.state as State) === 'closed' ? closedError(peer) : lostPeerError(peer, 'close'))
      );
    });
  }

  /** RankTransport.sendGrowing: a frame whose payload is sent as `source` fills. */
  async sendGrowing(
    peer: number,
    type: number,
    prefix: Uint8Array,
    source: GrowingBytes,
    start: number,
    end: number,
    lastOfMessage: boolean,
  ): Promise<void> {
    checkSend(this.rank, this.size, peer, type, 0, source.bytes.subarray(start, end), 0n, prefix);
    if (this.failureError) throw this.failureError;
    if (this.state === 'closed') throw closedError();
    const p = this.peers[peer] as Peer;
    if (p.bye || p.link === undefined) throw closedError(peer);
    if (p.closed) throw lostPeerError(peer, 'close');
    // The header waits for the first final byte: until then nothing is promised to the peer.
    await source.until(start === end ? source.bytes.length : start + 1);
    let failed: unknown;
    try {
      await this.writeGrowing(p, type, prefix, source, start, end, lastOfMessage);
    } catch (e) {
      failed = e;
    }
    if (failed === undefined) return;
    if (source.failed !== undefined) throw source.failed;
    throw (
      this.failureError ??
      (p.bye || (this.state as State) === 'closed' ? closedError(peer) : lostPeerError(peer, 'close'))
    );
  }

  onFrame(handler: (peer: number, frame: TransportFrame) => void): void {
    this.frameHandler = handler;
    if (this.pending.length > 0) queueMicrotask(() => this.flush());
  }

  onFailure(handler: (error: PlexusError) => void): void {
    this.failureHandler = handler;
    if (this.failureError && !this.failureReported) queueMicrotask(() => this.reportFailure());
  }

  /** RankTransport.onPeerLeft: `handler` hears of each peer's BYE as it arrives. */
  onPeerLeft(handler: (peer: number) => void): void {
    this.leftHandler = handler;
  }

  /** RankTransport.framesWaiting: accepted frames not yet handed to a frame handler. */
  get framesWaiting(): number {
    return this.pending.length;
  }

  /** RankTransport.closedLinks: links to peers that have closed. */
  get closedLinks(): number {
    let n = 0;
    for (const p of this.peers) if (p.closed) n++;
    return n;
  }

  /** RankTransport.lossesPending: links closed without BYE, waiting out the close grace. */
  get lossesPending(): number {
    return this.graceTimers.size;
  }

  /** Whether `peer` has left the job with BYE. */
  hasLeft(peer: number): boolean {
    return this.peers[peer]?.bye === true;
  }

  async abort(reason: number, error: PlexusError): Promise<void> {
    checkAbort(reason, error);
    // For a lost peer the ABORT names the lost rank as the one that first stopped.
    const peer = error.details.peer;
    const first =
      reason === AbortReason.lostPeer &&
      typeof peer === 'number' &&
      Number.isInteger(peer) &&
      peer >= 0 &&
      peer < this.size
        ? peer
        : this.rank;
    this.failWith(error, abortFor(reason, error, first));
    await this.settled();
  }

  async close(): Promise<void> {
    if (this.state === 'open') {
      this.state = 'closed';
      this.stopAll();
      for (const p of this.peers) {
        p.incoming?.fail(closedError());
        p.incoming = undefined;
        p.growing?.fail(closedError());
      }
      for (const p of this.peers) {
        if (p.link === undefined || p.closed || p.ending) continue;
        this.write(p, FrameType.BYE, new Uint8Array(0)).catch(noop);
        p.ending = this.endLink(p);
      }
      this.startShutdown();
    }
    await this.settled();
  }

  // ----------------------------------------------------------------------------------

  /** Resolves when every link has closed and the owner's shutdown is done. */
  private async settled(): Promise<void> {
    await Promise.all(this.peers.map((p) => p.ending));
    await this.shutdown;
  }

  private startShutdown(): void {
    this.shutdown ??= (this.opts.onShutdown?.() ?? Promise.resolve()).catch(noop);
  }

  private reportFailure(): void {
    const error = this.failureError;
    const handler = this.failureHandler;
    if (error === undefined || handler === undefined || this.failureReported) return;
    this.failureReported = true;
    handler(error);
  }

  /**
   * Ends `p`'s link once the large frame in progress (if any) and the writes waiting
   * behind it have been handed over, so that no frame is cut short by the end.
   */
  private endLink(p: Peer): Promise<void> {
    const link = p.link as Link;
    if (!p.busy) return link.end().catch(noop);
    return new Promise<void>((resolve) => {
      p.backlog.push(() => {
        link.end().then(resolve, resolve);
      });
    });
  }

  private write(p: Peer, type: number, payload: Uint8Array, tag = 0, epoch = 0n, prefix?: Uint8Array): Promise<void> {
    const pre = prefix?.length ?? 0;
    const length = pre + payload.length;
    if (length <= SMALL_FRAME) {
      // One buffer, one TLS record for small frames; made now, so the caller's bytes are
      // free once this returns even when the frame waits behind a large one.
      // Every byte is written below; a small Buffer comes from node's shared pool, with no
      // backing store of its own to allocate and collect per frame.
      const out = Buffer.allocUnsafe(FRAME_HEADER_SIZE + length);
      this.header(p, type, tag, epoch, length, out);
      if (prefix !== undefined) out.set(prefix, FRAME_HEADER_SIZE);
      if (payload.length > 0) out.set(payload, FRAME_HEADER_SIZE + pre);
      return this.writeSmall(p, out);
    }
    if (p.busy) {
      // A large frame is on its way piece by piece: this frame follows it, never inside it.
      const queued = new Promise<void>((resolve, reject) => {
        p.backlog.push(() => {
          this.write(p, type, payload, tag, epoch, prefix).then(resolve, reject);
        });
      });
      // As below: callers that do not await a frame of the transport's own leave it handled.
      queued.catch(noop);
      return queued;
    }
    const link = p.link as Link;
    p.lastSent = this.clock.now();
    // Large frames: the header (and prefix), then the caller's payload without a copy,
    // piece by piece behind the link's backpressure. The last piece resolves once the
    // link has taken it, so the caller's bytes are free again.
    const head = new Uint8Array(FRAME_HEADER_SIZE + pre);
    this.header(p, type, tag, epoch, length, head);
    if (prefix !== undefined) head.set(prefix, FRAME_HEADER_SIZE);
    p.busy = true;
    const done = this.writePieces(p, link, head, payload);
    const release = (): void => {
      p.busy = false;
      this.runBacklog(p);
    };
    done.then(release, release);
    // The transport's own frames are not awaited; a failed write shows as a closed link.
    done.catch(noop);
    return done;
  }

  /** Writes a whole small frame (`out`, header included), after a large frame in progress. */
  private writeSmall(p: Peer, out: Uint8Array): Promise<void> {
    if (p.busy) {
      const queued = new Promise<void>((resolve, reject) => {
        p.backlog.push(() => {
          this.writeSmall(p, out).then(resolve, reject);
        });
      });
      queued.catch(noop);
      return queued;
    }
    p.lastSent = this.clock.now();
    const done = (p.link as Link).write(out);
    // The transport's own frames are not awaited; a failed write shows as a closed link.
    if (done !== TAKEN) done.catch(noop);
    return done;
  }

  private writeGrowing(
    p: Peer,
    type: number,
    prefix: Uint8Array,
    source: GrowingBytes,
    start: number,
    end: number,
    lastOfMessage: boolean,
  ): Promise<void> {
    if (p.busy) {
      return new Promise<void>((resolve, reject) => {
        p.backlog.push(() => {
          this.writeGrowing(p, type, prefix, source, start, end, lastOfMessage).then(resolve, reject);
        });
      });
    }
    const link = p.link as Link;
    const head = new Uint8Array(FRAME_HEADER_SIZE + prefix.length);
    this.header(p, type, 0, 0n, prefix.length + end - start, head);
    head.set(prefix, FRAME_HEADER_SIZE);
    p.busy = true;
    p.growing = source;
    p.lastSent = this.clock.now();
    const done = (async () => {
      await link.write(head);
      let at = start;
      try {
        while (at < end) {
          await source.until(at + 1);
          const to = Math.min(source.ready, end, at + WRITE_PIECE);
          p.lastSent = this.clock.now();
          await link.write(source.bytes.subarray(at, to), to === end);
          at = to;
        }
      } catch (e) {
        if (source.failed === undefined) throw e;
        if (lastOfMessage) {
          // Zero bytes would complete the message: the peer must not take them as the result.
          await link.end();
          throw e;
        }
        for (; at < end; at += WRITE_PIECE) await link.write(ZEROS.subarray(0, Math.min(WRITE_PIECE, end - at)));
        throw e;
      }
    })();
    const release = (): void => {
      p.busy = false;
      p.growing = undefined;
      this.runBacklog(p);
    };
    done.then(release, release);
    return done;
  }

  private async writePieces(p: Peer, link: Link, head: Uint8Array, payload: Uint8Array): Promise<void> {
    await link.write(head);
    for (let off = 0; off < payload.length; ) {
      const end = Math.min(off + WRITE_PIECE, payload.length);
      p.lastSent = this.clock.now();
      await link.write(payload.subarray(off, end), end === payload.length);
      off = end;
    }
  }

  /** Runs the writes that waited for a large frame, until one of them is large again. */
  private runBacklog(p: Peer): void {
    while (!p.busy && p.backlog.length > 0) (p.backlog.shift() as () => void)();
  }

  /**
   * Writes the header of a frame to `p` into `out`: the peer's template, then the
   * length (u32 at 0), type (u8 at 4), epoch (u64 at 40) and tag (u32 at 48), all
   * little-endian. The caller's values were checked by checkSend (or are the
   * transport's own), so every one fits its field.
   */
  private header(p: Peer, type: number, tag: number, epoch: bigint, length: number, out: Uint8Array): void {
    out.set(p.template);
    out[0] = length & 0xff;
    out[1] = (length >>> 8) & 0xff;
    out[2] = (length >>> 16) & 0xff;
    out[3] = length >>> 24;
    out[4] = type;
    if (epoch !== 0n) new DataView(out.buffer, out.byteOffset + 40, 8).setBigUint64(0, epoch, true);
    if (tag !== 0) {
      out[48] = tag & 0xff;
      out[49] = (tag >>> 8) & 0xff;
      out[50] = (tag >>> 16) & 0xff;
      out[51] = tag >>> 24;
    }
  }

  private onEvent(p: Peer, event: PieceEvent): void {
    if (event.kind === 'refuse') {
      this.refuse(event.error);
      return;
    }
    p.lastReceived = this.clock.now();
    if (event.kind === 'drop') return;
    if (event.kind === 'piece') {
      p.incoming?.push(event.bytes, this.transientInput);
      return;
    }
    if (event.kind === 'end') {
      const f = p.incoming;
      p.incoming = undefined;
      f?.end();
      return;
    }
    const header = event.header;
    const payload = event.kind === 'frame' ? event.payload : EMPTY;
    if (p.bye) {
      this.refuse(
        sperliError(SperliCode.frame, 'bye-order', `rank ${p.rank} sent a ${header.type} frame after its BYE`, {
          type: header.type,
          sourceRank: p.rank,
        }),
      );
      return;
    }
    try {
      switch (header.type) {
        case FrameType.HELLO:
          this.opts.hello?.check(p.rank, header, payload);
          p.helloDone = true;
          if (this.ready) this.readyListener?.();
          return;
        case FrameType.HEARTBEAT: {
          const counter = decodeHeartbeat(payload);
          if (counter !== p.heartbeatIn + 1n) {
            throw sperliError(
              SperliCode.frame,
              'payload-size',
              `HEARTBEAT counter ${counter} from rank ${p.rank} does not follow ${p.heartbeatIn}; counters start at 1 and grow by one`,
              { rule: 'heartbeat-counter', counter, previous: p.heartbeatIn, sourceRank: p.rank },
            );
          }
          p.heartbeatIn = counter;
          return;
        }
        case FrameType.ABORT: {
          const a = decodeAbort(payload);
          this.failWith(abortReceivedError(p.rank, a));
          return;
        }
        case FrameType.BYE:
          p.bye = true;
          this.stopTimers(p);
          this.leftHandler?.(p.rank);
          return;
        default:
          if (event.kind === 'begin') {
            const head = header.type === FrameType.CKPT_DATA ? CKPT_DATA_HEADER_SIZE : COLLECTIVE_HEADER_SIZE;
            const incoming = new IncomingFrame(header.length, head);
            p.incoming = incoming;
            this.deliver(p.rank, { type: header.type, tag: header.tag, epoch: header.epoch, payload, incoming });
          } else this.deliver(p.rank, { type: header.type, tag: header.tag, epoch: header.epoch, payload });
      }
    } catch (e) {
      if (!isPlexusError(e)) throw e;
      this.refuse(e);
    }
  }

  private refuse(error: PlexusError): void {
    this.failWith(error, abortFor(AbortReason.protocolViolation, error, this.rank));
  }

  private lose(peer: number, cause: LostCause, error?: unknown): void {
    const e = lostPeerError(peer, cause, this.opts.silenceMs, error);
    this.failWith(e, abortFor(AbortReason.lostPeer, e, peer));
  }

  private deliver(peer: number, frame: TransportFrame): void {
    if (this.frameHandler === undefined || this.pending.length > 0) {
      this.pending.push([peer, frame]);
      return;
    }
    this.frameHandler(peer, frame);
  }

  private flush(): void {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.pending.length > 0 && this.frameHandler !== undefined) {
        const [peer, frame] = this.pending.shift() as [number, TransportFrame];
        this.frameHandler(peer, frame);
      }
    } finally {
      this.flushing = false;
    }
  }

  private armHeartbeat(p: Peer, delay: number): void {
    const every = this.opts.heartbeatMs;
    if (every <= 0) return;
    p.heartbeatTimer = this.timers.setTimeout(
      () => {
        p.heartbeatTimer = undefined;
        if (this.state !== 'open' || p.closed || p.bye) return;
        const since = this.clock.now() - p.lastSent;
        if (since >= every - 0.5) {
          p.heartbeatOut += 1n;
          this.write(p, FrameType.HEARTBEAT, encodeHeartbeat(p.heartbeatOut));
          this.armHeartbeat(p, every);
        } else {
          this.armHeartbeat(p, every - since);
        }
      },
      Math.max(1, Math.ceil(delay)),
    );
  }

  private armSilence(p: Peer, delay: number): void {
    const limit = this.opts.silenceMs;
    if (limit <= 0) return;
    p.silenceTimer = this.timers.setTimeout(
      () => {
        p.silenceTimer = undefined;
        if (this.state !== 'open' || p.closed || p.bye) return;
        const idle = this.clock.now() - p.lastReceived;
        if (idle >= limit - 0.5) this.lose(p.rank, 'silence');
        else this.armSilence(p, limit - idle);
      },
      Math.max(1, Math.ceil(delay)),
    );
  }

  private stopTimers(p: Peer): void {
    if (p.heartbeatTimer !== undefined) this.timers.clearTimeout(p.heartbeatTimer);
    if (p.silenceTimer !== undefined) this.timers.clearTimeout(p.silenceTimer);
    p.heartbeatTimer = undefined;
    p.silenceTimer = undefined;
  }

  private stopAll(): void {
    for (const p of this.peers) this.stopTimers(p);
    for (const t of this.graceTimers) this.heldTimers.clearTimeout(t);
    this.graceTimers.clear();
  }
}

/** The RankTransport of `links` and nothing else of it (what a caller gets). */
export function transportOf(links: PeerLinks): RankTransport {
  return {
    rank: links.rank,
    size: links.size,
    get failure() {
      return links.failure;
    },
    get framesWaiting() {
      return links.framesWaiting;
    },
    get closedLinks() {
      return links.closedLinks;
    },
    get lossesPending() {
      return links.lossesPending;
    },
    send: (peer, type, tag, payload, epoch) => links.send(peer, type, tag, payload, epoch),
    sendPrefixed: (peer, type, tag, prefix, payload, epoch) =>
      links.sendPrefixed(peer, type, tag, prefix, payload, epoch),
    sendNow: (peer, type, prefix, payload) => links.sendNow(peer, type, prefix, payload),
    sendGrowing: (peer, type, prefix, source, start, end, last) =>
      links.sendGrowing(peer, type, prefix, source, start, end, last),
    onFrame: (handler) => links.onFrame(handler),
    enableStreams: () => links.enableStreams(),
    onFailure: (handler) => links.onFailure(handler),
    onPeerLeft: (handler) => links.onPeerLeft(handler),
    abort: (reason, error) => links.abort(reason, error),
    close: () => links.close(),
  };
}
