/**
 * The seam between a rank's communicator (ts/sperli/comm.ts: messages and collectives)
 * and the connections to its peers. The real implementation is the TLS 1.3 mesh
 * (ts/sperli/mesh.ts); an in-memory one (ts/sperli/memory-transport.ts) runs the same
 * communicator in one process for fast tests. Both pass test/compliance/transport.suite.ts.
 *
 * Frames of one peer are delivered in the order that peer sent them. HELLO, HEARTBEAT,
 * ABORT and BYE are the transport's own business and never reach `onFrame`.
 */
import type { PlexusError } from '../core/errors.js';
import type { IncomingFrame } from './comm-stream.js';
import type { GrowingBytes } from './growing-bytes.js';

/** The largest payload `RankTransport.sendNow` takes. */
export const SEND_NOW_MAX = 4096;

/** One accepted frame as the communicator sees it. */
export interface TransportFrame {
  /** DATA, COLLECTIVE or a checkpoint type (docs/sperli.md frame type codes). */
  readonly type: number;
  readonly tag: number;
  readonly epoch: bigint;
  readonly payload: Uint8Array;
  /**
   * Set only after `enableStreams()`, on a large COLLECTIVE or CKPT_DATA frame handed on
   * at its header: `payload` is then empty and the payload bytes arrive through this.
   */
  readonly incoming?: IncomingFrame;
}

export interface RankTransport {
  readonly rank: number;
  readonly size: number;
  /**
   * Sends one frame to `peer` (not to itself). Resolves once the frame is handed to the
   * connection and the connection can take more (its backpressure); rejects with the
   * job's failure if the job has failed.
   */
  send(peer: number, type: number, tag: number, payload: Uint8Array, epoch?: bigint): Promise<void>;
  /**
   * Optional: `send` of one frame whose payload is `prefix` followed by `payload`, without
   * joining them first (the communicator puts a collective header before the caller's
   * data this way). Without it, the communicator joins them itself.
   */
  sendPrefixed?(
    peer: number,
    type: number,
    tag: number,
    prefix: Uint8Array,
    payload: Uint8Array,
    epoch?: bigint,
  ): Promise<void>;
  /**
   * Optional: `sendPrefixed` of one frame (tag 0, epoch 0) of at most SEND_NOW_MAX payload
   * bytes that is handed to the connection before this returns, after every frame
   * already handed over; `prefix` and `payload` are copied, so the caller may reuse them
   * at once. Undefined when the connection took the frame and can take more at once
   * (nothing to wait for); else a promise that settles as `send`'s, whose rejection the
   * caller must handle. The communicator uses it for small collective messages when
   * nothing else waits to be sent to `peer`.
   */
  sendNow?(peer: number, type: number, prefix: Uint8Array, payload: Uint8Array): Promise<void> | undefined;
  /**
   * Optional: `sendPrefixed` of the frame whose payload is `prefix` and then bytes
   * `start .. end` of `source`, which are still being filled: the header goes out once the
   * first of them is final (or, for an empty range, all of `source`), and each further
   * byte as soon as it is. If `source` fails before the header went out, nothing is sent.
   * If it fails after, the frame cannot be finished truthfully: when `lastOfMessage` is
   * false it is finished with zero bytes (the receiver still waits for the message's last
   * frame, so the ABORT that follows reaches it first); otherwise the connection to
   * `peer` is ended mid-frame, which the peer sees as a lost rank.
   */
  sendGrowing?(
    peer: number,
    type: number,
    prefix: Uint8Array,
    source: GrowingBytes,
    start: number,
    end: number,
    lastOfMessage: boolean,
  ): Promise<void>;
  /**
   * Optional: large COLLECTIVE and CKPT_DATA frames reach the frame handler at their header and their
   * payload follows piece by piece (`TransportFrame.incoming`), so the receiver can use
   * each piece as it arrives. Without it every frame arrives whole.
   */
  enableStreams?(): void;
  /**
   * Optional: accepted frames kept because no frame handler is installed yet (they reach the
   * handler first, in order, once one is).
   */
  readonly framesWaiting?: number;
  /** Optional: links to peers that have closed (after a BYE or not). */
  readonly closedLinks?: number;
  /**
   * Optional: links that closed without a BYE and whose peer is lost once the close grace
   * passes (unless an ABORT comes first).
   */
  readonly lossesPending?: number;
  /** Installs the receiver of every accepted DATA, COLLECTIVE and checkpoint frame. */
  onFrame(handler: (peer: number, frame: TransportFrame) => void): void;
  /**
   * Installs the handler called once when the job fails: a refused frame (H1610; ABORT
   * reason 2 was sent to every peer), a lost peer (ABORT reason 1 sent), an ABORT received
   * (H1612), or a local `abort()`.
   */
  onFailure(handler: (error: PlexusError) => void): void;
  /**
   * Optional: installs the handler called when a peer says BYE (it has left the job
   * normally; nothing more arrives from it). The communicator fails a call that still
   * needs a frame from that peer (H1612 `lost-peer`, cause `left`).
   */
  onPeerLeft?(handler: (peer: number) => void): void;
  /** The failure, once there is one. */
  readonly failure: PlexusError | undefined;
  /**
   * Ends the job: ABORT with `reason` (1..5), the H-code number and a text to every peer,
   * then closes every connection. The failure handler runs with `error`.
   */
  abort(reason: number, error: PlexusError): Promise<void>;
  /** Leaves normally: BYE to every peer, then closes every connection. */
  close(): Promise<void>;
}
