/**
 * The outbound side of the cluster wire (ts/net/http2-wire.ts): connections to peers, one
 * long-lived frame stream per (sender, target) pair up to `streamCap`, batches, ACKs,
 * resends after a failure, delivery deadlines, and calls.
 */
import { randomBytes } from 'node:crypto';
import * as http2 from 'node:http2';
import { performance } from 'node:perf_hooks';
import type { TLSSocket } from 'node:tls';
import {
  AckRunReader,
  type AckStatusCode,
  ackStatusName,
  CLUSTER_HEADER_SIZE,
  ClusterFrameKind,
  ClusterFrameReader,
  MAX_CLUSTER_FRAME,
  MAX_IRI_BYTES,
  writeDataFrame,
} from '../codec/cluster-frame.js';
import type { ClockTimers, TimerHandle } from '../core/clock.js';
import { codeFromPeer, isPlexusError, PlexusError } from '../core/errors.js';
import { fnv1a64 } from '../core/index.js';
import { type Backoff, RetryPolicy } from '../core/retry.js';
import type { Spinner } from '../core/spinner.js';
import { nodeName } from './ca.js';
import {
  ACKS_PATH,
  CALL_PATH,
  FRAMES_PATH,
  type Http2WireOptions,
  SESSION_WINDOW,
  STREAM_WINDOW,
  type WirePolling,
} from './http2-wire-shared.js';
import type { TlsEndpoint } from './tls-endpoint.js';
import type { DeliveryVerdict, OutboundFrame } from './types.js';

/** Bytes of frames a stream's batch gathers before it is written without waiting for the turn to end. */
const BATCH_BYTES = 64 * 1024;
/** Frames up to this size are encoded into the stream's shared batch buffer; larger ones get their own. */
const SLAB_FRAME = 16 * 1024;
/** The batch buffer: frames are encoded into it front to back, then a new one is taken. */
const SLAB_BYTES = 128 * 1024;
const MAX_CALL_REPLY = 16 * 1024 * 1024;
/** Unacknowledged bytes per stream before a send waits for room. */
const STREAM_INFLIGHT_BYTES = 8 * 1024 * 1024;
const STREAM_INFLIGHT_FRAMES = 4096;
/**
 * Streams per peer before pairs share streams by hash. Each stream costs node:http2 a write, a
 * DATA frame and a read event per round; 16 streams keep that cost small next to the frames.
 */
export const DEFAULT_STREAM_CAP = 16;
/** Pairs per peer whose stream slot and encoded IRIs are remembered. */
const PAIR_TABLE = 65_536;
/** HTTP/2 flow-control windows: per stream, and per connection (all its streams). */

interface Pending {
  /** Position in the stream's send order (ACK runs count frames). */
  readonly seq: number;
  /** The encoded frame, kept for resends. */
  readonly bytes: Uint8Array;
  readonly deadline: number;
  readonly resolve: (v: DeliveryVerdict) => void;
  readonly reject: (e: unknown) => void;
  /** When it was queued (performance.now(); 0 with polling off), for the ACK time the poller goes by. */
  readonly queuedAt: number;
  /** Whether it holds the wire's spinner (released when it settles). */
  readonly held: boolean;
}

/**
 * One long-lived outbound stream and the frames sent on it that wait for their ACK, oldest
 * first. The HTTP/2 stream in use carries the frames of `queue` from the one it was opened
 * with (`base`) onwards, in order; its ACK runs count frames from there.
 */
export class OutStream {
  stream: http2.ClientHttp2Stream | undefined;
  /** The HTTP/2 id of `stream` once it is ready, else -1. */
  sid = -1;
  /** The seq of the first frame the current stream carries, and how many of its frames were acknowledged. */
  base = 0;
  acked = 0;
  nextSeq = 0;
  /** Unacknowledged frames, oldest first: queue[head..]. */
  queue: Pending[] = [];
  head = 0;
  inflightBytes = 0;
  readonly roomWaiters: (() => void)[] = [];
  retryTimer: TimerHandle | undefined;
  lastError: unknown;
  /** The batch: frames encoded since the last write (`parts`, then slab[flushFrom, slabAt)). */
  slab: Buffer = Buffer.allocUnsafe(0);
  slabAt = 0;
  flushFrom = 0;
  parts: Uint8Array[] = [];
  batchBytes = 0;
  flushScheduled = false;
  readonly flushNow = () => this.owner._flushStream(this);

  constructor(
    readonly owner: Http2Outbound,
    readonly peer: string,
    readonly slot: number,
  ) {}

  get pendingCount(): number {
    return this.queue.length - this.head;
  }

  get full(): boolean {
    return this.inflightBytes >= STREAM_INFLIGHT_BYTES || this.queue.length - this.head >= STREAM_INFLIGHT_FRAMES;
  }

  /** The oldest unacknowledged frame, removed. */
  shift(): Pending {
    const p = this.queue[this.head]!;
    this.queue[this.head++] = undefined as unknown as Pending;
    if (this.head === this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    this.inflightBytes -= p.bytes.length;
    if (p.held) this.owner.spinner.release();
    return p;
  }

  /** Moves the batch's slab bytes into `parts`. */
  closeRegion(): void {
    if (this.slabAt > this.flushFrom) {
      this.parts.push(this.slab.subarray(this.flushFrom, this.slabAt));
      this.flushFrom = this.slabAt;
    }
  }
}

/** The deadline sweep never keeps the process alive (a Node.js timer is unref'd; others have no such notion). */
function unref(handle: TimerHandle): TimerHandle {
  (handle as { unref?: () => void } | undefined)?.unref?.();
  return handle;
}

interface PairSlot {
  readonly slot: number;
  readonly sender: Uint8Array;
  readonly target: Uint8Array;
}

const utf8 = new TextEncoder();

function iriLength(what: 'sender' | 'target', n: number): void {
  if (n < 1 || n > MAX_IRI_BYTES) {
    throw new PlexusError(
      'PLX_WIRE_BAD_FRAME',
      `the ${what} IRI has ${n} UTF-8 bytes; it must have 1 to ${MAX_IRI_BYTES}`,
      {
        reason: what,
      },
    );
  }
}

interface PeerState {
  readonly sessions: (http2.ClientHttp2Session | undefined)[];
  /** Per session: its frame streams by HTTP/2 stream id (for the ACK runs). */
  readonly bySid: Map<number, OutStream>[];
  /** Per sender, per target: the pair's stream slot and its IRIs encoded once. */
  readonly slots: Map<string, Map<string, PairSlot>>;
  /** Pairs in `slots`. */
  pairs: number;
  readonly streams: Map<number, OutStream>;
}

/** What the outbound side is given by its wire. */
export interface OutboundDeps {
  readonly opts: Pick<Http2WireOptions, 'cluster' | 'isMember' | 'resolve'>;
  /** Client options that bind the server to the node dialled. */
  readonly endpoint: TlsEndpoint<string>;
  readonly poll: WirePolling;
  readonly maxFrame: number;
  /** Delivery deadline of a frame (ms) and the pause before frames are sent again (ms). */
  readonly deadline: number;
  readonly backoff: number;
  readonly streamCap: number;
  readonly poolSize: number;
  /** Time of the delivery deadlines; timers of the resend pauses, the deadline sweep and calls. */
  readonly clock: ClockTimers;
}

export class Http2Outbound {
  private readonly opts: OutboundDeps['opts'];
  private readonly endpoint: TlsEndpoint<string>;
  private readonly poll: WirePolling;
  readonly spinner: Spinner;
  private readonly peers = new Map<string, PeerState>();
  private readonly maxFrame: number;
  private readonly deadline: number;
  private readonly backoff: number;
  /** Pauses before unacknowledged frames are sent again (the one retry policy, ts/core/retry.ts). */
  private readonly resendDelays: Backoff;
  private readonly streamCap: number;
  private readonly poolSize: number;
  private readonly clock: ClockTimers;
  /** How often (ms) frames past their deadline are failed. */
  private readonly sweepEvery: number;
  private sweep: TimerHandle | undefined;
  private closed = false;
  /** Random message ids, 16 bytes each, drawn front to back and refilled 4096 at a time. */
  private idPool = new Uint8Array(0);
  private idAt = 0;

  constructor(deps: OutboundDeps) {
    this.opts = deps.opts;
    this.endpoint = deps.endpoint;
    this.poll = deps.poll;
    this.spinner = deps.poll.spinner;
    this.maxFrame = deps.maxFrame;
    this.deadline = deps.deadline;
    this.backoff = deps.backoff;
    // A constant pause (the delivery deadline bounds the resends), jittered over its upper half so
    // that streams cut off together do not come back together.
    const pause = Math.max(0, deps.backoff);
    this.clock = deps.clock;
    this.resendDelays = new RetryPolicy({ baseMs: pause, capMs: pause, factor: 1, jitter: 'equal' }).start(deps.clock);
    this.streamCap = deps.streamCap;
    this.poolSize = deps.poolSize;
    this.sweepEvery = Math.max(10, Math.min(250, this.backoff * 5));
    this.sweep = unref(this.clock.setTimeout(this.sweepRound, this.sweepEvery));
  }

  /** Fails the frames past their deadline, then schedules the next round. */
  private readonly sweepRound = (): void => {
    if (this.closed) return;
    this.sweepDeadlines();
    this.sweep = unref(this.clock.setTimeout(this.sweepRound, this.sweepEvery));
  };

  private peerState(peer: string): PeerState {
    let p = this.peers.get(peer);
    if (!p) {
      p = {
        sessions: new Array(this.poolSize).fill(undefined),
        bySid: Array.from({ length: this.poolSize }, () => new Map<number, OutStream>()),
        slots: new Map(),
        pairs: 0,
        streams: new Map(),
      };
      this.peers.set(peer, p);
    }
    return p;
  }

  private session(peer: string, index: number): http2.ClientHttp2Session {
    const p = this.peerState(peer);
    const existing = p.sessions[index];
    if (existing && !existing.closed && !existing.destroyed) return existing;
    if (!this.opts.isMember(peer)) {
      throw new PlexusError('PLX_WIRE_NOT_MEMBER', `node ${peer} is not a current member`, { peer });
    }
    const address = this.opts.resolve(peer);
    if (!address) throw new PlexusError('PLX_WIRE_UNREACHABLE', `no address is known for node ${peer}`, { peer });
    const expected = nodeName(peer, this.opts.cluster);
    const s = http2.connect(
      `https://${address}`,
      this.endpoint.clientOptions(
        {
          expect: peer,
          mismatch: () =>
            new PlexusError('PLX_WIRE_UNTRUSTED', `the server's certificate does not name ${expected}`, { peer }),
          afterwards: () =>
            this.opts.isMember(peer)
              ? undefined
              : new PlexusError('PLX_WIRE_NOT_MEMBER', `node ${peer} is not a current member`, { peer }),
        },
        { servername: expected, settings: { enablePush: false, initialWindowSize: STREAM_WINDOW } },
      ),
    );
    s.once('connect', (_session, socket) => {
      (socket as TLSSocket).setNoDelay?.(true);
      // A session closed between its handshake and this event (the wire closing, the peer
      // refusing) takes no window change: setLocalWindowSize would throw outside any caller.
      if (!s.destroyed && !s.closed) s.setLocalWindowSize(SESSION_WINDOW);
    });
    s.on('error', (e) => {
      for (const st of p.streams.values()) if (st.slot % this.poolSize === index) st.lastError = e;
    });
    const bySid = new Map<number, OutStream>();
    p.bySid[index] = bySid;
    s.on('close', () => {
      if (p.sessions[index] === s) p.sessions[index] = undefined;
    });
    s.unref();
    p.sessions[index] = s;
    this.openAckStream(s, bySid);
    return s;
  }

  /**
   * Opens the connection's ACK stream before any frame stream, so the server sees it first.
   * If it fails while the connection lives, the connection is closed: its frame streams close
   * and their unacknowledged frames are sent again on a new connection.
   */
  private openAckStream(s: http2.ClientHttp2Session, bySid: Map<number, OutStream>): void {
    const acks = s.request({ ':method': 'POST', ':path': ACKS_PATH }, { endStream: false });
    const reader = new AckRunReader();
    let served = false;
    const onRun = (sid: number, count: number, status: AckStatusCode) => {
      const st = bySid.get(sid);
      if (st === undefined || st.sid !== sid) return;
      // More ACKs than the stream carried frames: the peer is broken; start the connection over.
      if (count > st.nextSeq - st.base - st.acked) {
        s.destroy();
        return;
      }
      this.acknowledgeRun(st, count, status);
    };
    acks.on('response', (h) => {
      served = h[':status'] === 200;
    });
    acks.on('data', (chunk: Buffer) => {
      try {
        reader.feed(chunk, onRun);
      } catch {
        s.destroy();
      }
    });
    acks.on('error', () => {});
    acks.on('close', () => {
      // ACKs the server had put on this stream may be lost with it: start the connection over.
      // (A server without ACK streams answers 404 and sends every ACK on its frame stream.)
      if (served && !this.closed && !s.closed && !s.destroyed) setImmediate(() => s.destroy());
    });
  }

  /** The next `count` frames the stream's current HTTP/2 stream carries are acknowledged with `status`. */
  private acknowledgeRun(st: OutStream, count: number, status: AckStatusCode): void {
    const verdict = ackStatusName(status);
    for (let i = 0; i < count; i++) {
      const seq = st.base + st.acked++;
      // Frames before the head were settled already (their deadline passed): skip them.
      if (st.head === st.queue.length || st.queue[st.head]!.seq !== seq) continue;
      const p = st.shift();
      this.ackTook(p);
      p.resolve(verdict);
    }
    this.wakeRoomWaiters(st);
  }

  /** An ACK frame on the frame stream itself (a server without an ACK stream): matched by message id. */
  private acknowledgeFrame(st: OutStream, f: Uint8Array): void {
    if (st.head === st.queue.length) return;
    const b = st.queue[st.head]!.bytes;
    for (let i = 24; i < 40; i++) if (b[i] !== f[i]) return;
    st.acked++;
    const p = st.shift();
    this.ackTook(p);
    p.resolve(ackStatusName(f[7]!));
    this.wakeRoomWaiters(st);
  }

  /** Folds an acknowledged frame's ACK time into `ackMs` (an average over about the last 8). */
  private ackTook(p: Pending): void {
    if (this.poll.on) this.poll.ackMs += (performance.now() - p.queuedAt - this.poll.ackMs) / 8;
  }

  private wakeRoomWaiters(st: OutStream): void {
    while (!st.full && st.roomWaiters.length > 0) st.roomWaiters.shift()?.();
  }

  private outStream(peer: string, sender: string, target: string): { st: OutStream; pair: PairSlot } {
    const p = this.peerState(peer);
    // Two levels keyed by the caller's own strings, whose hashes V8 keeps: no key is built per send.
    let targets = p.slots.get(sender);
    let pair = targets?.get(target);
    if (pair === undefined) {
      const senderBytes = utf8.encode(sender);
      const targetBytes = utf8.encode(target);
      iriLength('sender', senderBytes.length);
      iriLength('target', targetBytes.length);
      // The first `streamCap` pairs get a stream each; later ones share by hash, which needs
      // no table entry to stay stable, so the table stops growing at PAIR_TABLE entries.
      const slot =
        p.pairs < this.streamCap ? p.pairs : Number(fnv1a64(`${sender}\u0000${target}`) % BigInt(this.streamCap));
      pair = { slot, sender: senderBytes, target: targetBytes };
      if (p.pairs < PAIR_TABLE || slot === p.pairs) {
        if (targets === undefined) {
          targets = new Map();
          p.slots.set(sender, targets);
        }
        targets.set(target, pair);
        p.pairs++;
      }
    }
    let st = p.streams.get(pair.slot);
    if (!st) {
      st = new OutStream(this, peer, pair.slot);
      p.streams.set(pair.slot, st);
    }
    return { st, pair };
  }

  send(peer: string, frame: OutboundFrame): Promise<DeliveryVerdict> {
    if (this.closed) return Promise.reject(new PlexusError('PLX_WIRE_CLOSED', 'this wire is closed'));
    let st: OutStream;
    let pair: PairSlot;
    let total: number;
    try {
      const out = this.outStream(peer, frame.sender, frame.target);
      st = out.st;
      pair = out.pair;
      total = CLUSTER_HEADER_SIZE + pair.sender.length + pair.target.length + frame.payload.length;
      if (total > MAX_CLUSTER_FRAME) {
        throw new PlexusError(
          'PLX_WIRE_FRAME_TOO_LARGE',
          `a frame of ${total} bytes is above the maximum of ${MAX_CLUSTER_FRAME} bytes (1 MiB); send a smaller payload`,
          { length: total, max: MAX_CLUSTER_FRAME, reason: 'length' },
        );
      }
      if (total > this.maxFrame) {
        throw new PlexusError('PLX_WIRE_FRAME_TOO_LARGE', `a frame of ${total} bytes is above ${this.maxFrame}`, {
          length: total,
          max: this.maxFrame,
        });
      }
      const id = frame.messageId;
      if (id !== undefined && (!(id instanceof Uint8Array) || id.length !== 16)) {
        throw new PlexusError('PLX_WIRE_BAD_FRAME', 'a message id is exactly 16 bytes', { reason: 'message-id' });
      }
    } catch (e) {
      return Promise.reject(e);
    }
    const deadline = this.clock.now() + this.deadline;
    if (st.full || st.roomWaiters.length > 0) {
      // No room on this stream: wait in line, encode when it is this frame's turn.
      return new Promise<DeliveryVerdict>((resolve, reject) => {
        st.roomWaiters.push(() => {
          if (this.closed) {
            reject(new PlexusError('PLX_WIRE_CLOSED', 'this wire is closed'));
            return;
          }
          let bytes: Uint8Array;
          try {
            bytes = this.encode(st, pair, frame, total);
          } catch (e) {
            reject(e);
            return;
          }
          this.enqueue(st, bytes, deadline, resolve, reject);
        });
      });
    }
    let bytes: Uint8Array;
    try {
      bytes = this.encode(st, pair, frame, total);
    } catch (e) {
      return Promise.reject(e);
    }
    return new Promise<DeliveryVerdict>((resolve, reject) => this.enqueue(st, bytes, deadline, resolve, reject));
  }

  /** Encodes a frame into the stream's batch; its bytes (which stay valid for resends). */
  private encode(st: OutStream, pair: PairSlot, frame: OutboundFrame, total: number): Uint8Array {
    let out: Buffer;
    let at: number;
    if (total > SLAB_FRAME) {
      st.closeRegion();
      out = Buffer.allocUnsafe(total);
      at = 0;
    } else {
      if (st.slabAt + total > st.slab.length) {
        st.closeRegion();
        st.slab = Buffer.allocUnsafe(SLAB_BYTES);
        st.slabAt = 0;
        st.flushFrom = 0;
      }
      out = st.slab;
      at = st.slabAt;
    }
    let id = frame.messageId;
    let idAt = 0;
    if (id === undefined) {
      if (this.idAt + 16 > this.idPool.length) {
        this.idPool = randomBytes(16 * 4096);
        this.idAt = 0;
      }
      id = this.idPool;
      idAt = this.idAt;
      this.idAt += 16;
    }
    writeDataFrame(
      out,
      at,
      total,
      frame.shard,
      frame.epoch,
      frame.hops ?? 0,
      id,
      idAt,
      pair.sender,
      pair.target,
      frame.payload,
    );
    let bytes: Uint8Array;
    if (out === st.slab) {
      st.slabAt += total;
      bytes = out.subarray(at, at + total);
    } else {
      st.parts.push(out);
      bytes = out;
    }
    st.batchBytes += total;
    return bytes;
  }

  /** Queues an encoded frame for its ACK and has its batch written. */
  private enqueue(
    st: OutStream,
    bytes: Uint8Array,
    deadline: number,
    resolve: (v: DeliveryVerdict) => void,
    reject: (e: unknown) => void,
  ): void {
    // Poll for the ACK while the frame is in flight (released when it settles, in `shift`),
    // when ACKs lately came within half the polling window: not for ACKs that wait for a
    // receiver's fsync, which would only burn the CPU the receiver needs.
    const queuedAt = this.poll.on ? performance.now() : 0;
    const held = this.poll.ackMs < this.poll.halfMs;
    if (held) this.spinner.hold();
    st.queue.push({ seq: st.nextSeq++, bytes, deadline, resolve, reject, queuedAt, held });
    st.inflightBytes += bytes.length;
    if (st.batchBytes >= BATCH_BYTES) this._flushStream(st);
    else if (!st.flushScheduled) {
      st.flushScheduled = true;
      queueMicrotask(st.flushNow);
    }
  }

  /**
   * Writes the stream's batch in one write. Without a usable HTTP/2 stream it opens one and
   * writes every unacknowledged frame on it; while a retry waits, the retry does that.
   * (Internal: called by the stream's scheduled flush.)
   */
  _flushStream(st: OutStream): void {
    st.flushScheduled = false;
    st.closeRegion();
    const parts = st.parts;
    if (parts.length === 0) return;
    st.parts = [];
    st.batchBytes = 0;
    if (st.retryTimer !== undefined || this.closed) return;
    const s = st.stream;
    if (s && !s.destroyed && !s.closed) {
      s.write(parts.length === 1 ? parts[0]! : Buffer.concat(parts));
      return;
    }
    this.reopen(st);
  }

  /** Opens a new HTTP/2 stream for `st` and writes every unacknowledged frame on it, in order. */
  private reopen(st: OutStream): void {
    if (st.pendingCount === 0) return;
    let stream: http2.ClientHttp2Stream;
    try {
      stream = this.openStream(st);
    } catch (e) {
      if (isPlexusError(e, 'PLX_WIRE_NOT_MEMBER')) {
        this.failAll(st, e);
        return;
      }
      st.lastError = e;
      this.scheduleRetry(st);
      return;
    }
    st.base = st.queue[st.head]!.seq;
    st.acked = 0;
    let chunk: Uint8Array[] = [];
    let bytes = 0;
    for (let i = st.head; i < st.queue.length; i++) {
      const b = st.queue[i]!.bytes;
      chunk.push(b);
      bytes += b.length;
      if (bytes >= BATCH_BYTES) {
        stream.write(Buffer.concat(chunk));
        chunk = [];
        bytes = 0;
      }
    }
    if (chunk.length > 0) stream.write(chunk.length === 1 ? chunk[0]! : Buffer.concat(chunk));
  }

  private openStream(st: OutStream): http2.ClientHttp2Stream {
    const index = st.slot % this.poolSize;
    const session = this.session(st.peer, index);
    const bySid = this.peerState(st.peer).bySid[index]!;
    const stream = session.request({ ':method': 'POST', ':path': FRAMES_PATH }, { endStream: false });
    st.stream = stream;
    st.sid = -1;
    const ready = () => {
      if (st.stream !== stream || stream.id === undefined) return;
      st.sid = stream.id;
      bySid.set(stream.id, st);
    };
    if (stream.id !== undefined) ready();
    else stream.once('ready', ready);
    const reader = new ClusterFrameReader({ hopLimit: 255 });
    stream.on('data', (chunk: Buffer) => {
      reader.push(chunk);
      for (;;) {
        let f: Uint8Array | undefined;
        try {
          f = reader.nextRaw();
        } catch (e) {
          st.lastError = e;
          stream.close(http2.constants.NGHTTP2_PROTOCOL_ERROR);
          return;
        }
        if (!f) break;
        if (f[5] !== ClusterFrameKind.ACK || st.stream !== stream) continue;
        this.acknowledgeFrame(st, f);
      }
    });
    stream.on('error', (e) => {
      st.lastError = e;
    });
    stream.on('close', () => {
      if (stream.id !== undefined && bySid.get(stream.id) === st) bySid.delete(stream.id);
      if (st.stream !== stream) return;
      st.stream = undefined;
      st.sid = -1;
      if (st.pendingCount > 0 && !this.closed) {
        if (!st.lastError)
          st.lastError = new PlexusError('PLX_WIRE_UNREACHABLE', `stream closed (code ${stream.rstCode ?? 0})`, {
            peer: st.peer,
            rstCode: stream.rstCode ?? 0,
          });
        this.scheduleRetry(st);
      }
    });
    return stream;
  }

  private scheduleRetry(st: OutStream): void {
    if (st.retryTimer !== undefined || this.closed) return;
    // The batch is dropped: the retry writes every unacknowledged frame.
    st.closeRegion();
    st.parts = [];
    st.batchBytes = 0;
    st.retryTimer = this.clock.setTimeout(() => {
      st.retryTimer = undefined;
      this.sweepStream(st);
      const s = st.stream;
      if (s && !s.destroyed && !s.closed) {
        // Still open (the failure was elsewhere): start over on a new stream all the same.
        st.stream = undefined;
        st.sid = -1;
        s.close(http2.constants.NGHTTP2_CANCEL);
      }
      this.reopen(st);
    }, this.resendDelays.next() ?? this.backoff);
  }

  private failAll(st: OutStream, e: unknown): void {
    while (st.pendingCount > 0) st.shift().reject(e);
    this.wakeRoomWaiters(st);
  }

  /** Fails the oldest frames whose deadline passed (frames are queued in deadline order). */
  private sweepStream(st: OutStream): void {
    if (st.pendingCount === 0) return;
    const now = this.clock.now();
    let failed = false;
    while (st.pendingCount > 0 && st.queue[st.head]!.deadline <= now) {
      const p = st.shift();
      const cause = st.lastError;
      failed = true;
      p.reject(
        new PlexusError(
          'PLX_WIRE_DEADLINE',
          `no acknowledgement from ${st.peer} within ${this.deadline} ms${cause ? `: ${(cause as Error).message}` : ''}`,
          { peer: st.peer },
          cause ? { cause } : undefined,
        ),
      );
    }
    if (failed) this.wakeRoomWaiters(st);
  }

  private sweepDeadlines(): void {
    for (const p of this.peers.values()) for (const st of p.streams.values()) this.sweepStream(st);
  }

  async call(peer: string, body: Uint8Array): Promise<Uint8Array> {
    const session = this.session(peer, 0);
    return new Promise<Uint8Array>((resolve, reject) => {
      const req = session.request({ ':method': 'POST', ':path': CALL_PATH });
      const timer = this.clock.setTimeout(() => {
        req.close(http2.constants.NGHTTP2_CANCEL);
        reject(new PlexusError('PLX_WIRE_DEADLINE', `no answer from ${peer} within ${this.deadline} ms`, { peer }));
      }, this.deadline);
      let status = 0;
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('response', (h) => {
        status = Number(h[':status']);
      });
      req.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_CALL_REPLY) req.close(http2.constants.NGHTTP2_CANCEL);
        else chunks.push(c);
      });
      req.on('error', (e) => {
        this.clock.clearTimeout(timer);
        reject(new PlexusError('PLX_WIRE_UNREACHABLE', `call to ${peer} failed: ${e.message}`, { peer }, { cause: e }));
      });
      req.on('close', () => {
        this.clock.clearTimeout(timer);
        const body = Buffer.concat(chunks);
        if (status === 200) resolve(new Uint8Array(body.buffer, body.byteOffset, body.length));
        else if (status === 500) {
          try {
            const e = JSON.parse(body.toString('utf8')) as {
              code: string;
              message: string;
              details: Record<string, unknown>;
            };
            reject(new PlexusError(codeFromPeer(e.code), e.message, e.details ?? {}));
          } catch {
            reject(new PlexusError('PLX_WIRE_REFUSED', `call to ${peer} refused`, { peer }));
          }
        } else
          reject(new PlexusError('PLX_WIRE_UNREACHABLE', `call to ${peer} ended without an answer`, { peer, status }));
      });
      req.end(body);
    });
  }

  /** Closes the connections to `peer`. */
  disconnect(peer: string): void {
    const p = this.peers.get(peer);
    if (p) for (const s of p.sessions) s?.destroy();
  }

  /** Fails every frame still waiting for its ACK and closes every connection. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.sweep !== undefined) this.clock.clearTimeout(this.sweep);
    for (const p of this.peers.values()) {
      for (const st of p.streams.values()) {
        if (st.retryTimer !== undefined) this.clock.clearTimeout(st.retryTimer);
        st.retryTimer = undefined;
        this.failAll(st, new PlexusError('PLX_WIRE_CLOSED', 'the wire was closed before an acknowledgement'));
        for (const w of st.roomWaiters.splice(0)) w();
      }
      for (const s of p.sessions) s?.destroy();
    }
  }
}
