/** Charts, clocks and directories shared by the runtime tests. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type {
  ActorEvent,
  ActorHistory,
  Chart,
  Clock,
  EventIOProcessor,
  JournalAppendOptions,
  JournalStorage,
  JsonValue,
  MacrostepEntry,
  Outgoing,
  Send,
  SnapshotEntry,
} from '../../ts/runtime/index.js';

/** A fresh temporary directory; `cleanup()` removes every one made. */
const made: string[] = [];
export async function tempDir(prefix = 'plexus-rt-'): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), prefix));
  made.push(d);
  return d;
}
export async function cleanup(): Promise<void> {
  for (const d of made.splice(0)) await rm(d, { recursive: true, force: true });
}

export interface CounterState {
  readonly count: number;
  /** Message ids in the order they were consumed. */
  readonly seen: string[];
  readonly errors: JsonValue[];
}

/**
 * A counter: `inc` adds `data.by` (default 1); `relay` sends `inc` to each IRI in
 * `data.to` (with `data.type` as processor type, `data.delay` as delay, send ids r0, r1, ...);
 * `error.communication` is recorded in `errors`. `calls` counts transitions run.
 */
export function counterChart(): Chart<CounterState> & { calls: number } {
  const chart = {
    calls: 0,
    initial: (): CounterState => ({ count: 0, seen: [], errors: [] }),
    transition(s: CounterState, e: ActorEvent, ctx: { messageId: string }) {
      chart.calls++;
      const seen = [...s.seen, ctx.messageId];
      const d = (e.data ?? {}) as Record<string, JsonValue>;
      if (e.name === 'inc') return { state: { ...s, count: s.count + (Number(d.by) || 1), seen } };
      if (e.name === 'relay') {
        const to = (d.to as string[]) ?? [];
        const sends: Send[] = to.map((t, i) => ({
          id: `r${i}`,
          target: t,
          event: 'inc',
          ...(typeof d.type === 'string' ? { type: d.type } : {}),
          ...(typeof d.delay === 'number' ? { delay: d.delay } : {}),
        }));
        return { state: { ...s, seen }, sends };
      }
      if (e.name === 'error.communication') return { state: { ...s, seen, errors: [...s.errors, e.data ?? null] } };
      if (e.name === 'boom') throw new Error('boom');
      if (e.name === 'reply' && e.origin)
        return { state: { ...s, seen }, sends: [{ target: e.origin, event: 'answer', data: s.count }] };
      return { state: { ...s, seen } };
    },
  };
  return chart;
}

/** A clock whose time moves only by `advance`. */
export class ManualClock implements Clock {
  time = 1_700_000_000_000;
  private timers: { at: number; fn: () => void; id: number }[] = [];
  private next = 1;
  now(): number {
    return this.time;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.next++;
    this.timers.push({ at: this.time + ms, fn, id });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t.id !== handle);
  }
  get pending(): number {
    return this.timers.length;
  }
  advance(ms: number): void {
    this.time += ms;
    for (;;) {
      const due = this.timers.filter((t) => t.at <= this.time).sort((a, b) => a.at - b.at)[0];
      if (!due) return;
      this.timers = this.timers.filter((t) => t !== due);
      due.fn();
    }
  }
}

/**
 * A JournalStorage around another whose appends, once durable, wait for `release()` when
 * the gate is closed; `log` records the order of events ("append-start", "append-done").
 */
export class GatedJournal implements JournalStorage {
  closedGate = false;
  private waiting: (() => void)[] = [];
  readonly log: string[];
  constructor(
    readonly inner: JournalStorage,
    log: string[] = [],
  ) {
    this.log = log;
  }
  get shardCount(): number {
    return this.inner.shardCount;
  }
  get inFlight(): number {
    return this.waiting.length;
  }
  async append(iri: string, entry: MacrostepEntry, opts: JournalAppendOptions): Promise<void> {
    this.log.push(`append-start ${iri} ${entry.messageId}`);
    await this.inner.append(iri, entry, opts);
    if (this.closedGate) await new Promise<void>((r) => this.waiting.push(r));
    this.log.push(`append-done ${iri} ${entry.messageId}`);
  }
  release(): void {
    for (const r of this.waiting.splice(0)) r();
  }
  snapshot(iri: string, entry: SnapshotEntry, opts?: { epoch?: bigint }): Promise<void> {
    return this.inner.snapshot(iri, entry, opts);
  }
  history(iri: string): Promise<ActorHistory> {
    return this.inner.history(iri);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

/** A processor that records what it is given and answers with `behave` (default: accept). */
export function probe(
  type: string,
  log: string[] = [],
  behave: (o: Outgoing) => Promise<void> = async () => {},
): EventIOProcessor & { readonly sent: Outgoing[] } {
  const sent: Outgoing[] = [];
  return {
    type,
    sent,
    send(o: Outgoing) {
      sent.push(o);
      log.push(`send ${o.envelope.id}`);
      return behave(o);
    },
  };
}

/** The current state of an active actor (undefined members when it is not active). */
export function stateOf<T>(
  node: { activation(iri: string): { currentState: unknown } | undefined },
  iri: string,
): Partial<T> {
  return (node.activation(iri)?.currentState ?? {}) as Partial<T>;
}
