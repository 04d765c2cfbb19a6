/**
 * Charts every cluster node runs out of the box (`plexus cluster node`, the demo, the
 * benchmark and the tests), so that a fresh cluster can be exercised without application
 * code:
 * - `vt:counter/<name>`: counts `inc` events; when the event has an origin and `data.reply`
 *   is true it sends `counted` with the count back to the origin.
 * - `vt:relay/<name>`: on `relay` with `data: { to, event, data?, id? }` sends that event
 *   to `to` (an actor send, through placement); remembers every `error.communication` it got
 *   and every other event's name count, and answers `report` to the origin with them.
 */
import type { Chart, JsonValue } from '../runtime/types.js';

export interface CounterState {
  readonly n: number;
}

export const counterChart: Chart<CounterState> = {
  initial: () => ({ n: 0 }),
  transition(state, event) {
    if (event.name !== 'inc') return { state };
    const n = state.n + 1;
    const d = event.data as { reply?: boolean } | undefined;
    if (d?.reply === true && event.origin !== undefined) {
      return { state: { n }, sends: [{ target: event.origin, event: 'counted', data: { n } }] };
    }
    return { state: { n } };
  },
};

export interface RelayState {
  readonly sent: number;
  readonly got: Readonly<Record<string, number>>;
  readonly errors: readonly { readonly code?: string; readonly sendid?: string; readonly target?: string }[];
}

export const relayChart: Chart<RelayState> = {
  initial: () => ({ sent: 0, got: {}, errors: [] }),
  transition(state, event) {
    if (event.name === 'relay') {
      const d = (event.data ?? {}) as { to?: string; event?: string; data?: JsonValue; id?: string };
      if (typeof d.to !== 'string' || typeof d.event !== 'string') return { state };
      return {
        state: { ...state, sent: state.sent + 1 },
        sends: [
          {
            target: d.to,
            event: d.event,
            ...(d.data === undefined ? {} : { data: d.data }),
            ...(typeof d.id === 'string' ? { id: d.id } : {}),
          },
        ],
      };
    }
    if (event.name === 'report') {
      const data = { sent: state.sent, got: state.got, errors: state.errors } as unknown as JsonValue;
      return {
        state,
        sends: event.origin === undefined ? [] : [{ target: event.origin, event: 'report.done', data }],
      };
    }
    if (event.name === 'error.communication') {
      const d = (event.data ?? {}) as { code?: string; sendid?: string; target?: string };
      const e: { code?: string; sendid?: string; target?: string } = {};
      if (typeof d.code === 'string') e.code = d.code;
      if (typeof d.sendid === 'string') e.sendid = d.sendid;
      if (typeof d.target === 'string') e.target = d.target;
      return { state: { ...state, errors: [...state.errors, e].slice(-100) } };
    }
    return { state: { ...state, got: { ...state.got, [event.name]: (state.got[event.name] ?? 0) + 1 } } };
  },
};

/** The built-in charts by IRI prefix. */
export const BUILTIN_CHARTS: Readonly<Record<string, Chart<CounterState> | Chart<RelayState>>> = {
  'vt:counter/': counterChart,
  'vt:relay/': relayChart,
};
