/**
 * MemoryWire: the in-process stand-in for the cluster wire, for fast tests. Wires meet on a
 * MemoryNetwork. It keeps the Wire contract (per-pair order with one frame in flight per
 * pair, frames encoded and decoded with the real codec, acknowledgements, retries until the
 * deadline, dedup at the receiver, membership checks on both ends) and can drop or duplicate
 * frames to exercise retries.
 */
import { randomBytes } from 'node:crypto';
import { ackStatusName, decodeClusterFrame, encodeClusterFrame, MAX_CLUSTER_FRAME } from '../codec/cluster-frame.js';
import type { ClockTimers } from '../core/clock.js';
import { PlexusError } from '../core/errors.js';
import { type Backoff, delay, heldClock, RetryPolicy } from '../core/retry.js';
import { Receiver } from './receiver.js';
import type {
  CallHandler,
  DeliveryVerdict,
  FrameHandler,
  OutboundFrame,
  Wire,
  WireRefusal,
  WireTuning,
} from './types.js';

export interface MemoryFaults {
  /** Drop this delivery attempt (the sender retries after its backoff). */
  drop?(from: string, to: string, attempt: number): boolean;
  /** Deliver this frame twice. */
  duplicate?(from: string, to: string): boolean;
}

export class MemoryNetwork {
  readonly wires = new Map<string, MemoryWire>();
  faults: MemoryFaults = {};
}

export interface MemoryWireOptions extends WireTuning {
  readonly self: string;
  readonly network: MemoryNetwork;
  /** Whether a peer is a current member (checked on both ends of every frame). */
  readonly isMember: (node: string) => boolean;
  /** Time of the delivery deadline and the pauses between attempts (default: system time). */
  readonly clock?: ClockTimers;
}

export class MemoryWire implements Wire {
  readonly self: string;
  private readonly network: MemoryNetwork;
  private readonly isMember: (node: string) => boolean;
  private readonly receiver: Receiver;
  private callHandler: CallHandler = async () => {
    throw new PlexusError('PLX_WIRE_REFUSED', 'this node answers no calls');
  };
  private readonly chains = new Map<string, Promise<unknown>>();
  private readonly refused: WireRefusal[] = [];
  private readonly maxFrame: number;
  private readonly deadline: number;
  private readonly backoff: number;
  private readonly hopLimit: number;
  private closed = false;
  private readonly clock: ClockTimers;

  constructor(opts: MemoryWireOptions) {
    this.self = opts.self;
    this.clock = opts.clock ?? heldClock;
    this.network = opts.network;
    this.isMember = opts.isMember;
    this.receiver = new Receiver(opts.dedupCapacity ?? 65_536);
    this.maxFrame = Math.min(opts.maxFrameBytes ?? MAX_CLUSTER_FRAME, MAX_CLUSTER_FRAME);
    this.deadline = opts.deliveryDeadlineMs ?? 30_000;
    this.backoff = opts.retryBackoffMs ?? 50;
    this.hopLimit = opts.hopLimit ?? 4;
  }

  async listen(): Promise<string> {
    this.network.wires.set(this.self, this);
    return `memory:${this.self}`;
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

  /** The peer's wire if both ends admit each other, else throws the refusal. */
  private peer(peer: string): MemoryWire {
    if (this.closed) throw new PlexusError('PLX_WIRE_CLOSED', 'this wire is closed');
    const w = this.network.wires.get(peer);
    if (!w || w.closed) {
      throw new PlexusError('PLX_WIRE_UNREACHABLE', `node ${peer} is not reachable`, { peer });
    }
    if (!this.isMember(peer)) {
      throw new PlexusError('PLX_WIRE_NOT_MEMBER', `node ${peer} is not a current member`, { peer });
    }
    if (!w.isMember(this.self)) {
      w.refuse({ code: 'PLX_WIRE_NOT_MEMBER', peer: this.self, message: `${this.self} is not a current member` });
      throw new PlexusError('PLX_WIRE_NOT_MEMBER', `node ${peer} refused this node: not a current member`, { peer });
    }
    return w;
  }

  send(peer: string, frame: OutboundFrame): Promise<DeliveryVerdict> {
    let bytes: Uint8Array;
    try {
      bytes = encodeClusterFrame({ ...frame, messageId: frame.messageId ?? randomBytes(16) });
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
    const key = `${peer}\u0000${frame.sender}\u0000${frame.target}`;
    const prev = this.chains.get(key) ?? Promise.resolve();
    const run = prev.then(
      () => this.deliver(peer, bytes),
      () => this.deliver(peer, bytes),
    );
    this.chains.set(key, run);
    void run.then(
      () => this.chains.get(key) === run && this.chains.delete(key),
      () => this.chains.get(key) === run && this.chains.delete(key),
    );
    return run;
  }

  private async deliver(peer: string, bytes: Uint8Array): Promise<DeliveryVerdict> {
    const end = this.clock.now() + this.deadline;
    let attempt = 0;
    let last: unknown;
    let pauses: Backoff | undefined;
    for (;;) {
      attempt++;
      try {
        const w = this.peer(peer);
        if (this.network.faults.drop?.(this.self, peer, attempt))
          throw new PlexusError('PLX_WIRE_UNREACHABLE', 'frame lost', { peer });
        const copy = bytes.slice();
        const status = await w.accept(this.self, copy);
        if (this.network.faults.duplicate?.(this.self, peer)) await w.accept(this.self, bytes.slice());
        return ackStatusName(status);
      } catch (e) {
        if ((e as PlexusError).code === 'PLX_WIRE_NOT_MEMBER' || (e as PlexusError).code === 'PLX_WIRE_CLOSED') throw e;
        if ((e as PlexusError).code === 'PLX_WIRE_BAD_FRAME' || (e as PlexusError).code === 'PLX_WIRE_FRAME_TOO_LARGE')
          throw e;
        last = e;
      }
      if (this.clock.now() + this.backoff > end) {
        throw new PlexusError(
          'PLX_WIRE_DEADLINE',
          `no acknowledgement from ${peer} within ${this.deadline} ms (${attempt} attempts): ${(last as Error)?.message}`,
          { peer, attempts: attempt },
          { cause: last },
        );
      }
      // The same pauses as the real wire's resends (ts/net/http2-outbound.ts).
      const pause = Math.max(0, this.backoff);
      pauses ??= new RetryPolicy({ baseMs: pause, capMs: pause, factor: 1, jitter: 'equal' }).start(this.clock);
      await delay(pauses.next() ?? pause, this.clock);
    }
  }

  /** The receive side: decode with the real codec, then dedup and store. */
  private async accept(from: string, bytes: Uint8Array): Promise<number> {
    let frame: ReturnType<typeof decodeClusterFrame>;
    try {
      if (bytes.length > this.maxFrame) {
        throw new PlexusError('PLX_WIRE_FRAME_TOO_LARGE', `a frame of ${bytes.length} bytes is above ${this.maxFrame}`);
      }
      frame = decodeClusterFrame(bytes, this.hopLimit);
    } catch (e) {
      this.refuse({ code: (e as PlexusError).code, peer: from, message: (e as Error).message });
      throw e;
    }
    return this.receiver.handle(from, frame);
  }

  async call(peer: string, body: Uint8Array): Promise<Uint8Array> {
    const w = this.peer(peer);
    return (await w.callHandler(this.self, body.slice())).slice();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.network.wires.get(this.self) === this) this.network.wires.delete(this.self);
  }
}
