/**
 * The Raft transport seam (ts/raft-io/transport.ts) on the simulator's faulty network: a
 * `SimRaftNetwork` joins the endpoints of numbered members over one `SimNetwork`, and
 * `deliver(now)` hands each endpoint the messages due by `now`. What the network does to a
 * message (delay and so reordering, loss, duplication, partitions) is the seed's choice; a
 * message to a member that never joined, or sent by or to a closed endpoint, is dropped and
 * counted, as the TCP transport does.
 */

import type { Clock } from '../../core/clock.js';
import type { Message } from '../../raft/types.js';
import type { RaftTransport, RaftTransportStats } from '../../raft-io/transport.js';
import type { SimNetwork } from '../network.js';

export class SimRaftNetwork {
  private readonly endpoints = new Map<number, SimRaftTransport>();

  constructor(
    readonly net: SimNetwork<Message>,
    private readonly clock: Clock,
    /** Sees every message an open endpoint sends (counting, tracing). */
    private readonly observe?: (m: Message) => void,
  ) {}

  /** A member's endpoint; a new one replaces (and closes) the member's last (a restart). */
  join(id: number): SimRaftTransport {
    this.endpoints.get(id)?.closeNow();
    const t = new SimRaftTransport(id, this);
    this.endpoints.set(id, t);
    return t;
  }

  /** Sends `m` from an endpoint: false when nobody by that id ever joined. */
  carry(m: Message): boolean {
    if (!this.endpoints.has(m.to)) return false;
    this.observe?.(m);
    this.net.send(m.from, m.to, m, this.clock.now());
    return true;
  }

  /** Hands each open endpoint the messages due by `now`, in delivery order. */
  deliver(now: number): void {
    for (const d of this.net.takeDue(now)) this.endpoints.get(d.to)?.arrive(d.msg);
  }
}

export class SimRaftTransport implements RaftTransport {
  readonly stats: RaftTransportStats = { sent: 0, received: 0, dropped: 0, refused: 0, dials: 0 };
  private handler: (m: Message) => void = () => undefined;
  private closed = false;

  constructor(
    readonly id: number,
    private readonly network: SimRaftNetwork,
  ) {}

  send(messages: readonly Message[]): void {
    for (const m of messages) {
      if (this.closed || m.from !== this.id || !this.network.carry(m)) this.stats.dropped++;
      else this.stats.sent++;
    }
  }

  /** Messages leave as they are sent: nothing is held back. */
  flush(): void {}

  onMessage(handler: (m: Message) => void): void {
    this.handler = handler;
  }

  arrive(m: Message): void {
    if (this.closed) return;
    if (m.to !== this.id) {
      this.stats.refused++;
      return;
    }
    this.stats.received++;
    this.handler(m);
  }

  /** Closes at once (a crash: what is in flight to it is lost on arrival). */
  closeNow(): void {
    this.closed = true;
  }

  close(): Promise<void> {
    this.closeNow();
    return Promise.resolve();
  }
}
