/**
 * ClusterPlacement: the runtime's `Placement` from the membership view and the leases this
 * node holds. An actor is `local` while this node holds a lease on its shard that still lets
 * a macrostep start (before expiry less the safety margin, by its own monotonic clock),
 * `remote` on the shard's current owner by the view (or by a newer redirect), and `hold`
 * while no live member owns the shard. Reply addresses of `ask` (`plexus-reply:<node>/...`)
 * are placed on the node that made them.
 */
import { every, monotonicClock, type Repeating, type Timers } from '../core/clock.js';
import { shardOf } from '../core/index.js';
import type { Envelope, Placement, PlacementDecision } from '../runtime/types.js';
import { FrameEnvelope, RouteOrder } from './route-order.js';
import { type Membership, ownerOf, type View } from './types.js';

/** The prefix of the reply addresses `Node.ask` makes: `plexus-reply:<node>/<n>/<uuid>`. */
export const REPLY_PREFIX = 'plexus-reply:';

/** A shard's owner as a redirect reported it. */
export interface Redirect {
  readonly owner: string;
  readonly epoch: bigint;
}

const LOCAL: PlacementDecision = Object.freeze({ kind: 'local' });
const HOLD: PlacementDecision = Object.freeze({ kind: 'hold' });

export class ClusterPlacement implements Placement {
  private readonly listeners = new Set<() => void>();
  private readonly redirects = new Map<number, Redirect>();
  /** The newest epoch this node held for each shard (stamped on frames of its actors). */
  private readonly lastHeld = new Map<number, bigint>();
  private readonly remoteCache = new Map<string, PlacementDecision>();
  private signature = '';
  private readonly timer: Repeating;
  private readonly unsubscribe: () => void;
  /** Redirects applied (for status and tests). */
  redirectCount = 0;
  /** Where this node's unsettled frames to each target travel (the `cluster` processor's). */
  readonly order = new RouteOrder();

  constructor(
    readonly membership: Membership,
    readonly shardCount: number,
    opts: {
      readonly pollEveryMs?: number;
      /** Runs the poll (default the process's timers, unreferenced). */
      readonly timers?: Timers;
    } = {},
  ) {
    shardOf('', shardCount);
    this.unsubscribe = membership.subscribe(() => this.check());
    // Leases are claimed, renewed and run into their safety margin without a new view:
    // a short poll notices when the set of usable leases changed.
    this.timer = every(opts.timers ?? monotonicClock, opts.pollEveryMs ?? 50, () => this.check());
  }

  shardOf(iri: string): number {
    return shardOf(iri, this.shardCount);
  }

  /** The epoch of this node's usable lease on `shard`, or undefined. */
  leaseEpoch(shard: number): bigint | undefined {
    const l = this.membership.leaseFor(shard);
    if (l !== undefined) {
      const prev = this.lastHeld.get(shard);
      if (prev === undefined || l.epoch > prev) this.lastHeld.set(shard, l.epoch);
    }
    return l?.epoch;
  }

  /** The newest epoch this node held for `shard`, even if the lease is gone (0 when never). */
  heldEpoch(shard: number): bigint {
    this.leaseEpoch(shard);
    return this.lastHeld.get(shard) ?? 0n;
  }

  decide(iri: string): PlacementDecision {
    if (iri.startsWith(REPLY_PREFIX)) {
      const node = iri.slice(REPLY_PREFIX.length).split('/')[0] ?? '';
      if (node === this.membership.self) return LOCAL;
      return this.remote(node);
    }
    const shard = shardOf(iri, this.shardCount);
    if (this.leaseEpoch(shard) !== undefined) return LOCAL;
    const owner = this.ownerOf(shard);
    if (owner === undefined || owner === this.membership.self) return HOLD;
    return this.remote(owner);
  }

  /**
   * A message this node would deliver to one of its own actors waits while frames of this
   * node to the same target are still on their way elsewhere (sent before the shard came
   * here): they go first. Frames that arrive from the wire never wait (those frames may be
   * the very ones).
   */
  localAfter(envelope: Envelope): Promise<void> | undefined {
    if (envelope instanceof FrameEnvelope) return undefined;
    return this.order.idle(envelope.target);
  }

  epochOf(iri: string): bigint | undefined {
    return this.leaseEpoch(shardOf(iri, this.shardCount));
  }

  /** The live owner of `shard` by the view or a newer redirect, or undefined. */
  ownerOf(shard: number): string | undefined {
    const view = this.membership.view();
    const entry = ownerOf(view, shard);
    const r = this.redirects.get(shard);
    let owner = entry?.owner;
    if (r !== undefined && (entry === undefined || r.epoch >= entry.epoch)) owner = r.owner;
    if (owner === undefined) return undefined;
    const m = view.members.find((x) => x.id === owner);
    if (m === undefined || m.status === 'failed') return undefined;
    return owner;
  }

  /** Whether `node` is an alive member in the view. */
  alive(node: string): boolean {
    return this.membership.view().members.find((m) => m.id === node)?.status === 'alive';
  }

  /** The epoch of `shard`'s owner by the view or a newer redirect (0 when unknown). */
  ownerEpoch(shard: number): bigint {
    const e = ownerOf(this.membership.view(), shard)?.epoch ?? 0n;
    const r = this.redirects.get(shard);
    return r !== undefined && r.epoch > e ? r.epoch : e;
  }

  /** Takes a redirect: `owner` holds `shard` at `epoch`. Ignored when not newer than what is known. */
  redirect(shard: number, owner: string, epoch: bigint): boolean {
    if (!Number.isInteger(shard) || shard < 0 || shard >= this.shardCount) return false;
    if (epoch <= this.ownerEpoch(shard) && this.ownerOf(shard) === owner) return false;
    if (epoch < this.ownerEpoch(shard)) return false;
    this.redirects.set(shard, { owner, epoch });
    this.redirectCount++;
    this.notify();
    return true;
  }

  /** The redirect table (shard to owner), for status and tests. */
  redirectTable(): ReadonlyMap<number, Redirect> {
    return this.redirects;
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  close(): void {
    this.timer.stop();
    this.unsubscribe();
    this.listeners.clear();
  }

  private remote(node: string): PlacementDecision {
    let d = this.remoteCache.get(node);
    if (d === undefined) {
      d = Object.freeze({ kind: 'remote', node });
      this.remoteCache.set(node, d);
    }
    return d;
  }

  private check(): void {
    const view: View = this.membership.view();
    // Redirects the view has caught up with are dropped.
    for (const [shard, r] of this.redirects) {
      const e = ownerOf(view, shard);
      if (e !== undefined && e.epoch > r.epoch) this.redirects.delete(shard);
    }
    let sig = `${view.version}|`;
    for (const l of this.membership.held()) {
      if (this.membership.leaseFor(l.shard) !== undefined) sig += `${l.shard}@${l.epoch},`;
    }
    if (sig !== this.signature) {
      this.signature = sig;
      this.notify();
    }
  }

  private notify(): void {
    for (const fn of this.listeners) fn();
  }
}
