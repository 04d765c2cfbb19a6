/**
 * Subscriptions: catch up from the log, then live, with no gap and no duplicate at the
 * switch, and bounded memory whatever the subscriber's speed.
 *
 * A subscription keeps one cursor: the next position (`$all`) or version (a stream) it
 * has not handed to its sink. Catching up, it reads pages from the store and hands them
 * over one message at a time, waiting whenever the sink is full. Once a read reaches the
 * store's end, it checks in the same turn of the event loop that nothing was committed
 * since and registers for live events: the store publishes each commit synchronously, so
 * the first live event is the first one after the cursor.
 *
 * Live events wait in a queue bounded by count and bytes. When a slow sink lets the queue
 * pass either bound, the queue is dropped and the subscription falls back to catching up
 * from its cursor, reading from disk at the sink's pace; it switches to live again when it
 * reaches the end. The server's memory per subscription is therefore at most the live
 * queue, one page and the sink's own buffer.
 */
import type { PlexusError } from '../core/errors.js';
import { ChronactaCode, chronactaError, fromStorage } from './errors.js';
import type { EventStore } from './store.js';
import type { RecordedEvent, SubscriptionMessage, SubscriptionTarget } from './types.js';
import { checkBig, checkStream, checkTypes } from './validate.js';

/** Where a subscription delivers: a gRPC stream, or anything that can say it is full. */
export interface SubscriptionSink {
  /** Takes one message; false when its buffer is full (the message is still taken). */
  write(msg: SubscriptionMessage): boolean;
  /** Resolves once the sink can take more, or once it is closed. */
  drained(): Promise<void>;
  readonly closed: boolean;
}

export interface SubscriptionLimits {
  /** Live events waiting for the sink before falling back to catching up (default 1024). */
  readonly liveQueueEvents?: number;
  /** Bytes of data and metadata of those events (default 4 MiB). */
  readonly liveQueueBytes?: number;
  /** Events per catch-up read (default 256). */
  readonly pageSize?: number;
}

export interface SubscriptionStats {
  mode: 'catchup' | 'live' | 'closed';
  delivered: number;
  /** Times the live queue overflowed and the subscription fell back to catching up. */
  fallbacks: number;
  /** Largest live queue seen, in events and in bytes. */
  maxQueued: number;
  maxQueuedBytes: number;
}

type Target =
  | { kind: 'stream'; stream: string; from: number | 'end' }
  | { kind: 'all'; from: number | 'end'; prefix: string; types: ReadonlySet<string> | undefined };

/** Checks a subscription target as given by a caller. */
export function checkTarget(t: SubscriptionTarget): Target {
  if (typeof t !== 'object' || t === null)
    throw chronactaError(ChronactaCode.BAD_INPUT, 'a subscription needs a target');
  const from = (v: unknown, what: string, min: bigint): number | 'end' => {
    if (v === undefined || v === 'start') return Number(min);
    if (v === 'end') return 'end';
    return checkBig(v, what, min) as number;
  };
  if ('all' in t && t.all === true) {
    if (t.streamPrefix !== undefined && typeof t.streamPrefix !== 'string') {
      throw chronactaError(ChronactaCode.BAD_INPUT, 'streamPrefix must be a string');
    }
    return {
      kind: 'all',
      from: from(t.fromPosition, 'fromPosition', 1n),
      prefix: t.streamPrefix ?? '',
      types: checkTypes(t.types),
    };
  }
  if ('stream' in t) {
    return {
      kind: 'stream',
      stream: checkStream(t.stream, { system: true }),
      from: from(t.fromVersion, 'fromVersion', 0n),
    };
  }
  throw chronactaError(ChronactaCode.BAD_INPUT, 'a subscription target is { stream } or { all: true }');
}

function sizeOf(ev: RecordedEvent): number {
  return ev.data.length + ev.metadata.length + 200;
}

export class Subscription {
  readonly stats: SubscriptionStats = { mode: 'catchup', delivered: 0, fallbacks: 0, maxQueued: 0, maxQueuedBytes: 0 };
  private cursor = 0;
  private queue: RecordedEvent[] = [];
  private queueBytes = 0;
  private unlisten: (() => void) | undefined;
  private wake: (() => void) | undefined;
  private fellBehind = false;
  private stopped = false;
  private failure: PlexusError | undefined;
  private readonly maxEvents: number;
  private readonly maxBytes: number;
  private readonly pageSize: number;

  constructor(
    private readonly store: EventStore,
    private readonly target: Target,
    private readonly sink: SubscriptionSink,
    limits: SubscriptionLimits = {},
  ) {
    this.maxEvents = limits.liveQueueEvents ?? 1024;
    this.maxBytes = limits.liveQueueBytes ?? 4 * 1024 * 1024;
    this.pageSize = limits.pageSize ?? 256;
  }

  /** Delivers until `close()`, the sink closes, or a failure (rethrown: a tombstoned stream, a closed store). */
  async run(): Promise<void> {
    try {
      this.cursor = this.start();
      while (!this.done()) {
        if (this.stats.mode === 'catchup') await this.catchUp();
        else await this.live();
      }
      if (this.failure) throw this.failure;
    } finally {
      this.stop();
    }
  }

  /** Ends the subscription; `run` returns. */
  close(): void {
    this.stopped = true;
    this.wake?.();
  }

  private done(): boolean {
    return this.stopped || this.sink.closed || this.failure !== undefined;
  }

  private stop(): void {
    this.stopped = true;
    this.stats.mode = 'closed';
    this.unlisten?.();
    this.unlisten = undefined;
    this.queue = [];
    this.queueBytes = 0;
  }

  private start(): number {
    const t = this.target;
    if (t.kind === 'all') return t.from === 'end' ? Number(this.store.lastPosition) + 1 : t.from;
    return t.from === 'end' ? Number(this.store.streamInfo(t.stream).lastVersion) + 1 : t.from;
  }

  /** The committed end, as a cursor value: nothing at or past it exists yet. */
  private end(): number {
    const t = this.target;
    if (t.kind === 'all') return Number(this.store.lastPosition) + 1;
    return Number(this.store.streamInfo(t.stream).lastVersion) + 1;
  }

  private async send(msg: SubscriptionMessage): Promise<void> {
    const ok = this.sink.write(msg);
    if (msg.kind === 'event') {
      this.stats.delivered++;
      this.cursor = Number(this.target.kind === 'all' ? msg.event.position : msg.event.version) + 1;
    }
    if (!ok) await this.sink.drained();
  }

  private async catchUp(): Promise<void> {
    if (this.fellBehind) {
      this.fellBehind = false;
      await this.send({ kind: 'fellBehind', position: this.store.lastPosition });
      if (this.done()) return;
    }
    const t = this.target;
    let events: RecordedEvent[];
    let next: number;
    try {
      if (t.kind === 'all') {
        const r = await this.store.readAll({
          fromPosition: BigInt(this.cursor),
          maxCount: this.pageSize,
          ...(t.prefix ? { streamPrefix: t.prefix } : {}),
          ...(t.types ? { types: [...t.types] } : {}),
        });
        events = r.events;
        next = Number(r.nextPosition);
      } else {
        const r = await this.store.readStream(t.stream, { fromVersion: BigInt(this.cursor), maxCount: this.pageSize });
        events = r.events;
        next = r.end ? Math.max(this.cursor, Number(r.lastVersion) + 1) : Number(r.nextVersion);
      }
    } catch (e) {
      this.failure = fromStorage(e, 'subscription read');
      return;
    }
    for (const ev of events) {
      if (this.done()) return;
      await this.send({ kind: 'event', event: ev });
    }
    if (next > this.cursor) this.cursor = next;
    if (this.done()) return;
    // The switch: synchronous from the check to the registration, so no commit slips between.
    if (this.cursor >= this.end()) {
      this.stats.mode = 'live';
      this.unlisten = this.store.onCommit((ev) => this.onLive(ev));
      await this.send({ kind: 'caughtUp', position: this.store.lastPosition });
    }
  }

  private onLive(ev: RecordedEvent): void {
    const t = this.target;
    if (t.kind === 'all') {
      if (Number(ev.position) < this.cursor) return;
      if (t.prefix && !ev.stream.startsWith(t.prefix)) return;
      if (t.types && !t.types.has(ev.type)) return;
    } else {
      if (ev.stream === `$$${t.stream}` && ev.type === '$tombstone') {
        this.failure = chronactaError(ChronactaCode.STREAM_DELETED, `stream "${t.stream}" was deleted hard`, {
          stream: t.stream,
        });
        this.wake?.();
        return;
      }
      if (ev.stream !== t.stream || Number(ev.version) < this.cursor) return;
    }
    this.queue.push(ev);
    this.queueBytes += sizeOf(ev);
    if (this.queue.length > this.stats.maxQueued) this.stats.maxQueued = this.queue.length;
    if (this.queueBytes > this.stats.maxQueuedBytes) this.stats.maxQueuedBytes = this.queueBytes;
    if (this.queue.length > this.maxEvents || this.queueBytes > this.maxBytes) {
      // Too slow for live delivery: forget the queue, read it again from disk later.
      this.unlisten?.();
      this.unlisten = undefined;
      this.queue = [];
      this.queueBytes = 0;
      this.stats.mode = 'catchup';
      this.stats.fallbacks++;
      this.fellBehind = true;
    }
    this.wake?.();
  }

  private async live(): Promise<void> {
    const ev = this.queue.shift();
    if (!ev) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        if (this.queue.length > 0 || this.done() || this.stats.mode !== 'live') resolve();
      });
      this.wake = undefined;
      return;
    }
    this.queueBytes -= sizeOf(ev);
    await this.send({ kind: 'event', event: ev });
  }
}
