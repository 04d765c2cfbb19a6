/**
 * The Raft transport seam: what the driver needs from whatever carries messages between
 * members. `RaftTcpTransport` (TCP or mutual TLS 1.3 between processes) and `SimRaftTransport`
 * (ts/sim/raft/transport.ts, the simulator's faulty network on simulated time) implement it;
 * both run test/compliance/raft-transport.suite.ts.
 *
 * The contract, as the core needs it: Raft tolerates lost, repeated and reordered messages,
 * so `send` never blocks and never throws. A message to a peer that is unknown, unreachable,
 * or whose queue is full is dropped and counted in `stats.dropped`; the leader's next
 * heartbeat or append retries. Messages delivered to the handler are addressed to this
 * member. After `close`, nothing more is delivered and every send is dropped.
 */
import type { Message } from '../raft/types.js';

export interface RaftTransportStats {
  sent: number;
  received: number;
  dropped: number;
  refused: number;
  dials: number;
}

export interface RaftTransport {
  /** Counters since the transport opened. */
  readonly stats: RaftTransportStats;
  /** Sends each message to its `to`; never blocks and never throws for an unreachable peer. */
  send(messages: readonly Message[]): void;
  /** Makes what `send` was handed leave now rather than at the end of the tick. */
  flush(): void;
  /** Sets the handler of received messages (replacing the one before). */
  onMessage(handler: (m: Message) => void): void;
  /** Stops sending and receiving; resolves once every connection is closed. */
  close(): Promise<void>;
}
