/**
 * The inbound side of the cluster wire (ts/net/http2-wire.ts): the HTTP/2 server, its
 * member check on every connection, and the frame, ACK and call streams peers open.
 */
import * as http2 from 'node:http2';
import { performance } from 'node:perf_hooks';
import type { TLSSocket } from 'node:tls';
import {
  AckStatus,
  type AckStatusCode,
  CLUSTER_HEADER_SIZE,
  type ClusterFrame,
  ClusterFrameKind,
  ClusterFrameReader,
  encodeAck,
} from '../codec/cluster-frame.js';
import { isPlexusError, PlexusError } from '../core/errors.js';
import { isClientPeer } from './ca.js';
import { AckSink } from './http2-ack-sink.js';
import {
  ACKS_PATH,
  CALL_PATH,
  FRAMES_PATH,
  type Http2WireOptions,
  SESSION_WINDOW,
  STREAM_WINDOW,
  type WirePolling,
} from './http2-wire-shared.js';
import { ADMIT_DUPLICATE, type Receiver } from './receiver.js';
import type { TlsEndpoint } from './tls-endpoint.js';
import type { CallHandler, WireRefusal } from './types.js';

const MAX_CALL_REQUEST = 1024 * 1024;
/** Bytes a receiving stream buffers ahead of the frame being stored before it pauses. */
const READ_AHEAD_BYTES = 64 * 1024;
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

/** What the inbound side is given by its wire. */
export interface InboundDeps {
  readonly opts: Pick<Http2WireOptions, 'cluster' | 'isMember' | 'admitsClients' | 'host' | 'port'>;
  /** Server options and the node a client certificate names. */
  readonly endpoint: TlsEndpoint<string>;
  /** Deduplicates frames and hands them to the frame handler. */
  readonly receiver: Receiver;
  readonly poll: WirePolling;
  readonly refuse: (r: WireRefusal) => void;
  readonly maxFrame: number;
  readonly hopLimit: number;
  /** The call handler in place now. */
  readonly callHandler: () => CallHandler;
}

export class Http2Inbound {
  private readonly opts: InboundDeps['opts'];
  private readonly endpoint: TlsEndpoint<string>;
  private readonly receiver: Receiver;
  private readonly poll: WirePolling;
  private readonly refuse: (r: WireRefusal) => void;
  private readonly maxFrame: number;
  private readonly hopLimit: number;
  private readonly callHandler: () => CallHandler;
  private server: http2.Http2SecureServer | undefined;
  private readonly serverSessions = new Set<http2.ServerHttp2Session>();
  /** Frames handed to the frame handler and not yet answered, over all streams. */
  inboundInHandler = 0;

  constructor(deps: InboundDeps) {
    this.opts = deps.opts;
    this.endpoint = deps.endpoint;
    this.receiver = deps.receiver;
    this.poll = deps.poll;
    this.refuse = deps.refuse;
    this.maxFrame = deps.maxFrame;
    this.hopLimit = deps.hopLimit;
    this.callHandler = deps.callHandler;
  }

  /** Starts the server; resolves to its `host:port`. */
  async listen(): Promise<string> {
    const server = http2.createSecureServer(
      this.endpoint.serverOptions({
        allowHTTP1: false,
        settings: { enablePush: false, initialWindowSize: STREAM_WINDOW },
      }),
    );
    this.server = server;
    server.on('tlsClientError', (err, socket) => {
      this.refuse({ code: 'PLX_WIRE_UNTRUSTED', message: `TLS handshake refused: ${err.message}` });
      socket.destroy();
    });
    // Runs before http2 sets up a session on the connection: a certificate that chains to the
    // cluster CA but does not name a current member is cut off here.
    server.prependListener('secureConnection', (socket: TLSSocket) => {
      const node = this.endpoint.accept(socket).identity;
      (socket as unknown as { plexusPeer?: string }).plexusPeer = node;
      socket.setNoDelay(true);
      if (node === undefined || !this.admitted(node)) {
        this.refuse({
          code: 'PLX_WIRE_NOT_MEMBER',
          ...(node ? { peer: node } : {}),
          message: node
            ? `node ${node} is not a current member of cluster ${this.opts.cluster}`
            : `the certificate names no node of cluster ${this.opts.cluster}`,
        });
        socket.destroy();
      }
    });
    server.on('sessionError', () => {});
    server.on('session', (session) => {
      const socket = session.socket as unknown as { destroyed?: boolean; plexusPeer?: string } | undefined;
      const node = socket && !socket.destroyed ? socket.plexusPeer : undefined;
      if (node === undefined || !this.admitted(node)) {
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
      if (from === undefined || !this.admitted(from)) {
        if (from !== undefined) {
          this.refuse({ code: 'PLX_WIRE_NOT_MEMBER', peer: from, message: `node ${from} is no longer a member` });
          stream.session?.destroy();
        }
        stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
        return;
      }
      if (isClientPeer(from) && headers[':path'] !== CALL_PATH) {
        // A program outside the cluster only calls: no frames into mailboxes, no ACK stream.
        this.refuse({ code: 'PLX_WIRE_NOT_MEMBER', peer: from, message: `client ${from} may only call` });
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

  /** Whether a peer may use this server: a current member, or a client when clients are admitted. */
  private admitted(peer: string): boolean {
    return isClientPeer(peer) ? this.opts.admitsClients === true : this.opts.isMember(peer);
  }

  /** The port the server listens on. */
  get port(): number {
    const a = this.server?.address();
    return a && typeof a !== 'string' ? a.port : 0;
  }

  /** Bytes received on frame streams and not yet handed to the frame handler, over all streams. */
  bufferedBytes(): number {
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
    const sink = new AckSink(stream, this.poll.spinner, this.poll.pollAfterAcks);
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
        if (this.poll.on) this.poll.answerMs += (performance.now() - e.at - this.poll.answerMs) / 8;
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
          const entry: InboundEntry = { frame, status: -1, at: this.poll.on ? performance.now() : 0 };
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
      this.callHandler()(from, Buffer.concat(chunks)).then(
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

  /** Closes the server connections of `peer`. */
  disconnect(peer: string): void {
    for (const s of this.serverSessions) {
      if ((s as unknown as { plexusPeer?: string }).plexusPeer === peer) s.destroy();
    }
  }

  /** Closes every server connection and the server. */
  async close(): Promise<void> {
    for (const s of this.serverSessions) s.destroy();
    const server = this.server;
    if (server) await new Promise<void>((r) => server.close(() => r()));
  }
}
