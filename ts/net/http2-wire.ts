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
import { MAX_CLUSTER_FRAME } from '../codec/cluster-frame.js';
import { PlexusError } from '../core/errors.js';
import { heldClock } from '../core/retry.js';
import type { Spinner } from '../core/spinner.js';
import { nodeName, wireIdentityPolicy } from './ca.js';
import { Http2Inbound } from './http2-inbound.js';
import { DEFAULT_STREAM_CAP, Http2Outbound } from './http2-outbound.js';
import { type Http2WireOptions, WirePolling, wireSpinMs } from './http2-wire-shared.js';
import { Receiver } from './receiver.js';
import { tlsEndpoint } from './tls-endpoint.js';
import type { CallHandler, DeliveryVerdict, FrameHandler, OutboundFrame, Wire, WireRefusal } from './types.js';

/**
 * The wire: its inbound side (ts/net/http2-inbound.ts) and outbound side
 * (ts/net/http2-outbound.ts) over one TLS endpoint (ts/net/tls-endpoint.ts), one receiver and
 * one polling state.
 */
export class Http2Wire implements Wire {
  readonly self: string;
  readonly cluster: string;
  private readonly receiver: Receiver;
  private callHandler: CallHandler = async () => {
    throw new PlexusError('PLX_WIRE_REFUSED', 'this node answers no calls');
  };
  private readonly refused: WireRefusal[] = [];
  private readonly poll: WirePolling;
  private readonly inbound: Http2Inbound;
  private readonly outbound: Http2Outbound;
  private closed = false;

  constructor(opts: Http2WireOptions) {
    this.self = opts.self;
    this.cluster = opts.cluster;
    nodeName(opts.self, opts.cluster);
    this.receiver = new Receiver(opts.dedupCapacity ?? 65_536);
    const maxFrame = Math.min(opts.maxFrameBytes ?? MAX_CLUSTER_FRAME, MAX_CLUSTER_FRAME);
    this.poll = new WirePolling(wireSpinMs(opts.spinMs));
    const endpoint = tlsEndpoint(opts.tls, wireIdentityPolicy(opts.cluster, opts.admitsClients === true));
    this.inbound = new Http2Inbound({
      opts,
      endpoint,
      receiver: this.receiver,
      poll: this.poll,
      refuse: (r) => this.refuse(r),
      maxFrame,
      hopLimit: opts.hopLimit ?? 4,
      callHandler: () => this.callHandler,
    });
    this.outbound = new Http2Outbound({
      opts,
      endpoint,
      poll: this.poll,
      maxFrame,
      deadline: opts.deliveryDeadlineMs ?? 30_000,
      backoff: opts.retryBackoffMs ?? 50,
      streamCap: Math.max(1, opts.streamCap ?? DEFAULT_STREAM_CAP),
      poolSize: Math.max(1, opts.poolSize ?? 1),
      clock: opts.clock ?? heldClock,
    });
  }

  /** Keeps the event loop polling while frames wait for ACKs, or frames for the ACKs sent (internal). */
  get spinner(): Spinner {
    return this.poll.spinner;
  }

  /** The recent time from queueing a frame to its ACK (ms), a moving average. */
  get ackMs(): number {
    return this.poll.ackMs;
  }

  /** The recent time from taking a received frame to answering it (ms), a moving average. */
  get answerMs(): number {
    return this.poll.answerMs;
  }

  /** Frames handed to the frame handler and not yet answered, over all streams. */
  get inboundInHandler(): number {
    return this.inbound.inboundInHandler;
  }

  /** Received copies of a frame held until the copy being stored is settled (then answered duplicate). */
  get inboundCopiesWaiting(): number {
    return this.receiver.copiesWaiting;
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

  listen(): Promise<string> {
    return this.inbound.listen();
  }

  /** The port the server listens on. */
  get port(): number {
    return this.inbound.port;
  }

  /** Bytes received on frame streams and not yet handed to the frame handler, over all streams. */
  inboundBufferedBytes(): number {
    return this.inbound.bufferedBytes();
  }

  send(peer: string, frame: OutboundFrame): Promise<DeliveryVerdict> {
    return this.outbound.send(peer, frame);
  }

  call(peer: string, body: Uint8Array): Promise<Uint8Array> {
    return this.outbound.call(peer, body);
  }

  /** Closes the connections to `peer` (e.g. after it left the view). */
  disconnect(peer: string): void {
    this.outbound.disconnect(peer);
    this.inbound.disconnect(peer);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.outbound.close();
    await this.inbound.close();
  }
}
