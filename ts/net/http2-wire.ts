/**
 * Http2Wire: the cluster wire over HTTP/2 and mutual TLS 1.3 (`node:http2`), standing in for
 * QUIC, which Node 20 lacks. docs/cluster.md, "The wire", describes it.
 *
 * - Trust: both ends present a certificate of the cluster CA (only that CA, never the system
 *   store) naming `<node>.<cluster>.plexus.internal`. The server refuses a certificate of
 *   another CA in the TLS handshake, and a certificate of a node that is not a current member
 *   (`isMember`, asked on every new connection) as soon as the handshake completes, before any
 *   HTTP/2 byte is read. The client checks the server names the node it dialled and that the
 *   node is a member.
 * - Streams: frames of one (sender, target) pair travel on one long-lived POST stream, in
 *   order; new pairs get new streams up to `streamCap` per peer, beyond which pairs share
 *   streams by hash (still in order per pair). Streams may spread over a small pool of TCP
 *   connections per peer (`poolSize`, default 1), so a lost packet stalls only the pairs of
 *   one connection: HTTP/2's head-of-line blocking that QUIC does not have (docs/cluster.md).
 * - Backpressure: the server reads a stream's next frame only after the handler took the
 *   previous one into its mailbox (or stored it); a paused stream stops consuming, its HTTP/2
 *   flow-control window closes and the sender's writes wait. Other streams keep flowing.
 *   ACKs wait for the handler's verdict (a durable macrostep) and go out in stream order.
 * - Batches: the frames a sender queues on a stream within one turn of the event loop are
 *   encoded straight into one buffer and go out in one write (at most `BATCH_BYTES`; a batch
 *   that reaches it is written at once).
 * - Delivery: the server acknowledges DATA frames on the connection's ACK stream (one per
 *   connection, opened first) with ACK runs: "the next n frames of stream s: status". The
 *   runs of all frame streams of one event-loop turn go out in one write. Without an ACK
 *   stream it answers each frame with an ACK frame on the frame's own stream. A send
 *   resolves on its ACK; when the ACK stream fails, the connection is closed and its frames
 *   are sent again; when a stream or connection fails, its unacknowledged frames are sent
 *   again on a new stream after `retryBackoffMs`, until `deliveryDeadlineMs`. The receiver
 *   deduplicates.
 */
import { randomBytes } from 'node:crypto';
import * as http2 from 'node:http2';
import { performance } from 'node:perf_hooks';
import type { TLSSocket } from 'node:tls';
import {
  ACK_RUN_SIZE,
  AckRunReader,
  AckStatus,
  type AckStatusCode,
  ackStatusName,
  CLUSTER_HEADER_SIZE,
  type ClusterFrame,
  ClusterFrameKind,
  ClusterFrameReader,
  encodeAck,
  encodeAckRun,
  MAX_ACK_RUN,
  MAX_CLUSTER_FRAME,
  MAX_IRI_BYTES,
  writeDataFrame,
} from '../codec/cluster-frame.js';
import { codeFromPeer, isPlexusError, PlexusError } from '../core/errors.js';
import { fnv1a64 } from '../core/index.js';
import { Spinner } from '../core/spinner.js';
import { nodeName, nodeOfPeer } from './ca.js';
import { ADMIT_DUPLICATE, Receiver } from './receiver.js';
import type {
  CallHandler,
  DeliveryVerdict,
  FrameHandler,
  OutboundFrame,
  Wire,
  WireRefusal,
  WireTuning,
} from './types.js';

const FRAMES_PATH = '/plexus/frames';
const CALL_PATH = '/plexus/call';
/**
 * One stream per connection on which the server sends the ACK runs of every frame stream
 * (docs/cluster.md, "ACK runs").
 */
const ACKS_PATH = '/plexus/ack-runs';
/** ACK runs a connection's ACK stream gathers before it writes them at once (4 KiB). */
const SINK_RUNS = 512;
/** Bytes of frames a stream's batch gathers before it is written without waiting for the turn to end. */
const BATCH_BYTES = 64 * 1024;
/** Frames up to this size are encoded into the stream's shared batch buffer; larger ones get their own. */
const SLAB_FRAME = 16 * 1024;
/** The batch buffer: frames are encoded into it front to back, then a new one is taken. */
const SLAB_BYTES = 128 * 1024;
const MAX_CALL_REQUEST = 1024 * 1024;
const MAX_CALL_REPLY = 16 * 1024 * 1024;
/** Unacknowledged bytes per stream before a send waits for room. */
const STREAM_INFLIGHT_BYTES = 8 * 1024 * 1024;
const STREAM_INFLIGHT_FRAMES = 4096;
/**
 * Streams per peer before pairs share streams by hash. Each stream costs node:http2 a write, a
 * DATA frame and a read event per round; 16 streams keep that cost small next to the frames.
 */
const DEFAULT_STREAM_CAP = 16;
/** Pairs per peer whose stream slot and encoded IRIs are remembered. */
const PAIR_TABLE = 65_536;
/** HTTP/2 flow-control windows: per stream, and per connection (all its streams). */
const STREAM_WINDOW = 256 * 1024;
const SESSION_WINDOW = 16 * 1024 * 1024;
/** Bytes a receiving stream buffers ahead of the frame being stored before it pauses. */
const READ_AHEAD_BYTES = 64 * 1024;
/**
 * ACKs of a turn of the event loop that go out before the turn ends: the first write after
 * this many frames, each next one after twice as many as the one before, up to `ACK_EARLY_MAX`.
 * The sender can then send its next frames while this side still stores the rest of the turn's.
 */
const ACK_EARLY = 8;
const ACK_EARLY_MAX = 64;
/** ACKs written together at most (one buffer of 64 x 40 bytes). */
const ACK_BATCH = 64;
/** Frames of one inbound stream taken by the handler and not yet acknowledged, at most. */
const MAX_INBOUND_UNACKED = 4096;

/** An inbound frame waiting for its ACK: status -1 until its handler settled it. */
interface InboundEntry {
  readonly frame: ClusterFrame;
  status: number;
  /** When it was taken from the stream (performance.now(); 0 with polling off), for the answer time the poller goes by. */
  readonly at: number;
}

export interface Http2WireOptions extends WireTuning {
  readonly self: string;
  readonly cluster: string;
  /** This node's certificate and key and the cluster CA certificate, PEM. */
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string };
  /** Listening host (default 127.0.0.1) and port (default 0: any free port). */
  readonly host?: string;
  readonly port?: number;
  /** Where a peer listens (`host:port`), or undefined when unknown. */
  readonly resolve: (node: string) => string | undefined;
  /** Whether a node is a current member; asked on every new connection. */
  readonly isMember: (node: string) => boolean;
  /**
   * TCP connections per peer (default 1). More connections confine a lost packet's stall to
   * the pairs of one connection (HTTP/2's head-of-line blocking), at the price of a write,
   * a read and an ACK write per connection per round: on a lossless link one is fastest.
   */
  readonly poolSize?: number;
  /**
   * How long (ms) the event loop keeps polling its sockets instead of sleeping while frames
   * wait for their ACKs, and after ACKs went out while the sender's next frames are due
   * (docs/cluster.md, "Polling"). Pays for frames answered at once (in-memory mailboxes),
   * costs CPU with durable actor messages. Default: PLEXUS_WIRE_SPIN_MS, else 0 (off).
   */
  readonly spinMs?: number;
}

/** The environment variable that sets every wire's polling window (ms; 0 turns polling off). */
export const WIRE_SPIN_VARIABLE = 'PLEXUS_WIRE_SPIN_MS';
/** The polling window when neither the option nor the variable sets one (ms): off. */
export const DEFAULT_WIRE_SPIN_MS = 0;
/** The longest polling window accepted (ms). */
export const MAX_WIRE_SPIN_MS = 1000;

/** The wire's polling window: the option, else PLEXUS_WIRE_SPIN_MS, else 0 (off); a bad value is refused. */
export function wireSpinMs(
  option: number | undefined,
  env: string | undefined = process.env[WIRE_SPIN_VARIABLE],
): number {
  const given = option !== undefined ? option : env !== undefined && env !== '' ? Number(env) : DEFAULT_WIRE_SPIN_MS;
  if (typeof given !== 'number' || !Number.isFinite(given) || given < 0 || given > MAX_WIRE_SPIN_MS) {
    const shown = option !== undefined ? String(option) : `${WIRE_SPIN_VARIABLE}="${env}"`;
    throw new PlexusError(
      'PLX_WIRE_BAD_OPTION',
      `the wire's polling window (spinMs or ${WIRE_SPIN_VARIABLE}) must be a number of ms from 0 to ${MAX_WIRE_SPIN_MS}, got ${shown}`,
      { reason: 'spinMs' },
    );
  }
  return given;
}

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
class OutStream {
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
  retryTimer: NodeJS.Timeout | undefined;
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
    readonly owner: Http2Wire,
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

/**
 * The ACK stream of one server connection: the ACKs of all its frame streams produced within
 * one turn of the event loop go out in one write, as ACK runs (consecutive ACKs of one
 * stream with one status make one 8-byte run).
 */
class AckSink {
  private buf: Buffer | undefined;
  private at = 0;
  private lastSid = -1;
  private lastStatus = -1;
  private lastCount = 0;
  /** Frames acknowledged since the last write. */
  private frames = 0;
  private scheduled = false;
  private early = ACK_EARLY;
  private readonly flushLater = () => {
    this.scheduled = false;
    this.early = ACK_EARLY;
    this.flush();
  };

  /** Whether this sink holds the wire's spinner: it sent ACKs and no frame came since. */
  private holding = false;

  constructor(
    readonly stream: http2.ServerHttp2Stream,
    private readonly spinner: Spinner,
    /** Whether to poll for the sender's next frames after ACKs go out. */
    private readonly pollAfterAcks: () => boolean,
  ) {}

  /** Frames came on one of the connection's streams: the wait that the last ACKs began is over. */
  arrived(): void {
    if (!this.holding) return;
    this.holding = false;
    this.spinner.release();
  }

  /** The ACK stream closed: nothing waits on it any more. */
  closed(): void {
    this.arrived();
  }

  get open(): boolean {
    return !this.stream.destroyed && !this.stream.closed && this.stream.writable;
  }

  push(sid: number, status: AckStatusCode): void {
    const early = ++this.frames >= this.early;
    this.pushRun(sid, status);
    if (early) {
      this.flush();
      this.early = Math.min(this.early * 2, ACK_EARLY_MAX);
    }
  }

  private pushRun(sid: number, status: AckStatusCode): void {
    if (sid === this.lastSid && status === this.lastStatus && this.lastCount < MAX_ACK_RUN) {
      const c = ++this.lastCount;
      const b = this.buf!;
      b[this.at - 4] = c & 0xff;
      b[this.at - 3] = c >>> 8;
      return;
    }
    if (this.buf === undefined) this.buf = Buffer.allocUnsafe(SINK_RUNS * ACK_RUN_SIZE);
    encodeAckRun(this.buf, this.at, sid, 1, status);
    this.at += ACK_RUN_SIZE;
    this.lastSid = sid;
    this.lastStatus = status;
    this.lastCount = 1;
    if (this.at === SINK_RUNS * ACK_RUN_SIZE) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flushLater);
    }
  }

  flush(): void {
    this.frames = 0;
    if (this.at === 0 || this.buf === undefined) return;
    const out = this.buf.subarray(0, this.at);
    this.buf = undefined;
    this.at = 0;
    this.lastSid = -1;
    if (!this.open) return;
    this.stream.write(out);
    // The sender's next frames usually follow its ACKs closely: poll for them for a while.
    if (!this.holding && this.pollAfterAcks()) {
      this.holding = true;
      this.spinner.hold();
    }
  }
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

export class Http2Wire implements Wire {
  readonly self: string;
  readonly cluster: string;
  private readonly opts: Http2WireOptions;
  private readonly receiver: Receiver;
  private callHandler: CallHandler = async () => {
    throw new PlexusError('PLX_WIRE_REFUSED', 'this node answers no calls');
  };
  private server: http2.Http2SecureServer | undefined;
  private readonly peers = new Map<string, PeerState>();
  private readonly serverSessions = new Set<http2.ServerHttp2Session>();
  private readonly refused: WireRefusal[] = [];
  private readonly maxFrame: number;
  private readonly deadline: number;
  private readonly backoff: number;
  private readonly hopLimit: number;
  private readonly streamCap: number;
  private readonly poolSize: number;
  private sweep: NodeJS.Timeout | undefined;
  private closed = false;
  /** Keeps the event loop polling while frames wait for ACKs, or frames for the ACKs sent (internal). */
  readonly spinner: Spinner;
  /** Half the polling window (ms): frames poll for their ACKs while `ackMs` is below it. */
  private readonly spinHalfMs: number;
  /** Whether polling is on (`spinMs` > 0): only then are ACK and answer times taken. */
  private readonly polls: boolean;
  /** The recent time from queueing a frame to its ACK (ms), a moving average. */
  ackMs = 0;
  /** The recent time from taking a received frame to answering it (ms), a moving average. */
  answerMs = 0;
  /**
   * A receiver polls for the sender's next frames after its ACKs only while it answers
   * frames within half the window: frames answered after an fsync (durable actor messages)
   * come back slowly, and polling for them would only take CPU from the work they wait for.
   */
  private readonly pollAfterAcks = (): boolean => this.answerMs < this.spinHalfMs;
  /** Frames handed to the frame handler and not yet answered, over all streams. */
  inboundInHandler = 0;

  constructor(opts: Http2WireOptions) {
    this.opts = opts;
    this.self = opts.self;
    this.cluster = opts.cluster;
    nodeName(opts.self, opts.cluster);
    this.receiver = new Receiver(opts.dedupCapacity ?? 65_536);
    this.maxFrame = Math.min(opts.maxFrameBytes ?? MAX_CLUSTER_FRAME, MAX_CLUSTER_FRAME);
    this.deadline = opts.deliveryDeadlineMs ?? 30_000;
    this.backoff = opts.retryBackoffMs ?? 50;
    this.hopLimit = opts.hopLimit ?? 4;
    this.streamCap = Math.max(1, opts.streamCap ?? DEFAULT_STREAM_CAP);
    this.poolSize = Math.max(1, opts.poolSize ?? 1);
    const spinMs = wireSpinMs(opts.spinMs);
    this.spinner = new Spinner(spinMs);
    this.spinHalfMs = spinMs / 2;
    this.polls = spinMs > 0;
    this.sweep = setInterval(() => this.sweepDeadlines(), Math.max(10, Math.min(250, this.backoff * 5)));
    this.sweep.unref();
  }

  /** Random message ids, 16 bytes each, drawn front to back and refilled 4096 at a time. */
  private idPool = new Uint8Array(0);
  private idAt = 0;

  onFrame(handler: FrameHandler): void {
    this.receiver.setHandler(handler);
  }

  onCall(handler: CallHandler): void {
    this.callHandler = handler;
  }

  refusals(): readonly WireRefusal[] {
    return this.refused;
  }

  private refuse(r: WireRefusal): void {
    this.refused.push(r);
    if (this.refused.length > 1000) this.refused.shift();
  }

  // ------------------------------------------------------------------------------------------
  // Server

  async listen(): Promise<string> {
    const server = http2.createSecureServer({
      key: this.opts.tls.key,
      cert: this.opts.tls.cert,
      ca: this.opts.tls.ca,
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: 'TLSv1.3',
      maxVersion: 'TLSv1.3',
      allowHTTP1: false,
      settings: { enablePush: false, initialWindowSize: STREAM_WINDOW },
    });
    this.server = server;
    server.on('tlsClientError', (err, socket) => {
      this.refuse({ code: 'PLX_WIRE_UNTRUSTED', message: `TLS handshake refused: ${err.message}` });
      socket.destroy();
    });
    // Runs before http2 sets up a session on the connection: a certificate that chains to the
    // cluster CA but does not name a current member is cut off here.
    server.prependListener('secureConnection', (socket: TLSSocket) => {
      const node = nodeOfPeer(socket.getPeerCertificate(), this.cluster);
      (socket as unknown as { plexusPeer?: string }).plexusPeer = node;
      socket.setNoDelay(true);
      if (node === undefined || !this.opts.isMember(node)) {
        this.refuse({
          code: 'PLX_WIRE_NOT_MEMBER',
          ...(node ? { peer: node } : {}),
          message: node
            ? `node ${node} is not a current member of cluster ${this.cluster}`
            : `the certificate names no node of cluster ${this.cluster}`,
        });
        socket.destroy();
      }
    });
    server.on('sessionError', () => {});
    server.on('session', (session) => {
      const socket = session.socket as unknown as { destroyed?: boolean; plexusPeer?: string } | undefined;
      const node = socket && !socket.destroyed ? socket.plexusPeer : undefined;
      if (node === undefined || !this.opts.isMember(node)) {
        session.destroy();
        return;
      }
      (session as unknown as { plexusPeer: string }).plexusPeer = node;
      session.setLocalWindowSize(SESSION_WINDOW);
      this.serverSessions.add(session);
      session.on('close', () => this.serverSessions.delete(session));
      session.on('error', () => {});
    });
    server.on('stream', (stream, headers) => {
      const from = (stream.session as unknown as { plexusPeer?: string } | undefined)?.plexusPeer;
      stream.on('error', () => {});
      if (from === undefined || !this.opts.isMember(from)) {
        if (from !== undefined) {
          this.refuse({ code: 'PLX_WIRE_NOT_MEMBER', peer: from, message: `node ${from} is no longer a member` });
          stream.session?.destroy();
        }
        stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
        return;
      }
      if (headers[':path'] === FRAMES_PATH) this.serveFrames(stream, from);
      else if (headers[':path'] === ACKS_PATH) this.serveAcks(stream);
      else if (headers[':path'] === CALL_PATH) this.serveCall(stream, from);
      else {
        stream.respond({ ':status': 404 }, { endStream: true });
      }
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.opts.port ?? 0, this.opts.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    const a = server.address();
    if (a === null || typeof a === 'string') throw new PlexusError('PLX_WIRE_LISTEN', 'no TCP address');
    return `${this.opts.host ?? '127.0.0.1'}:${a.port}`;
  }

  /** The port the server listens on. */
  get port(): number {
    const a = this.server?.address();
    return a && typeof a !== 'string' ? a.port : 0;
  }

  /** Bytes received on frame streams and not yet handed to the frame handler, over all streams. */
  inboundBufferedBytes(): number {
    let n = 0;
    for (const r of this.readers) n += r.bufferedBytes;
    return n;
  }

  private readonly readers = new Set<ClusterFrameReader>();

  /** The connection's ACK stream: ACKs of its frame streams go here while it is open. */
  private serveAcks(stream: http2.ServerHttp2Stream): void {
    stream.respond({ ':status': 200 });
    const session = stream.session as unknown as { plexusAcks?: AckSink } | undefined;
    if (!session) return;
    const sink = new AckSink(stream, this.spinner, this.pollAfterAcks);
    session.plexusAcks = sink;
    stream.on('close', () => {
      sink.closed();
      if (session.plexusAcks === sink) session.plexusAcks = undefined;
    });
    stream.on('data', () => {});
    stream.on('end', () => {
      if (!stream.destroyed) stream.end();
    });
  }

  private serveFrames(stream: http2.ServerHttp2Stream, from: string): void {
    const session = stream.session as unknown as { plexusAcks?: AckSink } | undefined;
    stream.respond({ ':status': 200 });
    const reader = new ClusterFrameReader({ hopLimit: this.hopLimit });
    this.readers.add(reader);
    stream.on('close', () => this.readers.delete(reader));
    const receiver = this.receiver;
    let busy = false;
    let paused = false;
    const gone = () => stream.destroyed || stream.closed;
    // Without an ACK stream: the ACKs of one round are encoded into one buffer, written at once.
    let acks: Buffer | undefined;
    let ackCount = 0;
    const flushAcks = () => {
      if (ackCount === 0 || acks === undefined || gone()) return;
      stream.write(acks.subarray(0, ackCount * CLUSTER_HEADER_SIZE));
      acks = undefined;
      ackCount = 0;
    };
    // Frames read and not yet acknowledged, in the order they came: a frame's ACK goes out
    // once it and every frame before it on the stream are settled (ACK runs count in order).
    let order: InboundEntry[] = [];
    let orderHead = 0;
    let roomWaiter: (() => void) | undefined;
    const drain = () => {
      let emitted = false;
      while (orderHead < order.length) {
        const e = order[orderHead]!;
        if (e.status < 0) break;
        order[orderHead] = undefined as unknown as InboundEntry;
        orderHead++;
        if (gone()) continue;
        emitted = true;
        const sink = session?.plexusAcks;
        if (this.polls) this.answerMs += (performance.now() - e.at - this.answerMs) / 8;
        if (sink?.open) {
          sink.push(stream.id ?? 0, e.status as AckStatusCode);
          continue;
        }
        if (acks === undefined) acks = Buffer.allocUnsafe(ACK_BATCH * CLUSTER_HEADER_SIZE);
        encodeAck(e.frame, e.status as AckStatusCode, acks.subarray(ackCount * CLUSTER_HEADER_SIZE));
        if (++ackCount === ACK_BATCH) flushAcks();
      }
      if (orderHead === order.length) {
        order = [];
        orderHead = 0;
      } else if (orderHead > 1024 && orderHead * 2 > order.length) {
        order = order.slice(orderHead);
        orderHead = 0;
      }
      if (emitted) flushAcks();
      if (roomWaiter !== undefined && order.length - orderHead < MAX_INBOUND_UNACKED) {
        const w = roomWaiter;
        roomWaiter = undefined;
        w();
      }
    };
    // Frames are handed to the handler strictly one after another: the next frame is taken
    // from the reader only once the handler took the previous one into its mailbox (`taken`)
    // or settled it. A frame that is taken waits for its ACK (a durable macrostep) while the
    // frames behind it go on to their own mailboxes, so the macrosteps of the actors fed by
    // one stream run, and group-commit, together. Bytes that arrive meanwhile wait in the
    // reader up to READ_AHEAD_BYTES; past that the stream is paused, stops consuming, and its
    // HTTP/2 flow-control window closes, which holds the sender. At most MAX_INBOUND_UNACKED
    // frames of a stream wait for their ACKs.
    const pump = async () => {
      busy = true;
      try {
        for (;;) {
          if (gone()) return;
          let frame: ReturnType<ClusterFrameReader['next']>;
          try {
            frame = reader.next();
            if (frame && frame.kind !== ClusterFrameKind.DATA) {
              throw new PlexusError('PLX_WIRE_BAD_FRAME', 'a client sends DATA frames only', { reason: 'kind' });
            }
            if (frame && frame.payload.length + CLUSTER_HEADER_SIZE > this.maxFrame) {
              throw new PlexusError('PLX_WIRE_FRAME_TOO_LARGE', `a frame is above ${this.maxFrame} bytes`);
            }
          } catch (e) {
            this.refuse({
              code: (e as PlexusError).code ?? 'PLX_WIRE_BAD_FRAME',
              peer: from,
              message: (e as Error).message,
            });
            stream.close(http2.constants.NGHTTP2_PROTOCOL_ERROR);
            return;
          }
          if (!frame) break;
          if (order.length - orderHead >= MAX_INBOUND_UNACKED) {
            await new Promise<void>((r) => {
              roomWaiter = r;
            });
            if (gone()) return;
          }
          const entry: InboundEntry = { frame, status: -1, at: this.polls ? performance.now() : 0 };
          order.push(entry);
          const slot = receiver.admit(frame.messageId, 0);
          if (slot >= 0) {
            this.inboundInHandler++;
            let moveOn = false;
            let wake: (() => void) | undefined;
            const taken = () => {
              if (moveOn) return;
              moveOn = true;
              wake?.();
            };
            const settle = (verdict: 'stored' | 'stale' | 'refused' | undefined) => {
              this.inboundInHandler--;
              entry.status = receiver.finish(slot, verdict);
              taken();
              drain();
            };
            let stored: Promise<'stored' | 'stale' | 'refused'> | undefined;
            try {
              stored = receiver.frameHandler(from, frame, taken);
            } catch {
              stored = undefined;
            }
            if (stored === undefined) settle(undefined);
            else stored.then(settle, () => settle(undefined));
            if (!moveOn) {
              await new Promise<void>((r) => {
                wake = r;
              });
            }
          } else if (slot === ADMIT_DUPLICATE) {
            entry.status = AckStatus.duplicate;
            drain();
          } else {
            // A copy of this id is being stored (sent again on another stream): wait for its
            // outcome, so that the frames behind it cannot overtake the first copy.
            entry.status = await receiver.outcomeOf(frame.messageId, 0);
            drain();
          }
        }
      } finally {
        busy = false;
      }
      if (paused && !stream.destroyed) {
        paused = false;
        stream.resume();
      }
    };
    stream.on('data', (chunk: Buffer) => {
      session?.plexusAcks?.arrived();
      reader.push(chunk);
      if (reader.bufferedBytes > READ_AHEAD_BYTES && !paused) {
        paused = true;
        stream.pause();
      }
      if (!busy) void pump();
    });
    stream.on('end', () => {
      if (!stream.destroyed) stream.end();
    });
  }

  private serveCall(stream: http2.ServerHttp2Stream, from: string): void {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_CALL_REQUEST) {
        this.refuse({ code: 'PLX_WIRE_BAD_FRAME', peer: from, message: 'a call above 1 MiB' });
        stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
        return;
      }
      chunks.push(c);
    });
    stream.on('end', () => {
      if (size > MAX_CALL_REQUEST) return;
      this.callHandler(from, Buffer.concat(chunks)).then(
        (reply) => {
          if (stream.destroyed) return;
          stream.respond({ ':status': 200 });
          stream.end(reply);
        },
        (e: unknown) => {
          if (stream.destroyed) return;
          const pe = isPlexusError(e) ? e : new PlexusError('PLX_WIRE_REFUSED', (e as Error).message);
          stream.respond({ ':status': 500 });
          stream.end(JSON.stringify({ code: pe.code, message: pe.message, details: pe.details }));
        },
      );
    });
  }

  // ------------------------------------------------------------------------------------------
  // Client

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
    const expected = nodeName(peer, this.cluster);
    const s = http2.connect(`https://${address}`, {
      ca: this.opts.tls.ca,
      cert: this.opts.tls.cert,
      key: this.opts.tls.key,
      minVersion: 'TLSv1.3',
      maxVersion: 'TLSv1.3',
      servername: expected,
      rejectUnauthorized: true,
      checkServerIdentity: (_host, cert) => {
        const node = nodeOfPeer(cert, this.cluster);
        if (node !== peer) {
          return new PlexusError('PLX_WIRE_UNTRUSTED', `the server's certificate does not name ${expected}`, { peer });
        }
        if (!this.opts.isMember(peer)) {
          return new PlexusError('PLX_WIRE_NOT_MEMBER', `node ${peer} is not a current member`, { peer });
        }
        return undefined;
      },
      settings: { enablePush: false, initialWindowSize: STREAM_WINDOW },
    });
    s.once('connect', (_session, socket) => {
      (socket as TLSSocket).setNoDelay?.(true);
      s.setLocalWindowSize(SESSION_WINDOW);
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
    if (this.polls) this.ackMs += (performance.now() - p.queuedAt - this.ackMs) / 8;
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
    const deadline = Date.now() + this.deadline;
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
    const queuedAt = this.polls ? performance.now() : 0;
    const held = this.ackMs < this.spinHalfMs;
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
    if (st.retryTimer || this.closed) return;
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
    if (st.retryTimer || this.closed) return;
    // The batch is dropped: the retry writes every unacknowledged frame.
    st.closeRegion();
    st.parts = [];
    st.batchBytes = 0;
    st.retryTimer = setTimeout(() => {
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
    }, this.backoff);
  }

  private failAll(st: OutStream, e: unknown): void {
    while (st.pendingCount > 0) st.shift().reject(e);
    this.wakeRoomWaiters(st);
  }

  /** Fails the oldest frames whose deadline passed (frames are queued in deadline order). */
  private sweepStream(st: OutStream): void {
    if (st.pendingCount === 0) return;
    const now = Date.now();
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
      const timer = setTimeout(() => {
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
        clearTimeout(timer);
        reject(new PlexusError('PLX_WIRE_UNREACHABLE', `call to ${peer} failed: ${e.message}`, { peer }, { cause: e }));
      });
      req.on('close', () => {
        clearTimeout(timer);
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

  /** Closes the connections to `peer` (e.g. after it left the view). */
  disconnect(peer: string): void {
    const p = this.peers.get(peer);
    if (p) for (const s of p.sessions) s?.destroy();
    for (const s of this.serverSessions) {
      if ((s as unknown as { plexusPeer?: string }).plexusPeer === peer) s.destroy();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.sweep) clearInterval(this.sweep);
    for (const p of this.peers.values()) {
      for (const st of p.streams.values()) {
        if (st.retryTimer) clearTimeout(st.retryTimer);
        st.retryTimer = undefined;
        this.failAll(st, new PlexusError('PLX_WIRE_CLOSED', 'the wire was closed before an acknowledgement'));
        for (const w of st.roomWaiters.splice(0)) w();
      }
      for (const s of p.sessions) s?.destroy();
    }
    for (const s of this.serverSessions) s.destroy();
    const server = this.server;
    if (server) await new Promise<void>((r) => server.close(() => r()));
  }
}
