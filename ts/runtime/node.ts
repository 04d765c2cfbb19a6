/**
 * The runtime node: charts by IRI prefix, activations on first message, routing by
 * placement, Event I/O Processors by send type, `error.communication` on failed sends,
 * and a draining stop. Built with `Node.builder(storage)...build()` (docs/runtime.md).
 */
import { MAX_IRI_BYTES, MAX_MESSAGE_ID_BYTES } from '../codec/journal-record.js';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { Condition } from '../core/watermark.js';
import { Activation, type ActorHost, type Inbound, type OutboxItem } from './actor.js';
import { systemClock } from './clock.js';
import { eventOf } from './entries.js';
import { RuntimeCode, runtimeError } from './errors.js';
import {
  type ActorEvent,
  type Chart,
  type Clock,
  DEFAULT_RUNTIME_CONFIG,
  type DeliverOptions,
  type DeliverResult,
  type Envelope,
  type EventIOProcessor,
  type JournalStorage,
  type JsonValue,
  type MacrostepEntry,
  type NodeHandle,
  type Placement,
  type RuntimeConfig,
  type Send,
} from './types.js';

/** Placement of a node that runs every actor itself. */
export const allLocal: Placement = { decide: () => ({ kind: 'local' }) };

/** The event a sender gets when one of its sends failed. */
export const ERROR_COMMUNICATION = 'error.communication';

interface Held {
  readonly inbound: Inbound;
  readonly opts: DeliverOptions;
  /** A send of a local actor's outbox (it stays journaled if the node stops meanwhile). */
  readonly fromSend: boolean;
}

interface Reply {
  resolve(e: ActorEvent): void;
}

export class NodeBuilder {
  private placementValue: Placement = allLocal;
  private readonly processors: EventIOProcessor[] = [];
  private readonly charts: [string, Chart<unknown, ActorEvent>][] = [];
  private clockValue: Clock = systemClock;
  private configValue: Partial<RuntimeConfig> = {};
  private idValue = 'node';
  private observer?: (iri: string, entry: MacrostepEntry) => void;
  private readonly schemes = new Map<string, string>();

  constructor(private readonly storage: JournalStorage) {}

  /**
   * Sends without a `type` whose target has this IRI scheme (e.g. `did`) and no chart on this
   * node go to the processor of `type` (e.g. `didcomm`), as if the send named it.
   */
  routeScheme(scheme: string, type: string): this {
    if (typeof scheme !== 'string' || !/^[A-Za-z][A-Za-z0-9+.-]*$/.test(scheme) || typeof type !== 'string') {
      throw runtimeError(RuntimeCode.badInput, 'routeScheme(scheme, type) takes an IRI scheme and a processor type');
    }
    this.schemes.set(scheme.toLowerCase(), type);
    return this;
  }

  /** Where actors live (default: all local). */
  placement(p: Placement): this {
    this.placementValue = p;
    return this;
  }

  /** The processor for remote actors (type `cluster`), or any other processor. */
  transport(p: EventIOProcessor): this {
    return this.processor(p);
  }

  /** Adds an Event I/O Processor for sends of its `type`. */
  processor(p: EventIOProcessor): this {
    if (typeof p?.type !== 'string' || typeof p.send !== 'function') {
      throw runtimeError(RuntimeCode.badInput, 'a processor needs a string `type` and a `send` function');
    }
    this.processors.push(p);
    return this;
  }

  /** Runs actors whose IRI starts with `prefix` with `chart` (the longest prefix wins). */
  // biome-ignore lint/suspicious/noExplicitAny: charts of any state type are registered side by side
  chart(prefix: string, chart: Chart<any, any>): this {
    if (typeof prefix !== 'string' || typeof chart?.transition !== 'function' || typeof chart.initial !== 'function') {
      throw runtimeError(
        RuntimeCode.badInput,
        'chart(prefix, chart) takes a string and an object with initial and transition',
      );
    }
    this.charts.push([prefix, chart]);
    return this;
  }

  clock(c: Clock): this {
    this.clockValue = c;
    return this;
  }

  config(c: Partial<RuntimeConfig>): this {
    this.configValue = { ...this.configValue, ...c };
    return this;
  }

  /** The node's name, used in reply addresses of `ask` (default `node`). */
  id(name: string): this {
    this.idValue = name;
    return this;
  }

  /** Observes every durable macrostep (metrics, tests). */
  onMacrostep(fn: (iri: string, entry: MacrostepEntry) => void): this {
    this.observer = fn;
    return this;
  }

  build(): Node {
    const config = { ...DEFAULT_RUNTIME_CONFIG, ...this.configValue };
    for (const [k, v] of Object.entries(config)) {
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
        throw runtimeError(RuntimeCode.badInput, `config ${k} must be a non-negative integer, got ${String(v)}`);
      }
    }
    if (config.mailboxBound < 1) throw runtimeError(RuntimeCode.badInput, 'config mailboxBound must be at least 1');
    const node = new Node(
      this.storage,
      this.placementValue,
      new Map(this.processors.map((p) => [p.type, p])),
      [...this.charts].sort((a, b) => b[0].length - a[0].length),
      this.clockValue,
      config,
      this.idValue,
      this.observer,
      new Map(this.schemes),
    );
    for (const p of this.processors) p.attach?.(node);
    return node;
  }
}

export class Node implements NodeHandle {
  static builder(storage: JournalStorage): NodeBuilder {
    return new NodeBuilder(storage);
  }

  private readonly actors = new Map<string, Activation>();
  private readonly held = new Map<string, Held[]>();
  private readonly replies = new Map<string, Reply>();
  private readonly bound = new Map<string, Chart<unknown, ActorEvent>>();
  private readonly host: ActorHost;
  private unsubscribe?: () => void;
  private stopping = false;
  /** Set by `refuseActivations()`: a message for a local actor that is not active is held instead. */
  private refusing = false;
  /** Set once the drain is over: from then on nothing is placed, not even between actors. */
  private closing = false;
  private stopped?: Promise<void>;
  private asks = 0;
  /** Sends of local outboxes started and not yet completed. */
  private dispatching = 0;
  /** Notified whenever what `stop()` waits for may have changed (an actor settled or left, a send completed). */
  private readonly changed = new Condition();
  /** Counters: activations made, and error.communication events raised. */
  readonly stats = { activations: 0, communicationErrors: 0 };

  constructor(
    readonly storage: JournalStorage,
    private readonly placement: Placement,
    private readonly processors: Map<string, EventIOProcessor>,
    private readonly charts: readonly [string, Chart<unknown, ActorEvent>][],
    readonly clock: Clock,
    readonly config: RuntimeConfig,
    readonly id: string,
    observer?: (iri: string, entry: MacrostepEntry) => void,
    private readonly schemes: ReadonlyMap<string, string> = new Map(),
  ) {
    this.host = {
      storage,
      clock,
      config,
      epochOf: (iri) => placement.epochOf?.(iri),
      isLocal: (iri) => placement.decide(iri).kind === 'local',
      dispatch: (actor, item) => this.dispatch(actor, item),
      released: (actor, requeue) => this.released(actor, requeue),
      settled: () => this.changed.notify(),
      ...(observer ? { onMacrostep: observer } : {}),
    };
    this.unsubscribe = placement.subscribe?.(() => this.placementChanged());
  }

  /** What processors and a cluster call on this node (the node itself). */
  handle(): NodeHandle {
    return this;
  }

  /**
   * Binds a chart to one exact IRI after the node is built (federation binds a provisioned
   * actor's DID this way). An exact binding wins over every prefix. A second binding of the
   * same IRI to another chart is refused.
   */
  // biome-ignore lint/suspicious/noExplicitAny: charts of any state type are bound side by side
  bindChart(iri: string, chart: Chart<any, any>): void {
    if (typeof iri !== 'string' || iri.length === 0 || typeof chart?.transition !== 'function') {
      throw runtimeError(RuntimeCode.badInput, 'bindChart(iri, chart) takes a non-empty IRI and a chart');
    }
    const had = this.bound.get(iri);
    if (had !== undefined && had !== chart) {
      throw runtimeError(RuntimeCode.badInput, `${iri} is already bound to another chart`, { target: iri });
    }
    this.bound.set(iri, chart);
  }

  /** The chart for an IRI: an exact binding, else by longest prefix. */
  chartOf(iri: string): Chart<unknown, ActorEvent> | undefined {
    const exact = this.bound.get(iri);
    if (exact !== undefined) return exact;
    for (const [prefix, chart] of this.charts) if (iri.startsWith(prefix)) return chart;
    return undefined;
  }

  /** The activation of `iri`, when it is active (for tools and tests). */
  activation(iri: string): Activation | undefined {
    return this.actors.get(iri);
  }

  /** Active actors. */
  get activeCount(): number {
    return this.actors.size;
  }

  /**
   * Messages placement holds on this node: their target has no owner now, or messages of it
   * sent elsewhere are still on their way (for tools and tests).
   */
  get heldCount(): number {
    let n = 0;
    for (const list of this.held.values()) n += list.length;
    return n;
  }

  /**
   * Sends an event to an actor from outside any actor. Resolves once a macrostep of the
   * target consumed it durably (`processed`) or found it already journaled
   * (`duplicate`). `id` defaults to a fresh random id; pass one to make retries safe.
   */
  send(
    target: string,
    event: string | ActorEvent,
    opts: DeliverOptions & { readonly id?: string; readonly data?: JsonValue } = {},
  ): Promise<DeliverResult> {
    const ev: ActorEvent =
      typeof event === 'string'
        ? opts.data === undefined
          ? { name: event }
          : { name: event, data: opts.data }
        : event;
    return this.deliver({ id: opts.id ?? crypto.randomUUID(), target, event: ev }, opts);
  }

  /**
   * Sends an event and waits for a reply: a send of the target to the event's `origin`
   * (a reply address of this node). Rejects with PLX_RUNTIME_TIMEOUT after `timeoutMs`.
   */
  async ask(
    target: string,
    name: string,
    data?: JsonValue,
    opts: { readonly timeoutMs?: number } = {},
  ): Promise<ActorEvent> {
    const replyTo = `plexus-reply:${this.id}/${++this.asks}/${crypto.randomUUID()}`;
    const timeoutMs = opts.timeoutMs ?? 30_000;
    return new Promise<ActorEvent>((resolve, reject) => {
      const timer = this.clock.setTimeout(() => {
        this.replies.delete(replyTo);
        reject(
          runtimeError(RuntimeCode.timeout, `no reply from ${target} to ${name} within ${timeoutMs} ms`, { target }),
        );
      }, timeoutMs);
      this.replies.set(replyTo, {
        resolve: (e) => {
          this.clock.clearTimeout(timer);
          this.replies.delete(replyTo);
          resolve(e);
        },
      });
      const event: ActorEvent = data === undefined ? { name, origin: replyTo } : { name, data, origin: replyTo };
      this.deliver({ id: crypto.randomUUID(), target, event }).catch((e) => {
        this.clock.clearTimeout(timer);
        this.replies.delete(replyTo);
        reject(e);
      });
    });
  }

  /** Delivers an inbound message (from a caller, a processor or another actor of this node). */
  deliver(envelope: Envelope, opts: DeliverOptions = {}): Promise<DeliverResult> {
    if (this.stopping) {
      return Promise.reject(
        runtimeError(
          RuntimeCode.stopped,
          `node ${this.id} is stopping; message ${envelope?.id} to ${envelope?.target} was not taken`,
        ),
      );
    }
    return this.route(envelope, opts, false);
  }

  private route(envelope: Envelope, opts: DeliverOptions, internal: boolean, fromSend = false): Promise<DeliverResult> {
    const bad = checkEnvelope(envelope);
    if (bad !== undefined) return Promise.reject(bad);
    const reply = this.replies.get(envelope.target);
    if (reply !== undefined) {
      reply.resolve(envelope.event);
      return Promise.resolve('processed');
    }
    return new Promise<DeliverResult>((resolve, reject) => {
      this.place({ envelope, resolve, reject, taken: opts.taken }, opts, internal, fromSend);
    });
  }

  /**
   * Routes one message. A target's messages keep their order on this node across placement
   * changes: while its activation exists, every message goes into its mailbox (an activation
   * that placement moved away hands them all back, in order, and they are routed again from
   * there); while messages of the target are held, a new one goes after them.
   */
  private place(m: Inbound, opts: DeliverOptions, internal: boolean, fromSend = false, again = false): void {
    const target = m.envelope.target;
    if (this.closing) {
      // A send still in flight stays in its sender's journal and leaves from the next activation.
      m.reject(
        runtimeError(
          RuntimeCode.stopped,
          `node ${this.id} has stopped; message ${m.envelope.id} to ${target} was not taken`,
        ),
      );
      return;
    }
    const decision = this.placement.decide(target);
    if (decision.kind !== 'local') {
      const actor = this.actors.get(target);
      if (actor !== undefined) {
        // Behind the messages still in the mailbox of an activation placement moved away.
        if (actor.isClosing) void actor.closed.then(() => this.place(m, opts, internal, fromSend));
        else actor.offer(m, true);
        return;
      }
    }
    if (!again && this.held.size > 0 && decision.kind !== 'hold' && this.held.has(target)) this.releaseHeld(target);
    if (decision.kind === 'local' && this.placement.localAfter !== undefined) {
      // Messages of this target that this node sent elsewhere are still on their way: they go first.
      const after = this.placement.localAfter(m.envelope);
      if (after !== undefined) {
        const list = this.held.get(target);
        if (list === undefined) {
          this.held.set(target, [{ inbound: m, opts, fromSend }]);
          void after.then(() => this.releaseHeld(target));
        } else list.push({ inbound: m, opts, fromSend });
        if (fromSend) this.changed.notify();
        return;
      }
    }
    if (decision.kind === 'hold') {
      const list = this.held.get(target) ?? [];
      if (list.length >= this.config.mailboxBound && opts.whenFull !== 'wait' && !internal) {
        m.reject(mailboxFull(target, this.config.mailboxBound, 'held'));
        return;
      }
      list.push({ inbound: m, opts, fromSend });
      this.held.set(target, list);
      if (fromSend) this.changed.notify();
      return;
    }
    if (decision.kind === 'remote') {
      const p = this.processors.get('cluster');
      if (p === undefined) {
        m.reject(
          runtimeError(
            RuntimeCode.noProcessor,
            `${target} lives on node ${decision.node}, and this node has no 'cluster' processor to reach it`,
            { target, node: decision.node },
          ),
        );
        return;
      }
      const e = m.envelope;
      const send: Send = {
        type: 'cluster',
        target,
        event: e.event.name,
        ...(e.event.data === undefined ? {} : { data: e.event.data }),
      };
      p.send({ envelope: e, send, from: e.event.origin ?? '', node: decision.node }).then(
        () => m.resolve('processed'),
        (err) => m.reject(err),
      );
      return;
    }
    const chart = this.chartOf(target);
    if (chart === undefined) {
      m.reject(
        runtimeError(
          RuntimeCode.noChart,
          `no chart is registered for ${target}; register one with builder.chart(prefix, chart)`,
          {
            target,
          },
        ),
      );
      return;
    }
    let actor = this.actors.get(target);
    if (actor === undefined && this.refusing) {
      // Leaving: no new activation here. The message waits with the held ones and is routed
      // again when placement changes (the shard's next owner, once this node released it).
      const list = this.held.get(target) ?? [];
      list.push({ inbound: m, opts, fromSend });
      this.held.set(target, list);
      if (fromSend) this.changed.notify();
      return;
    }
    if (actor?.isClosing) {
      const closing = actor;
      void closing.closed.then(() => this.place(m, opts, internal, fromSend));
      return;
    }
    if (actor === undefined) {
      actor = new Activation(target, chart, this.host);
      this.actors.set(target, actor);
      this.stats.activations++;
      void actor.load();
    }
    if (actor.offer(m, opts.whenFull === 'wait' || internal)) return;
    m.reject(mailboxFull(target, this.config.mailboxBound, 'mailbox'));
  }

  /** Re-routes held messages (placement may now say local or remote). */
  placementChanged(): void {
    const held = [...this.held.entries()];
    this.held.clear();
    for (const [, list] of held) for (const h of list) this.place(h.inbound, h.opts, true, h.fromSend, true);
    for (const actor of this.actors.values()) {
      if (!actor.isClosing && !this.host.isLocal(actor.iri)) void actor.close('placement');
    }
    this.changed.notify();
  }

  /** Routes the held messages of `target` again, in order. */
  private releaseHeld(target: string): void {
    const list = this.held.get(target);
    if (list === undefined) return;
    this.held.delete(target);
    for (const h of list) this.place(h.inbound, h.opts, true, h.fromSend, true);
    this.changed.notify();
  }

  private released(actor: Activation, requeue: Inbound[]): void {
    if (this.actors.get(actor.iri) === actor) this.actors.delete(actor.iri);
    for (const m of requeue) this.place(m, {}, true);
    this.changed.notify();
  }

  /** The processor type for an untyped send to `target` by its IRI scheme, when it has no chart here. */
  private schemeType(target: string): string | undefined {
    if (this.schemes.size === 0) return undefined;
    const colon = target.indexOf(':');
    if (colon <= 0) return undefined;
    const type = this.schemes.get(target.slice(0, colon).toLowerCase());
    return type !== undefined && this.chartOf(target) === undefined ? type : undefined;
  }

  /** Starts one send of an actor's outbox (called after the macrostep's append is durable). */
  private dispatch(actor: Activation, item: OutboxItem): void {
    const s = item.send;
    const target = s.target ?? actor.iri;
    const type = s.type ?? this.schemeType(target);
    const envelope: Envelope = {
      id: item.messageId,
      target,
      event: {
        name: s.event,
        ...(s.data === undefined ? {} : { data: s.data }),
        ...(s.id === undefined ? {} : { sendid: s.id }),
        origin: actor.iri,
        origintype: type ?? 'local',
      },
    };
    let done: Promise<unknown>;
    this.dispatching++;
    if (type === undefined || type === 'local') {
      done = this.route(envelope, { whenFull: 'wait' }, true, true);
    } else {
      const p = this.processors.get(type);
      done =
        p === undefined
          ? Promise.reject(
              runtimeError(RuntimeCode.noProcessor, `no Event I/O Processor of type '${type}' is registered`, {
                type,
              }),
            )
          : p.send({ envelope, send: type === s.type ? s : { ...s, type }, from: actor.iri });
    }
    done.then(
      () => {
        this.dispatching--;
        actor.complete(item);
        this.changed.notify();
      },
      (err) => {
        this.dispatching--;
        this.communicationError(actor, item, target, err);
        this.changed.notify();
      },
    );
  }

  /** Delivers `error.communication` to the sender; the send completes once that is journaled. */
  private communicationError(actor: Activation, item: OutboxItem, target: string, err: unknown): void {
    this.stats.communicationErrors++;
    const reason = err instanceof Error ? err.message : String(err);
    const code = isPlexusError(err) ? err.code : undefined;
    const data: Record<string, JsonValue> = { reason, target, event: item.send.event };
    if (item.send.id !== undefined) data.sendid = item.send.id;
    if (code !== undefined) data.code = code;
    const event: ActorEvent = {
      name: ERROR_COMMUNICATION,
      data,
      ...(item.send.id === undefined ? {} : { sendid: item.send.id }),
      origintype: item.send.type ?? 'local',
    };
    this.dispatching++;
    const done = () => {
      this.dispatching--;
      actor.complete(item);
      this.changed.notify();
    };
    this.route({ id: `${item.messageId}!error`, target: actor.iri, event }, { whenFull: 'wait' }, true, true).then(
      done,
      done,
    );
  }

  /**
   * The first runtime step of leaving a cluster (ts/cluster/leave.ts): from now on no actor
   * is activated on this node. A message for a local actor that is not active is held (never
   * refused, never lost) and routed again when placement changes; messages for active actors
   * still go to their mailboxes, in order.
   */
  refuseActivations(): void {
    this.refusing = true;
  }

  /** Whether `refuseActivations()` was called. */
  get refusesActivations(): boolean {
    return this.refusing;
  }

  /**
   * Finishes the macrosteps in flight and deactivates every actor: waits (at most `timeoutMs`
   * by the node's clock) for every activation to settle, then closes each one, which waits
   * for a macrostep still running and writes a snapshot where macrosteps ran since the last.
   * Messages an activation had not taken go back to the node; with `refuseActivations()` they
   * are held. Resolves whether every activation had settled before the bound.
   */
  async finishMacrosteps(timeoutMs: number): Promise<boolean> {
    const settled = await this.waitChanged(() => {
      for (const a of this.actors.values()) if (!a.settled) return false;
      return true;
    }, timeoutMs);
    await Promise.all([...this.actors.values()].map((a) => a.close('stop')));
    return settled;
  }

  /**
   * Waits (at most `timeoutMs`) until every send of a local outbox started so far completed:
   * acknowledged by its processor, or failed and answered with `error.communication` to its
   * sender. Sends held by placement do not count (they stay journaled). Resolves whether the
   * outboxes emptied before the bound.
   */
  flushOutboxes(timeoutMs: number): Promise<boolean> {
    return this.waitChanged(() => this.dispatching <= this.heldSends(), timeoutMs);
  }

  /** Waits (at most `timeoutMs`) until no message is held: each went to an owner. Resolves whether it did. */
  releaseHeldMessages(timeoutMs: number): Promise<boolean> {
    return this.waitChanged(() => this.held.size === 0, timeoutMs);
  }

  private heldSends(): number {
    let n = 0;
    for (const list of this.held.values()) for (const h of list) if (h.fromSend) n++;
    return n;
  }

  /** Resolves `true` once `ready()` holds (tested at every change), `false` after `timeoutMs` by the node's clock. */
  private async waitChanged(ready: () => boolean, timeoutMs: number): Promise<boolean> {
    let late = false;
    const timer = this.clock.setTimeout(() => {
      late = true;
      this.changed.notify();
    }, timeoutMs);
    try {
      await this.changed.until(() => late || ready());
    } finally {
      this.clock.clearTimeout(timer);
    }
    return ready();
  }

  /**
   * Drains and stops: refuses new messages from outside, lets every queued message run
   * its macrostep and every send in flight complete (local sends included), deactivates
   * every actor (writing a snapshot where it ran macrosteps since its last one), rejects
   * messages still held by placement, and closes the processors. Delayed sends not yet
   * due stay in the journal and are sent by the next activation. The storage stays open:
   * close it after `stop()`.
   */
  stop(opts: { readonly timeoutMs?: number } = {}): Promise<void> {
    this.stopped ??= this.drain(opts.timeoutMs ?? 30_000);
    return this.stopped;
  }

  /**
   * Whether `stop()` is still draining: true from `stop()` until the wait for macrosteps and
   * sends ends (they all ended, or the deadline of the node's clock came); the actors are
   * deactivated after it.
   */
  get draining(): boolean {
    return this.stopping && !this.closing;
  }

  private async drain(timeoutMs: number): Promise<void> {
    this.stopping = true;
    let late = false;
    const busy = () => {
      for (const a of this.actors.values()) if (!a.settled) return true;
      let heldSends = 0;
      for (const list of this.held.values()) for (const h of list) if (h.fromSend) heldSends++;
      return this.dispatching > heldSends;
    };
    // Woken by the events that can end the drain, and by the node's clock at the deadline.
    const timer = this.clock.setTimeout(() => {
      late = true;
      this.changed.notify();
    }, timeoutMs);
    try {
      await this.changed.until(() => late || !busy());
    } finally {
      this.clock.clearTimeout(timer);
    }
    this.closing = true;
    await Promise.all([...this.actors.values()].map((a) => a.close('stop')));
    for (const list of this.held.values()) {
      for (const h of list) {
        h.inbound.reject(
          runtimeError(RuntimeCode.stopped, `node ${this.id} stopped while ${h.inbound.envelope.target} had no owner`),
        );
      }
    }
    this.held.clear();
    this.unsubscribe?.();
    for (const p of this.processors.values()) await p.close?.();
  }
}

function mailboxFull(target: string, bound: number, where: string): PlexusError {
  return runtimeError(
    RuntimeCode.mailboxFull,
    `the ${where} of ${target} holds ${bound} messages (mailboxBound); retry later or deliver with whenFull: 'wait'`,
    { target, bound },
  );
}

const utf8 = new TextEncoder();

/** Whether `s` takes more than `max` UTF-8 bytes (a UTF-16 unit takes at most 3: short strings need no encoding). */
function utf8Over(s: string, max: number): boolean {
  return s.length * 3 > max && utf8.encode(s).length > max;
}

function checkEnvelope(e: Envelope): PlexusError | undefined {
  if (typeof e !== 'object' || e === null)
    return runtimeError(RuntimeCode.badInput, 'deliver takes an envelope object');
  if (typeof e.target !== 'string' || e.target.length === 0 || utf8Over(e.target, MAX_IRI_BYTES)) {
    return runtimeError(RuntimeCode.badInput, `an envelope target must be an IRI of 1 to ${MAX_IRI_BYTES} UTF-8 bytes`);
  }
  if (typeof e.id !== 'string' || e.id.length === 0 || utf8Over(e.id, MAX_MESSAGE_ID_BYTES)) {
    return runtimeError(
      RuntimeCode.badInput,
      `a message id must be a string of 1 to ${MAX_MESSAGE_ID_BYTES} UTF-8 bytes`,
      {
        target: e.target,
      },
    );
  }
  if (eventOf(e.event) === undefined) {
    return runtimeError(
      RuntimeCode.badInput,
      `the event to ${e.target} needs a string name (and string sendid/origin if given)`,
    );
  }
  try {
    if (e.event.data !== undefined && JSON.stringify(e.event.data) === undefined) throw new TypeError('not JSON');
  } catch {
    return runtimeError(RuntimeCode.badInput, `the data of event ${e.event.name} to ${e.target} is not a JSON value`);
  }
  return undefined;
}
