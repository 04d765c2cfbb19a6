/**
 * Runs an XState v5 machine as a chart. Transitions are XState's pure `transition` and
 * `initialTransition`: no actor is started, no action is executed. The journaled state is
 * the machine's persisted snapshot (`value`, `context`, `status`), so the context must be
 * JSON. Effects are sends: an action made with `sendEvent(...)` (an XState `emit` of a
 * `plexus.send` event) becomes a `Send`, and a delayed `raise` becomes a delayed send to
 * the actor itself. Other actions are not run (a chart has no other effects). Invoked or
 * spawned children and history states are not kept across macrosteps.
 */
import { type AnyStateMachine, emit, initialTransition, transition } from 'xstate';
import type { ActorEvent, Chart, JsonValue, Send, Step } from './types.js';

/** The type of the emitted event that `sendEvent` makes. */
export const PLEXUS_SEND = 'plexus.send';

/** What `sendEvent` takes: the fields of a `Send`, with the processor type as `processor`. */
export interface SendSpec {
  readonly target?: string;
  readonly event: string;
  readonly data?: JsonValue;
  readonly id?: string;
  /** The Event I/O Processor type (`Send.type`); absent: routed by placement. */
  readonly processor?: string;
  readonly delay?: number;
}

/** The event object an XState machine sees for an actor event. */
export interface XEvent {
  readonly type: string;
  readonly data?: JsonValue;
  readonly sendid?: string;
  readonly origin?: string;
  readonly origintype?: string;
  readonly originverified?: boolean;
}

/**
 * An XState action that sends: `sendEvent({ target: 'vt:billing/1', event: 'charge', data })`
 * or with a function of `{ context, event }`.
 */
// biome-ignore lint/suspicious/noExplicitAny: XState's action argument types depend on the machine
export function sendEvent(spec: SendSpec | ((args: { context: any; event: any }) => SendSpec)): any {
  // biome-ignore lint/suspicious/noExplicitAny: as above
  return emit((args: any) => {
    const s = typeof spec === 'function' ? spec(args) : spec;
    return { ...s, type: PLEXUS_SEND };
  });
}

/** The persisted form of a machine snapshot kept as the actor's state. */
interface PersistedState {
  readonly value: JsonValue;
  readonly context: JsonValue;
  readonly status: string;
  readonly output?: JsonValue;
}

function persist(machine: AnyStateMachine, snap: unknown): PersistedState {
  // biome-ignore lint/suspicious/noExplicitAny: the persisted snapshot is plain data
  const p = machine.getPersistedSnapshot(snap as any) as any;
  const out: PersistedState = { value: p.value, context: p.context ?? {}, status: p.status };
  return p.output === undefined ? out : { ...out, output: p.output };
}

function toXEvent(e: ActorEvent): XEvent {
  const out: Record<string, unknown> = { type: e.name };
  if (e.data !== undefined) out.data = e.data;
  if (e.sendid !== undefined) out.sendid = e.sendid;
  if (e.origin !== undefined) out.origin = e.origin;
  if (e.origintype !== undefined) out.origintype = e.origintype;
  if (e.originverified !== undefined) out.originverified = e.originverified;
  return out as unknown as XEvent;
}

function sendsOf(actions: readonly { type: string; params?: unknown }[]): Send[] {
  const sends: Send[] = [];
  for (const a of actions) {
    const params = (a.params ?? {}) as { event?: Record<string, unknown>; delay?: unknown };
    if (a.type === 'xstate.emit' && params.event?.type === PLEXUS_SEND) {
      const { type: _t, processor, ...rest } = params.event as unknown as SendSpec & { type: string };
      sends.push(processor === undefined ? (rest as Send) : ({ ...rest, type: processor } as Send));
    } else if (a.type === 'xstate.raise' && typeof params.delay === 'number' && params.delay > 0) {
      const ev = params.event as { type: string; data?: JsonValue } | undefined;
      if (ev?.type) {
        sends.push(
          ev.data === undefined
            ? { event: ev.type, delay: params.delay }
            : { event: ev.type, data: ev.data, delay: params.delay },
        );
      }
    }
  }
  return sends;
}

/** A chart running `machine`; `input` is passed to the machine's initial transition. */
export function xstateChart(machine: AnyStateMachine, opts: { readonly input?: unknown } = {}): Chart<PersistedState> {
  return {
    initial(): PersistedState {
      // biome-ignore lint/suspicious/noExplicitAny: input type depends on the machine
      const [snap] = (initialTransition as any)(machine, opts.input);
      return persist(machine, snap);
    },
    transition(state: PersistedState, event: ActorEvent): Step<PersistedState> {
      const snap = machine.resolveState({
        value: state.value as never,
        context: state.context as never,
        status: state.status as never,
        ...(state.output === undefined ? {} : { output: state.output as never }),
      });
      const [next, actions] = transition(machine, snap, toXEvent(event) as never);
      return { state: persist(machine, next), sends: sendsOf(actions as { type: string; params?: unknown }[]) };
    },
  };
}
