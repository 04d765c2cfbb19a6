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
 *   streams by hash (still in order per pair). Streams spread over a small pool of TCP
 *   connections per peer (`poolSize`, default 2), so a lost packet stalls only the pairs of
 *   one connection: HTTP/2's head-of-line blocking that QUIC does not have.
 * - Backpressure: the server reads a stream's next frame only after the handler stored the
 *   previous one; a paused stream stops consuming, its HTTP/2 flow-control window closes and
 *   the sender's writes wait. Other streams keep flowing.
 * - Delivery: each DATA frame is answered by an ACK, on the connection's ACK stream (one per
 *   connection, opened first; the ACKs of all frame streams of one event-loop turn go out in
 *   one write) or, without one, on the frame's own stream. A send resolves on its ACK; when
 *   the ACK stream fails, the connection is closed and its frames are sent again; when a stream or connection fails, its unacknowledged frames are sent again on a
 *   new stream after `retryBackoffMs`, until `deliveryDeadlineMs`. The receiver deduplicates.
 */
import { randomBytes } from 'node:crypto';
import * as http2 from 'node:http2';
import type { TLSSocket } from 'node:tls';
import {
  ackStatusName,
  CLUSTER_HEADER_SIZE,
  type ClusterFrame,
  ClusterFrameKind,
  ClusterFrameReader,
  encodeAck,
  encodeClusterFrame,
  MAX_CLUSTER_FRAME,
} from '../codec/cluster-frame.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import { fnv1a64 } from '../core/index.js';
import { nodeName, nodeOfPeer } from './ca.js';
import { idKey, Receiver } from './receiver.js';
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
/** One stream per connection on which the server sends the ACKs of every frame stream. */
const ACKS_PATH = '/plexus/acks';
/** ACKs a connection's ACK stream gathers before it writes them at once. */
const SINK_BATCH = 256;
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
/** ACKs written together at most (one buffer of 64 x 40 bytes). */
const ACK_BATCH = 64;

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
  /** TCP connections per peer (default 2). */
  readonly poolSize?: number;
}

interface Pending {
  readonly id: string;
  readonly bytes: Uint8Array;
  readonly deadline: number;
  readonly resolve: (v: DeliveryVerdict) => void;
  readonly reject: (e: unknown) => void;
  written: boolean;
}

/** One long-lived outbound stream and the frames sent on it that wait for their ACK. */
class OutStream {
  stream: http2.ClientHttp2Stream | undefined;
  /** Frames to write at the end of this turn, in one write. */
  batch: Uint8Array[] = [];
  flushScheduled = false;
  readonly pending = new Map<string, Pending>();
  inflightBytes = 0;
  readonly roomWaiters: (() => void)[] = [];
  retryTimer: NodeJS.Timeout | undefined;
  lastError: unknown;

  constructor(
    readonly peer: string,
    readonly slot: number,
    /** The peer's table of frames waiting for an ACK (shared by its streams). */
    readonly waiting: Map<string, OutStream>,
  ) {}

  get full(): boolean {
    return this.inflightBytes >= STREAM_INFLIGHT_BYTES || this.pending.size >= STREAM_INFLIGHT_FRAMES;
  }
}

/**
 * The ACK stream of one server connection: the ACKs of all its frame streams produced within
 * one turn of the event loop go out in one write (one DATA frame instead of one per stream).
 */
class AckSink {
  private buf: Buffer | undefined;
  private count = 0;
  private scheduled = false;

  constructor(readonly stream: http2.ServerHttp2Stream) {}

  get open(): boolean {
    return !this.stream.destroyed && !this.stream.closed && this.stream.writable;
  }

  push(frame: Pick<ClusterFrame, 'shard' | 'epoch' | 'messageId'>, status: 0 | 1 | 2 | 3): void {
    if (this.buf === undefined) this.buf = Buffer.allocUnsafe(SINK_BATCH * CLUSTER_HEADER_SIZE);
    encodeAck(frame, status, this.buf.subarray(this.count * CLUSTER_HEADER_SIZE));
    if (++this.count === SINK_BATCH) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  flush(): void {
    if (this.count === 0 || this.buf === undefined) return;
    const out = this.buf.subarray(0, this.count * CLUSTER_HEADER_SIZE);
    this.buf = undefined;
    this.count = 0;
    if (this.open) this.stream.write(out);
  }
}

interface PairSlot {
  readonly slot: number;
  readonly sender: Uint8Array;
  readonly target: Uint8Array;
}

const utf8 = new TextEncoder();

interface PeerState {
  readonly sessions: (http2.ClientHttp2Session | undefined)[];
  /** Per sender, per target: the pair's stream slot and its IRIs encoded once. */
  readonly slots: Map<string, Map<string, PairSlot>>;
  /** Pairs in `slots`. */
  pairs: number;
  readonly streams: Map<number, OutStream>;
  /** Every frame waiting for its ACK, by message id, with its stream (for the ACK streams). */
  readonly waiting: Map<string, OutStream>;
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
    this.poolSize = Math.max(1, opts.poolSize ?? 2);
    this.sweep = setInterval(() => this.sweepDeadlines(), Math.max(10, Math.min(250, this.backoff * 5)));
    this.sweep.unref();
  }

  private idPool = new Uint8Array(0);
  private idAt = 0;

  /** A random 16-byte message id, drawn from a pool refilled 4096 ids at a time. */
  private nextId(): Uint8Array {
    if (this.idAt + 16 > this.idPool.length) {
      this.idPool = randomBytes(16 * 4096);
      this.idAt = 0;
    }
    const id = this.idPool.subarray(this.idAt, this.idAt + 16);
    this.idAt += 16;
    return id;
  }

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
    const sink = new AckSink(stream);
    session.plexusAcks = sink;
    stream.on('close', () => {
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
    let busy = false;
    let paused = false;
    // ACKs of one round are encoded straight into one buffer and written at once.
    let acks: Buffer | undefined;
    let ackCount = 0;
    const flushAcks = () => {
      if (ackCount === 0 || acks === undefined || stream.destroyed || stream.closed) return;
      stream.write(acks.subarray(0, ackCount * CLUSTER_HEADER_SIZE));
      acks = undefined;
      ackCount = 0;
    };
    // Frames are handled strictly one after another: the next frame is taken from the reader
    // only once the handler stored the previous one. Bytes that arrive meanwhile wait in the
    // reader up to READ_AHEAD_BYTES; past that the stream is paused, stops consuming, and its
    // HTTP/2 flow-control window closes, which holds the sender.
    const pump = async () => {
      busy = true;
      try {
        for (;;) {
          let frame: ReturnType<ClusterFrameReader['next']>;
          try {
            frame = reader.next();
            if (frame && frame.kind !== ClusterFrameKind.DATA) {
              throw new PlexusError('PLX_WIRE_BAD_FRAME', 'a client sends DATA frames only', { reason: 'kind' });
            }
            if (frame && frame.payload.length + 40 > this.maxFrame) {
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
          this.inboundInHandler++;
          let status: number;
          try {
            status = await this.receiver.handle(from, frame);
          } finally {
            this.inboundInHandler--;
          }
          if (stream.destroyed || stream.closed) return;
          const sink = session?.plexusAcks;
          if (sink?.open) {
            sink.push(frame, status as 0 | 1 | 2 | 3);
            continue;
          }
          if (acks === undefined) acks = Buffer.allocUnsafe(ACK_BATCH * CLUSTER_HEADER_SIZE);
          encodeAck(frame, status as 0 | 1 | 2 | 3, acks.subarray(ackCount * CLUSTER_HEADER_SIZE));
          if (++ackCount === ACK_BATCH) flushAcks();
        }
        flushAcks();
      } finally {
        busy = false;
      }
      if (paused && !stream.destroyed) {
        paused = false;
        stream.resume();
      }
    };
    stream.on('data', (chunk: Buffer) => {
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
        slots: new Map(),
        pairs: 0,
        streams: new Map(),
        waiting: new Map(),
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
    s.on('close', () => {
      if (p.sessions[index] === s) p.sessions[index] = undefined;
    });
    s.unref();
    p.sessions[index] = s;
    this.openAckStream(p, s);
    return s;
  }

  /**
   * Opens the connection's ACK stream before any frame stream, so the server sees it first.
   * If it fails while the connection lives, the connection is closed: its frame streams close
   * and their unacknowledged frames are sent again on a new connection.
   */
  private openAckStream(p: PeerState, s: http2.ClientHttp2Session): void {
    const acks = s.request({ ':method': 'POST', ':path': ACKS_PATH }, { endStream: false });
    const reader = new ClusterFrameReader({ hopLimit: 255 });
    let served = false;
    acks.on('response', (h) => {
      served = h[':status'] === 200;
    });
    acks.on('data', (chunk: Buffer) => {
      reader.push(chunk);
      for (;;) {
        let f: Uint8Array | undefined;
        try {
          f = reader.nextRaw();
        } catch {
          s.destroy();
          return;
        }
        if (!f) break;
        if (f[5] !== ClusterFrameKind.ACK) continue;
        const id = idKey(f.subarray(24, 40));
        const st = p.waiting.get(id);
        const pending = st?.pending.get(id);
        if (!st || !pending) continue;
        this.settle(st, pending);
        pending.resolve(ackStatusName(f[7]!));
      }
    });
    acks.on('error', () => {});
    acks.on('close', () => {
      // ACKs the server had put on this stream may be lost with it: start the connection over.
      // (A server without ACK streams answers 404 and sends every ACK on its frame stream.)
      if (served && !this.closed && !s.closed && !s.destroyed) setImmediate(() => s.destroy());
    });
  }

  private outStream(peer: string, sender: string, target: string): { st: OutStream; pair: PairSlot } {
    const p = this.peerState(peer);
    // Two levels keyed by the caller's own strings, whose hashes V8 keeps: no key is built per send.
    let targets = p.slots.get(sender);
    let pair = targets?.get(target);
    if (pair === undefined) {
      // The first `streamCap` pairs get a stream each; later ones share by hash, which needs
      // no table entry to stay stable, so the table stops growing at PAIR_TABLE entries.
      const slot =
        p.pairs < this.streamCap ? p.pairs : Number(fnv1a64(`${sender}\u0000${target}`) % BigInt(this.streamCap));
      pair = { slot, sender: utf8.encode(sender), target: utf8.encode(target) };
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
      st = new OutStream(peer, pair.slot, p.waiting);
      p.streams.set(pair.slot, st);
    }
    return { st, pair };
  }

  send(peer: string, frame: OutboundFrame): Promise<DeliveryVerdict> {
    if (this.closed) return Promise.reject(new PlexusError('PLX_WIRE_CLOSED', 'this wire is closed'));
    let bytes: Uint8Array;
    let st: OutStream;
    try {
      const out = this.outStream(peer, frame.sender, frame.target);
      st = out.st;
      bytes = encodeClusterFrame({
        shard: frame.shard,
        epoch: frame.epoch,
        hops: frame.hops ?? 0,
        messageId: frame.messageId ?? this.nextId(),
        senderBytes: out.pair.sender,
        targetBytes: out.pair.target,
        payload: frame.payload,
      });
    } catch (e) {
      return Promise.reject(e);
    }
    if (bytes.length > this.maxFrame) {
      return Promise.reject(
        new PlexusError('PLX_WIRE_FRAME_TOO_LARGE', `a frame of ${bytes.length} bytes is above ${this.maxFrame}`, {
          length: bytes.length,
          max: this.maxFrame,
        }),
      );
    }
    const id = idKey(bytes.subarray(24, 40));
    return new Promise<DeliveryVerdict>((resolve, reject) => {
      const pending: Pending = { id, bytes, deadline: Date.now() + this.deadline, resolve, reject, written: false };
      const enqueue = () => {
        if (this.closed) {
          reject(new PlexusError('PLX_WIRE_CLOSED', 'this wire is closed'));
          return;
        }
        if (st.full) {
          st.roomWaiters.push(enqueue);
          return;
        }
        st.pending.set(id, pending);
        st.waiting.set(id, st);
        st.inflightBytes += bytes.length;
        this.write(st, pending);
      };
      enqueue();
    });
  }

  private settle(st: OutStream, p: Pending): void {
    if (!st.pending.delete(p.id)) return;
    if (st.waiting.get(p.id) === st) st.waiting.delete(p.id);
    st.inflightBytes -= p.bytes.length;
    while (!st.full && st.roomWaiters.length > 0) st.roomWaiters.shift()?.();
  }

  /** Writes `p` on the stream, opening it if needed; failures schedule a retry of the stream. */
  private write(st: OutStream, p: Pending): void {
    if (st.retryTimer) return; // the retry rewrites every pending frame in order
    let stream = st.stream;
    if (!stream || stream.destroyed || stream.closed) {
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
    }
    p.written = true;
    st.batch.push(p.bytes);
    if (!st.flushScheduled) {
      st.flushScheduled = true;
      queueMicrotask(() => {
        st.flushScheduled = false;
        const b = st.batch;
        st.batch = [];
        const s = st.stream;
        if (b.length === 0 || !s || s.destroyed || s.closed) return;
        s.write(b.length === 1 ? b[0] : Buffer.concat(b));
      });
    }
  }

  private openStream(st: OutStream): http2.ClientHttp2Stream {
    const session = this.session(st.peer, st.slot % this.poolSize);
    const stream = session.request({ ':method': 'POST', ':path': FRAMES_PATH }, { endStream: false });
    st.stream = stream;
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
        if (f[5] !== ClusterFrameKind.ACK) continue;
        const p = st.pending.get(idKey(f.subarray(24, 40)));
        if (!p) continue;
        this.settle(st, p);
        p.resolve(ackStatusName(f[7]!));
      }
    });
    stream.on('error', (e) => {
      st.lastError = e;
    });
    stream.on('close', () => {
      if (st.stream === stream) st.stream = undefined;
      if (st.pending.size > 0 && !this.closed) {
        if (!st.lastError) st.lastError = new Error(`stream closed (code ${stream.rstCode ?? 0})`);
        this.scheduleRetry(st);
      }
    });
    return stream;
  }

  private scheduleRetry(st: OutStream): void {
    if (st.retryTimer || this.closed) return;
    st.batch = [];
    for (const p of st.pending.values()) p.written = false;
    st.retryTimer = setTimeout(() => {
      st.retryTimer = undefined;
      this.sweepStream(st);
      for (const p of [...st.pending.values()]) {
        if (!p.written && st.pending.has(p.id)) this.write(st, p);
        if (st.retryTimer) break;
      }
    }, this.backoff);
  }

  private failAll(st: OutStream, e: unknown): void {
    for (const p of [...st.pending.values()]) {
      this.settle(st, p);
      p.reject(e);
    }
  }

  private sweepStream(st: OutStream): void {
    const now = Date.now();
    for (const p of [...st.pending.values()]) {
      if (p.deadline > now) continue;
      this.settle(st, p);
      const cause = st.lastError;
      p.reject(
        new PlexusError(
          'PLX_WIRE_DEADLINE',
          `no acknowledgement from ${st.peer} within ${this.deadline} ms${cause ? `: ${(cause as Error).message}` : ''}`,
          { peer: st.peer },
          cause ? { cause } : undefined,
        ),
      );
    }
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
            reject(new PlexusError(e.code, e.message, e.details ?? {}));
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
