/**
 * The `cluster` Event I/O Processor and the receive side of a cluster node.
 *
 * Send: the envelope becomes a cluster frame (payload: the envelope and the sending node as
 * JSON) stamped with a fencing token: for a send of an actor, the actor's shard and the
 * lease epoch this node holds (or last held) on it, so a stale owner's frames are dropped by
 * receivers; for a send from outside any actor, the target's shard and epoch 0 (no token).
 * It goes to the owner placement names, and is retried every `retryBackoffMs` until it is
 * acknowledged or `deliveryDeadlineMs` passed; then `send` rejects and the runtime raises
 * `error.communication` at the sending actor.
 *
 * Receive: a frame of a stale token goes to the dead-letter log (answered `stale`). Any other
 * is handed to the runtime node as a `FrameEnvelope`, with `whenFull: 'wait'`, and
 * acknowledged only once the macrostep that consumed it is durable (or it is a known
 * duplicate). Where the node finds the target elsewhere, it gives the envelope back to this
 * processor, which forwards the frame as it came (token, message id) with `hops + 1` and
 * tells the sending node the new owner (a redirect); past `hopLimit` it is refused,
 * dead-lettered, and the reason reaches the sender. A frame for a shard without a live owner
 * waits in the node until one appears. Because every frame goes through the node, one that
 * arrives while earlier messages of its target still wait in the node (in the actor's
 * mailbox when the shard moved away, or held) goes after them.
 *
 * Order across routes: every DATA frame this node sends or forwards takes a place on its
 * target's route (`RouteOrder`): while frames to a target travel to one node, a frame for
 * another node waits until they are settled, and a message this node would deliver itself
 * waits too (`ClusterPlacement.localAfter`).
 */
import { randomBytes } from 'node:crypto';
import type { ClusterFrame } from '../codec/cluster-frame.js';
import type { ClockTimers } from '../core/clock.js';
import { codeFromPeer, isPlexusError, PlexusError } from '../core/errors.js';
import { type Backoff, delay, heldClock, RetryPolicy } from '../core/retry.js';
import type { Wire } from '../net/types.js';
import type { ActorEvent, DeliverOptions, EventIOProcessor, NodeHandle, Outgoing } from '../runtime/types.js';
import type { ClusterConfig } from './config.js';
import { ClusterCode, clusterError } from './errors.js';
import type { DeadLetters, EpochGate } from './fencing.js';
import { type ClusterPlacement, REPLY_PREFIX } from './placement.js';
import { FrameEnvelope, type RouteOrder, type Ticket } from './route-order.js';

/** The target IRI of control frames between nodes (redirects and refusal reasons). */
export const NOTICE_TARGET = 'plexus-cluster:notice';
/** Sender IRI of control frames. */
const NOTICE_SENDER = 'plexus-cluster:node';

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });

/** What a DATA frame's payload carries. */
interface Carried {
  /** The node that first sent the frame. */
  readonly node: string;
  readonly id: string;
  readonly event: ActorEvent;
}

type Notice =
  | { readonly kind: 'redirect'; readonly shard: number; readonly owner: string; readonly epoch: string }
  | { readonly kind: 'refused'; readonly messageId: string; readonly code: string; readonly reason: string };

/** Counters of one node's cluster traffic. */
export interface ClusterStats {
  sent: number;
  retries: number;
  delivered: number;
  forwarded: number;
  redirectsSent: number;
  redirectsTaken: number;
  stale: number;
  hopRefusals: number;
  held: number;
  failed: number;
}

let idPool = new Uint8Array(0);
let idAt = 0;

/** A fresh random 16-byte wire message id for one attempt (kept across the wire's own retries). */
function wireId(): Uint8Array {
  if (idAt + 16 > idPool.length) {
    idPool = randomBytes(16 * 4096);
    idAt = 0;
  }
  const id = idPool.slice(idAt, idAt + 16);
  idAt += 16;
  return id;
}

function hex(b: Uint8Array): string {
  return Buffer.from(b).toString('hex');
}

/** How a forward of a `FrameEnvelope` ended when it was not stored: the frame's verdict. */
class ForwardVerdict extends Error {
  constructor(readonly verdict: 'stale' | 'refused') {
    super(`the forwarded frame was answered ${verdict}`);
  }
}

const WAIT: DeliverOptions = Object.freeze({ whenFull: 'wait' });

export class ClusterProcessor implements EventIOProcessor {
  readonly type = 'cluster';
  readonly stats: ClusterStats = {
    sent: 0,
    retries: 0,
    delivered: 0,
    forwarded: 0,
    redirectsSent: 0,
    redirectsTaken: 0,
    stale: 0,
    hopRefusals: 0,
    held: 0,
    failed: 0,
  };
  private node?: NodeHandle;
  private readonly attached: Promise<NodeHandle>;
  private resolveAttached!: (n: NodeHandle) => void;
  /** Refusal reasons told by other nodes, by wire message id (hex), until read. */
  private readonly reasons = new Map<string, { code: string; reason: string }>();
  private closed = false;
  private readonly nodeSender: string;
  /** Where this node's unsettled frames to each target travel (shared with placement). */
  private readonly order: RouteOrder;

  constructor(
    private readonly self: string,
    private readonly wire: Wire,
    private readonly placement: ClusterPlacement,
    private readonly gate: EpochGate,
    private readonly deadLetters: DeadLetters,
    private readonly config: ClusterConfig,
    /** Time of the delivery deadline and the pauses between attempts (default: system time). */
    private readonly clock: ClockTimers = heldClock,
  ) {
    this.nodeSender = `${NOTICE_SENDER}/${self}`;
    this.order = placement.order;
    this.attached = new Promise((r) => {
      this.resolveAttached = r;
    });
    wire.onFrame((from, frame, taken) => this.receive(from, frame, taken));
  }

  attach(node: NodeHandle): void {
    this.node = node;
    this.resolveAttached(node);
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  // ---- send -------------------------------------------------------------------------------

  /** The fencing token of a send: the sending actor's shard and held epoch, or the target's shard and 0. */
  private token(from: string, target: string): { shard: number; epoch: bigint } {
    if (from !== '' && !from.startsWith(REPLY_PREFIX)) {
      const shard = this.placement.shardOf(from);
      const epoch = this.placement.heldEpoch(shard);
      if (epoch > 0n) return { shard, epoch };
    }
    return { shard: target.startsWith(REPLY_PREFIX) ? 0 : this.placement.shardOf(target), epoch: 0n };
  }

  async send(out: Outgoing): Promise<void> {
    const env = out.envelope;
    // A frame this node took in and must pass on (its target moved): forwarded as it came.
    if (env instanceof FrameEnvelope) return this.forwardEnvelope(env);
    const from = out.from || env.event.origin || '';
    const { shard, epoch } = this.token(from, env.target);
    const payload = enc.encode(JSON.stringify({ node: this.self, id: env.id, event: env.event } satisfies Carried));
    // The frame's sender: the sending actor, or this node for a send from outside any actor
    // (an `ask` included: its reply address is new for every ask, and as a sender it would make
    // every ask a new pair on the wire; the address travels in the envelope's origin).
    const sender = from === '' || from.startsWith(REPLY_PREFIX) ? this.nodeSender : from;
    const target = env.target;
    const end = this.clock.now() + this.config.deliveryDeadlineMs;
    let attempt = 0;
    let last: unknown;
    // Pauses between attempts (ts/core/retry.ts), made at the first retry only.
    const pause = Math.max(0, this.config.retryBackoffMs);
    let pauses: Backoff | undefined;
    /** This message's place in its target's line while it waits for a route. */
    let ticket: Ticket | undefined;
    /** The node of the last attempt when it went unanswered (the wire gave up on it). */
    let follow: string | undefined;
    this.stats.sent++;
    try {
      for (;;) {
        if (attempt > 0) this.stats.retries++;
        const decision = this.placement.decide(target);
        try {
          let dest = decision.kind === 'remote' ? decision.node : undefined;
          if (follow !== undefined && dest !== undefined && this.placement.alive(follow)) dest = follow;
          else if (follow !== undefined) {
            // Not sending it there again: its place on the old route goes.
            follow = undefined;
            this.order.leave(target);
          }
          if (decision.kind === 'local' && dest === undefined) {
            if (ticket !== undefined) this.order.pass(target, ticket);
            ticket = undefined;
            const node = this.node ?? (await this.attached);
            await node.deliver(env, WAIT);
            return;
          }
          if (dest !== undefined) {
            if (follow !== undefined) {
              // The last attempt went unanswered: its copy may still be on its way through that
              // node (which forwards in order), so it goes there again while the node is alive,
              // on the place it kept on the route (nothing in line went meanwhile).
              if (ticket !== undefined) this.order.pass(target, ticket);
              ticket = undefined;
            } else if (ticket === undefined) {
              // A place on the target's route: at once when the frames before it travel to
              // the same node, else once they are settled.
              if (!this.order.enter(target, dest)) {
                ticket = this.order.line(target);
                await this.order.ready(ticket);
                continue;
              }
            } else if (this.order.take(target, ticket, dest)) ticket = undefined;
            else {
              await this.order.ready(ticket);
              continue;
            }
            follow = undefined;
            const messageId = wireId();
            let verdict: string;
            let kept = false;
            try {
              verdict = await this.wire.send(dest, {
                shard,
                epoch,
                hops: 0,
                messageId,
                sender,
                target,
                payload,
              });
            } catch (e) {
              // Unanswered: keep the place on the route for the next attempt.
              follow = dest;
              kept = true;
              throw e;
            } finally {
              if (!kept) this.order.leave(target);
            }
            if (verdict === 'stored' || verdict === 'duplicate') return;
            if (verdict === 'stale') {
              if (epoch > 0n) {
                throw clusterError(
                  ClusterCode.FENCED,
                  `the frame to ${target} carried epoch ${epoch} of shard ${shard}, which a newer owner replaced: this node lost the sender's shard`,
                  { shard, epoch: `${epoch}` },
                );
              }
              last = new Error(`node ${dest} called the frame stale`);
            } else {
              const r = this.reasons.get(hex(messageId));
              this.reasons.delete(hex(messageId));
              if (r !== undefined) throw new PlexusError(codeFromPeer(r.code), r.reason, { target });
              last = new Error(`node ${dest} refused the frame to ${target}`);
            }
          } else {
            // No live owner: keep this message's place in line, so that nothing sent later
            // to the target goes first once an owner appears.
            this.stats.held++;
            ticket ??= this.order.line(target);
            last = new Error(`no live node owns the shard of ${target}`);
          }
        } catch (e) {
          if (isPlexusError(e) && FINAL.has(e.code)) {
            this.stats.failed++;
            throw e;
          }
          last = e;
        }
        attempt++;
        if (this.closed || this.clock.now() + this.config.retryBackoffMs > end) {
          this.stats.failed++;
          throw clusterError(
            ClusterCode.DEADLINE,
            `no node acknowledged message ${env.id} to ${target} within ${this.config.deliveryDeadlineMs} ms (${attempt} attempts): ${(last as Error)?.message ?? 'unknown'}`,
            { target, attempts: attempt },
            last,
          );
        }
        pauses ??= new RetryPolicy({ baseMs: pause, capMs: pause, factor: 1, jitter: 'equal' }).start(this.clock);
        await delay(pauses.next() ?? pause, this.clock);
      }
    } finally {
      if (ticket !== undefined) this.order.pass(target, ticket);
      if (follow !== undefined) this.order.leave(target);
    }
  }

  // ---- receive ----------------------------------------------------------------------------

  private async receive(
    from: string,
    frame: ClusterFrame,
    taken?: () => void,
  ): Promise<'stored' | 'stale' | 'refused'> {
    if (frame.target === NOTICE_TARGET) return this.notice(frame);
    if (frame.epoch > 0n && !this.gate.admit(frame.shard, frame.epoch)) {
      this.stats.stale++;
      await this.deadLetters.record('stale-epoch', from, frame, this.gate.epochOf(frame.shard));
      return 'stale';
    }
    let carried: Carried;
    try {
      carried = JSON.parse(dec.decode(frame.payload)) as Carried;
      if (typeof carried?.id !== 'string' || typeof carried.node !== 'string' || typeof carried.event !== 'object') {
        throw new TypeError('shape');
      }
    } catch {
      return 'refused';
    }
    if (this.closed) return 'refused';
    // The node places it: into its actor's mailbox (the wire reads the pair's next frame once
    // it is there, `taken`; its ACK waits for the durable macrostep), behind the messages of
    // its target that wait in the node, or back to `send` to be forwarded.
    const env = new FrameEnvelope(carried.id, frame.target, carried.event, frame, from, carried.node);
    const node = this.node ?? (await this.attached);
    try {
      await node.deliver(env, taken === undefined ? WAIT : { whenFull: 'wait', taken });
    } catch (e) {
      if (e instanceof ForwardVerdict) return e.verdict;
      if (isPlexusError(e) && e.code === 'PLX_RUNTIME_NO_CHART') {
        await this.tell(carried.node, {
          kind: 'refused',
          messageId: hex(frame.messageId),
          code: e.code,
          reason: e.message,
        });
      }
      return 'refused';
    }
    if (!env.forwarded) this.stats.delivered++;
    return 'stored';
  }

  /**
   * Passes on a frame this node took in: to the target's owner as it came (token, message id)
   * with `hops + 1`, on the target's route; one attempt (the first sender retries). Delivered
   * here when this node owns the target by now; waits while no live node owns it.
   */
  private async forwardEnvelope(env: FrameEnvelope): Promise<void> {
    const frame = env.frame;
    const target = frame.target;
    if (frame.hops + 1 > this.config.hopLimit) {
      this.stats.hopRefusals++;
      await this.deadLetters.record('hop-limit', env.from, frame, this.gate.epochOf(frame.shard));
      await this.tell(env.node, {
        kind: 'refused',
        messageId: hex(frame.messageId),
        code: ClusterCode.HOP_LIMIT,
        reason: `message ${env.id} to ${target} was forwarded ${frame.hops} times and the hop limit is ${this.config.hopLimit}; the nodes disagree on the owner of shard ${this.placement.shardOf(target)}`,
      });
      throw new ForwardVerdict('refused');
    }
    let ticket: Ticket | undefined;
    try {
      for (;;) {
        if (this.closed) throw new ForwardVerdict('refused');
        const d = this.placement.decide(target);
        if (d.kind === 'local') {
          if (ticket !== undefined) this.order.pass(target, ticket);
          ticket = undefined;
          const node = this.node ?? (await this.attached);
          await node.deliver(env, WAIT);
          return;
        }
        if (d.kind === 'hold') {
          this.stats.held++;
          ticket ??= this.order.line(target);
          await delay(this.config.retryBackoffMs, this.clock);
          continue;
        }
        if (ticket === undefined) {
          if (!this.order.enter(target, d.node)) {
            ticket = this.order.line(target);
            await this.order.ready(ticket);
            continue;
          }
        } else if (this.order.take(target, ticket, d.node)) ticket = undefined;
        else {
          await this.order.ready(ticket);
          continue;
        }
        let verdict: string;
        try {
          verdict = await this.forward(env, d.node);
        } finally {
          this.order.leave(target);
        }
        if (verdict === 'stale' || verdict === 'refused') throw new ForwardVerdict(verdict);
        env.forwarded = true;
        return;
      }
    } finally {
      if (ticket !== undefined) this.order.pass(target, ticket);
    }
  }

  /** One forward of `env`'s frame to `owner`, with a redirect to the sending node. */
  private async forward(env: FrameEnvelope, owner: string): Promise<'stored' | 'stale' | 'refused'> {
    const frame = env.frame;
    const targetShard = this.placement.shardOf(frame.target);
    this.stats.forwarded++;
    if (env.node !== this.self) {
      this.stats.redirectsSent++;
      void this.tell(env.node, {
        kind: 'redirect',
        shard: targetShard,
        owner,
        epoch: `${this.placement.ownerEpoch(targetShard)}`,
      }).catch(() => {});
    }
    let verdict: string;
    try {
      verdict = await this.wire.send(owner, {
        shard: frame.shard,
        epoch: frame.epoch,
        hops: frame.hops + 1,
        messageId: frame.messageId,
        sender: frame.sender,
        target: frame.target,
        payload: frame.payload,
      });
    } catch {
      return 'refused';
    }
    if (verdict === 'stale') return 'stale';
    if (verdict === 'refused') return 'refused';
    return 'stored';
  }

  /** Sends a control notice to `node` (acknowledged before this resolves). */
  private async tell(node: string, n: Notice): Promise<void> {
    if (node === this.self) {
      this.takeNotice(n);
      return;
    }
    try {
      await this.wire.send(node, {
        shard: 0,
        epoch: 0n,
        hops: 0,
        sender: `${NOTICE_SENDER}/${this.self}`,
        target: NOTICE_TARGET,
        payload: enc.encode(JSON.stringify(n)),
      });
    } catch {
      // The sender retries or times out on its own.
    }
  }

  private async notice(frame: ClusterFrame): Promise<'stored' | 'refused'> {
    let n: Notice;
    try {
      n = JSON.parse(dec.decode(frame.payload)) as Notice;
    } catch {
      return 'refused';
    }
    this.takeNotice(n);
    return 'stored';
  }

  private takeNotice(n: Notice): void {
    if (n?.kind === 'redirect' && typeof n.owner === 'string' && /^[0-9]{1,20}$/.test(n.epoch)) {
      if (this.placement.redirect(n.shard, n.owner, BigInt(n.epoch))) this.stats.redirectsTaken++;
    } else if (n?.kind === 'refused' && typeof n.messageId === 'string' && typeof n.code === 'string') {
      this.reasons.set(n.messageId, { code: n.code, reason: String(n.reason) });
      if (this.reasons.size > 10_000) {
        const first = this.reasons.keys().next().value as string;
        this.reasons.delete(first);
      }
    }
  }
}

/** Failures that no retry can fix. */
const FINAL = new Set<string>([
  ClusterCode.FENCED,
  ClusterCode.HOP_LIMIT,
  'PLX_RUNTIME_NO_CHART',
  'PLX_RUNTIME_BAD_INPUT',
  'PLX_WIRE_FRAME_TOO_LARGE',
  'PLX_WIRE_BAD_FRAME',
]);
