/**
 * The Wire seam: how one node hands a cluster frame to another. `Http2Wire` is the real one
 * (HTTP/2 over mutual TLS 1.3), `MemoryWire` the in-process stand-in; both pass
 * test/compliance/wire.suite.ts.
 *
 * Contract: frames of one (sender, target) pair arrive in order, each only after the previous
 * one was taken (the frame handler called `taken`: the frame is in its target's FIFO mailbox,
 * so nothing later can overtake it) or stored (the handler's promise resolved), so a full
 * mailbox slows exactly its pairs. A frame is acknowledged only once the handler's promise
 * resolved (e.g. the macrostep that consumed it is durable); the ACKs of one stream go out in
 * the order its frames came. Delivery is at least once (the sender retries until an
 * acknowledgement or the delivery deadline) and the receiver drops repeats by message id
 * (bounded cache), so a handler sees a message id once while it stays in the cache.
 */
import type { ClusterFrame } from '../codec/cluster-frame.js';

/** What the receiver did with a frame. */
export type DeliveryVerdict = 'stored' | 'duplicate' | 'stale' | 'refused';

/** A frame to send. */
export interface OutboundFrame {
  readonly shard: number;
  readonly epoch: bigint;
  readonly hops?: number;
  /** 16 bytes; a random one when absent. Keep it across retries of one message. */
  readonly messageId?: Uint8Array;
  readonly sender: string;
  readonly target: string;
  readonly payload: Uint8Array;
}

/**
 * Stores an inbound frame (in a mailbox, or the dead-letter log): resolves with `stored`,
 * `stale` (fenced, dead-lettered) or `refused` once that is done, and the frame is
 * acknowledged with that. Until it resolves, or until the handler calls `taken` (the frame
 * holds its place in a FIFO mailbox, so later frames of its pair cannot overtake it), the
 * pair's next frame is not read. A wire may leave `taken` out; a handler need not call it.
 */
export type FrameHandler = (
  from: string,
  frame: ClusterFrame,
  taken?: () => void,
) => Promise<'stored' | 'stale' | 'refused'>;

/** Answers a request (the lease authority's); throw a PlexusError to refuse it. */
export type CallHandler = (from: string, body: Uint8Array) => Promise<Uint8Array>;

/** A refusal the wire made on its own (untrusted certificate, not a member, bad frame). */
export interface WireRefusal {
  readonly code: string;
  readonly peer?: string;
  readonly message: string;
}

export interface WireTuning {
  /** Largest frame, header included (default and maximum 1 MiB). */
  readonly maxFrameBytes?: number;
  /** Message ids a receiver remembers (default 65 536). */
  readonly dedupCapacity?: number;
  /** How long a send is retried (default 30 s). */
  readonly deliveryDeadlineMs?: number;
  /** Pause between retries (default 50 ms). */
  readonly retryBackoffMs?: number;
  /** Hops a frame may have travelled (default 4). */
  readonly hopLimit?: number;
  /** Streams per peer; pairs beyond share streams by hash (default 16). */
  readonly streamCap?: number;
}

export interface Wire {
  readonly self: string;
  /** Starts listening; resolves with `host:port`. */
  listen(): Promise<string>;
  onFrame(handler: FrameHandler): void;
  onCall(handler: CallHandler): void;
  /** Sends one frame to `peer`; resolves with the receiver's verdict once acknowledged. */
  send(peer: string, frame: OutboundFrame): Promise<DeliveryVerdict>;
  /** One request to `peer`'s call handler. */
  call(peer: string, body: Uint8Array): Promise<Uint8Array>;
  /** Refusals made by this wire, newest last (bounded). */
  refusals(): readonly WireRefusal[];
  close(): Promise<void>;
}
