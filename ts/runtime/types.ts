/**
 * The seams of the virtual-actor runtime (docs/runtime.md). A node runs charts (pure
 * `(state, event) -> (state, sends)` objects) as virtual actors addressed by IRI. It
 * journals every macrostep through `JournalStorage`, asks `Placement` where an actor
 * lives, and hands sends to `EventIOProcessor`s by send type. Time comes from `Clock`.
 * A cluster implements `JournalStorage` (per-shard stores, fencing epochs), `Placement`
 * (shard leases) and a `cluster` processor (its transport) against these types only.
 */
import type { JsonValue } from '../codec/journal-record.js';
import type { ClockTimers } from '../core/clock.js';

export type { JsonValue };

/** An event as a chart sees it: a name, data, and where it came from. */
export interface ActorEvent {
  /** The event name, e.g. `order.placed`, `error.communication`. */
  readonly name: string;
  readonly data?: JsonValue;
  /** The sender's send id, when the event came from a `<send>` that had one. */
  readonly sendid?: string;
  /** The sending actor's IRI, when known. */
  readonly origin?: string;
  /** The processor type it arrived through (`local`, `cluster`, ...). */
  readonly origintype?: string;
  /**
   * Set (true) by a transport that verified `origin` before delivery, e.g. federation's
   * admission pipeline for a sender DID; journaled with the event, so replay never verifies again.
   */
  readonly originverified?: boolean;
}

/** A message addressed to an actor: the event plus its globally unique message id. */
export interface Envelope {
  /** Deduplication key: the same id is processed at most once by the target actor. */
  readonly id: string;
  readonly target: string;
  readonly event: ActorEvent;
}

/** An outgoing send produced by a transition. */
export interface Send {
  /** The send id a chart may name (SCXML `id`); it comes back in `error.communication`. */
  readonly id?: string;
  /**
   * The Event I/O Processor type (`local`, `cluster`, `didcomm`, ...). Absent: the node
   * routes by placement (local actor, or the `cluster` processor for a remote one).
   */
  readonly type?: string;
  /** The target actor IRI; absent means the sending actor itself. */
  readonly target?: string;
  /** The event name. */
  readonly event: string;
  readonly data?: JsonValue;
  /** Milliseconds to wait before sending (a delayed send survives restarts). */
  readonly delay?: number;
}

/** What one transition returns. */
export interface Step<S> {
  readonly state: S;
  readonly sends?: readonly Send[];
}

/**
 * A chart: deterministic and pure. `transition` must not read clocks, randomness or
 * anything outside its arguments, and must not perform effects: effects are sends.
 * The state must survive JSON (it is journaled as JSON).
 */
export interface Chart<S = JsonValue, E extends ActorEvent = ActorEvent> {
  /** The state of a fresh actor; `iri` is the actor's address. */
  initial(iri: string): S;
  transition(state: S, event: E, ctx: StepContext): Step<S>;
  /**
   * `state` (default): each macrostep record carries the new state. `events`: records
   * carry the consumed event only and replay runs `transition` again (its sends are
   * dropped, since they were journaled when first made).
   */
  readonly journal?: 'state' | 'events';
  /** Turns the journaled JSON back into a state (default: taken as is). */
  revive?(json: JsonValue): S;
}

/** What a transition may know besides state and event; deterministic under replay. */
export interface StepContext {
  readonly self: string;
  /** The message id of the event being processed. */
  readonly messageId: string;
  /** The actor position this macrostep will take. */
  readonly seq: number;
}

// ---- the journal ----------------------------------------------------------------------

/** One macrostep as the runtime journals it. */
export interface MacrostepEntry {
  readonly seq: number;
  readonly time: number;
  readonly dispatchedThrough: number;
  readonly messageId: string;
  readonly event: ActorEvent;
  readonly state?: JsonValue;
  readonly sends: readonly Send[];
}

/** An unfinished send kept in a snapshot. */
export interface PendingEntry {
  readonly seq: number;
  readonly index: number;
  readonly send: Send;
}

export interface SnapshotEntry {
  /** The actor position the snapshot covers (its last macrostep). */
  readonly seq: number;
  readonly time: number;
  readonly dispatchedThrough: number;
  readonly state: JsonValue;
  /** The newest message ids, oldest first (the dedup window). */
  readonly dedup: readonly string[];
  readonly pending: readonly PendingEntry[];
}

/** What replay needs: the newest snapshot, then every macrostep after it, in order. */
export interface ActorHistory {
  readonly snapshot?: SnapshotEntry;
  readonly records: readonly MacrostepEntry[];
  /** The actor's last position (0 for an actor never written). */
  readonly lastSeq: number;
}

export interface JournalAppendOptions {
  /**
   * Compare-and-set on the actor's journal position: the append goes ahead only if the
   * actor's last seq (counting appends in flight) is this; else `PLX_JOURNAL_CONFLICT`.
   */
  readonly expectedSeq: number;
  /** Fencing epoch of the shard's owner; a lower epoch than accepted fails `PLX_JOURNAL_FENCED`. */
  readonly epoch?: bigint;
}

/**
 * The journal seam: per-shard stores, each record one atomic append. The single-node
 * implementation is `LogJournalStorage` (one log-engine store per `shardOf(iri)`); a
 * cluster wraps or replaces it to route appends to the shard's owner store and stamp the
 * lease epoch. Every implementation passes test/compliance/journal-storage.suite.ts.
 */
export interface JournalStorage {
  /** The shard count (a power of two); actor IRIs map to shards by `shardOf` of ts/core. */
  readonly shardCount: number;
  /** Appends one macrostep record for `iri`; resolves once durable. */
  append(iri: string, entry: MacrostepEntry, opts: JournalAppendOptions): Promise<void>;
  /** Writes a snapshot of `iri` (seq must be the actor's last seq); replay starts from the newest. */
  snapshot(iri: string, entry: SnapshotEntry, opts?: { readonly epoch?: bigint }): Promise<void>;
  /** The actor's newest snapshot and every macrostep after it. */
  history(iri: string): Promise<ActorHistory>;
  /** Waits for pending appends and releases the stores. */
  close(): Promise<void>;
}

// ---- placement, processors, time ------------------------------------------------------

/** Where an actor lives now. */
export type PlacementDecision =
  | { readonly kind: 'local' }
  | { readonly kind: 'remote'; readonly node: string }
  | { readonly kind: 'hold' };

/**
 * Asked before the runtime delivers a message to an actor or activates it. `local`: this
 * node runs it. `remote`: the `cluster` processor carries the message to `node`. `hold`:
 * no live owner; the message waits and the actor is not activated until `subscribe`
 * reports a change.
 */
export interface Placement {
  decide(iri: string): PlacementDecision;
  /** Called when decisions may have changed (lease gained or lost); returns an unsubscribe. */
  subscribe?(listener: () => void): () => void;
  /** The fencing epoch to stamp on appends of this actor's shard (a cluster's lease epoch). */
  epochOf?(iri: string): bigint | undefined;
  /**
   * For a message placed `local`: a promise when it must wait before entering the mailbox
   * (messages of its target this node sent elsewhere are still on their way: they go first);
   * the node holds it, in order, until the promise resolves. Undefined: it goes at once.
   */
  localAfter?(envelope: Envelope): Promise<void> | undefined;
}

/** A send as a processor receives it: the envelope, the processor type and the send id. */
export interface Outgoing {
  readonly envelope: Envelope;
  readonly send: Send;
  /** The sending actor's IRI. */
  readonly from: string;
  /** Where placement put the target, when the node routed the send itself. */
  readonly node?: string;
}

/**
 * An SCXML Event I/O Processor by send type. `send` resolves once the message is
 * accepted by its receiver (durably, or as a duplicate), and rejects when delivery has
 * failed for good; the sender then gets `error.communication` with the send id and the
 * reason (the rejection's message, or its `code`).
 */
export interface EventIOProcessor {
  readonly type: string;
  send(out: Outgoing): Promise<void>;
  /** Called once by `Node.build()` with the node that uses the processor. */
  attach?(node: NodeHandle): void;
  /** Called by `node.stop()` after the outboxes are flushed. */
  close?(): Promise<void>;
}

/** What a processor or a cluster may call on a node. */
export interface NodeHandle {
  /** Delivers an inbound message; resolves once processed durably (or known duplicate). */
  deliver(envelope: Envelope, opts?: DeliverOptions): Promise<DeliverResult>;
  /** Re-asks placement for held messages and idle actors (a cluster calls it on lease changes). */
  placementChanged(): void;
}

export interface DeliverOptions {
  /** When the target's mailbox is full: `refuse` (PLX_RUNTIME_MAILBOX_FULL) or `wait`. Default `refuse`. */
  readonly whenFull?: 'refuse' | 'wait';
  /**
   * Called once the message holds its place in the target's mailbox (not parked behind a
   * full one), before the promise resolves: a message delivered after that runs after it.
   * A transport reads a stream's next frame then, rather than once the macrostep is durable.
   */
  readonly taken?: () => void;
}

/** `processed`: a macrostep consumed it; `duplicate`: its id was already journaled. */
export type DeliverResult = 'processed' | 'duplicate';

/** Injected time: milliseconds, and timers that the node cancels on stop (the core clock shape). */
export type Clock = ClockTimers;

/** Runtime settings; ClusterConfig names and defaults where they overlap. */
export interface RuntimeConfig {
  /** A mailbox holds at most this many messages (default 1024). */
  readonly mailboxBound: number;
  /** Message ids each actor remembers for deduplication (default 1024). */
  readonly dedupWindow: number;
  /** Write a snapshot after this many macrosteps since the last one (default 100; 0 = never). */
  readonly snapshotEvery: number;
  /** Deactivate an actor idle this long, in ms (default 60 000; 0 = never). */
  readonly idleAfter: number;
}

export const DEFAULT_RUNTIME_CONFIG: RuntimeConfig = {
  mailboxBound: 1024,
  dedupWindow: 1024,
  snapshotEvery: 100,
  idleAfter: 60_000,
};
