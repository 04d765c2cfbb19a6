/**
 * RouteOrder: per target actor, where this node's unsettled DATA frames to it are headed.
 * A node keeps the frames of one target on one route at a time: a frame to the node the
 * others already travel to goes at once (the wire keeps a pair's frames in order on its
 * stream), and a frame for another node waits in line, in arrival order, until every frame
 * on the old route is settled (acknowledged through it, or failed). So when a shard moves,
 * or a redirect changes this node's table, nothing of a pair sent later overtakes what is
 * still on its way through the old route. A message this node would deliver itself waits
 * the same way (`idle`).
 *
 * The normal path (one route per target) costs a Map lookup and a counter per frame.
 */
import type { ClusterFrame } from '../codec/cluster-frame.js';
import type { ActorEvent } from '../runtime/types.js';

/** A place in a target's line (`line`). */
export interface Ticket {
  resolve: (() => void) | undefined;
  woken: boolean;
}

interface Route {
  /** The node the unsettled frames travel to. */
  dest: string;
  /** Frames on `dest` not yet settled. */
  n: number;
  /** Frames waiting for a route, oldest first. */
  readonly line: Ticket[];
  /** Resolved once nothing is unsettled or waiting (made on demand, by `idle`). */
  idle?: { readonly promise: Promise<void>; readonly resolve: () => void };
}

function wake(t: Ticket | undefined): void {
  if (t === undefined) return;
  const r = t.resolve;
  if (r !== undefined) {
    t.resolve = undefined;
    r();
  } else t.woken = true;
}

export class RouteOrder {
  private readonly routes = new Map<string, Route>();

  /** Targets with frames unsettled or waiting (for status and tests). */
  get size(): number {
    return this.routes.size;
  }

  /** Frames to `target` waiting in line for a route (for status and tests). */
  waiting(target: string): number {
    return this.routes.get(target)?.line.length ?? 0;
  }

  /**
   * The fast path: takes a place on the route to `dest` for one frame to `target` when
   * nothing waits and the route is free or goes there already (settle it with `leave`).
   * False: join the `line`.
   */
  enter(target: string, dest: string): boolean {
    const r = this.routes.get(target);
    if (r === undefined) {
      this.routes.set(target, { dest, n: 1, line: [] });
      return true;
    }
    if (r.line.length === 0 && (r.n === 0 || r.dest === dest)) {
      r.dest = dest;
      r.n++;
      return true;
    }
    return false;
  }

  /**
   * Takes a place on the route to `dest` past the line: for a frame sent again to the node
   * an earlier attempt of it went to (its first copy may still be on its way through there).
   * Frames in line wait for it too.
   */
  follow(target: string, dest: string): void {
    const r = this.routes.get(target);
    if (r === undefined) this.routes.set(target, { dest, n: 1, line: [] });
    else {
      if (r.n === 0) r.dest = dest;
      r.n++;
    }
  }

  /** Joins the end of `target`'s line; `ready` resolves when the ticket may try `take`. */
  line(target: string): Ticket {
    let r = this.routes.get(target);
    if (r === undefined) {
      r = { dest: '', n: 0, line: [] };
      this.routes.set(target, r);
    }
    const t: Ticket = { resolve: undefined, woken: false };
    r.line.push(t);
    if (r.line.length === 1 && r.n === 0) t.woken = true;
    return t;
  }

  /** Resolves once `t` is at the head of its line and the route may have room for it. */
  ready(t: Ticket): Promise<void> {
    if (t.woken) {
      t.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      t.resolve = resolve;
    });
  }

  /**
   * For the head ticket, once ready: takes the route to `dest` when it is free or goes
   * there already (true: the frame goes, settle it with `leave`; the next ticket is woken
   * to try the same), else false (wait for `ready` again).
   */
  take(target: string, t: Ticket, dest: string): boolean {
    const r = this.routes.get(target);
    if (r === undefined || r.line[0] !== t) return false;
    if (r.n > 0 && r.dest !== dest) return false;
    r.line.shift();
    r.dest = dest;
    r.n++;
    wake(r.line[0]);
    return true;
  }

  /** Leaves the line without sending (the frame is held, delivered here, or failed). */
  pass(target: string, t: Ticket): void {
    const r = this.routes.get(target);
    if (r === undefined) return;
    const i = r.line.indexOf(t);
    if (i < 0) return;
    r.line.splice(i, 1);
    if (i === 0 && r.n === 0) {
      if (r.line.length > 0) wake(r.line[0]);
      else this.drop(target, r);
    }
  }

  /** One frame on `target`'s route settled. */
  leave(target: string): void {
    const r = this.routes.get(target);
    if (r === undefined) return;
    if (--r.n > 0) return;
    if (r.line.length > 0) wake(r.line[0]);
    else this.drop(target, r);
  }

  /**
   * While frames to `target` are unsettled or waiting: a promise of the moment none are;
   * undefined when there are none.
   */
  idle(target: string): Promise<void> | undefined {
    if (this.routes.size === 0) return undefined;
    const r = this.routes.get(target);
    if (r === undefined) return undefined;
    if (r.idle === undefined) {
      let resolve!: () => void;
      const promise = new Promise<void>((res) => {
        resolve = res;
      });
      r.idle = { promise, resolve };
    }
    return r.idle.promise;
  }

  private drop(target: string, r: Route): void {
    if (this.routes.get(target) === r) this.routes.delete(target);
    r.idle?.resolve();
  }
}

/**
 * An envelope that arrived as a cluster frame. When the runtime node finds its target on
 * another node (at once, or later: the actor's shard moved while it waited in the mailbox),
 * it hands it back to the `cluster` processor, which forwards the frame as it came.
 */
export class FrameEnvelope {
  /** Set once the frame was forwarded and stored there. */
  forwarded = false;

  constructor(
    readonly id: string,
    readonly target: string,
    readonly event: ActorEvent,
    readonly frame: ClusterFrame,
    /** The node the frame came from. */
    readonly from: string,
    /** The node that first sent it. */
    readonly node: string,
  ) {}
}
