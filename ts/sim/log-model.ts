/**
 * The sequential specification of an append-only log: `append(value)` returns the 1-based
 * position the value took (with `expectedLast`, only when the log held that many values, and
 * is refused with `conflict` otherwise); `read(limit?)` returns the first `limit` values (all of them
 * without a limit).
 *
 * States are interned in a trie (one node per distinct sequence of appended values), so the
 * checker's cache key is a small number however long the log grows. Make a fresh model for
 * each check with `appendLogModel()`.
 */
import type { Model } from './linearizability.js';

export type LogInput =
  /** With `expectedLast` (compare-and-set): appended only when the log holds exactly that many values. */
  | { readonly kind: 'append'; readonly value: string; readonly expectedLast?: number }
  | { readonly kind: 'read'; readonly limit?: number };
/**
 * `conflict`: a compare-and-set append refused because the log's length was not the one expected.
 * `from` (a read of a log compacted below it): `values` are the values at positions `from`
 * on, and the log held `from - 1` values before them.
 */
export type LogOutput =
  | { readonly position: number }
  | { readonly values: readonly string[]; readonly from?: number }
  | { readonly conflict: true };

/** One state: the log `values` (shared, never mutated), identified by `id`. */
export interface LogState {
  readonly id: number;
  readonly length: number;
  readonly last: string | undefined;
  readonly parent: LogState | undefined;
  readonly children: Map<string, LogState>;
}

/** The values of a state, oldest first. */
export function logValues(s: LogState): string[] {
  const out: string[] = new Array(s.length);
  for (let at: LogState | undefined = s; at?.parent; at = at.parent) out[at.length - 1] = at.last!;
  return out;
}

function prefixMatches(s: LogState, values: readonly string[]): boolean {
  // `values` must equal the first values.length entries of s.
  let at: LogState | undefined = s;
  while (at && at.length > values.length) at = at.parent;
  if (!at || at.length !== values.length) return false;
  for (; at?.parent; at = at.parent) if (values[at.length - 1] !== at.last) return false;
  return true;
}

function suffixMatches(s: LogState, from: number, values: readonly string[]): boolean {
  // The log holds exactly from - 1 + values.length values, the last values.length of them `values`.
  if (s.length !== from - 1 + values.length) return false;
  for (let at: LogState | undefined = s; at?.parent && at.length >= from; at = at.parent) {
    if (values[at.length - from] !== at.last) return false;
  }
  return true;
}

export function appendLogModel(): Model<LogState, LogInput, LogOutput> {
  let ids = 0;
  const root: LogState = { id: ids++, length: 0, last: undefined, parent: undefined, children: new Map() };
  const child = (s: LogState, v: string): LogState => {
    let c = s.children.get(v);
    if (c === undefined) {
      c = { id: ids++, length: s.length + 1, last: v, parent: s, children: new Map() };
      s.children.set(v, c);
    }
    return c;
  };
  return {
    init: () => root,
    step(state, input, output) {
      if (input.kind === 'append') {
        if (input.expectedLast !== undefined && input.expectedLast !== state.length) {
          return { ok: output === undefined || 'conflict' in output, state };
        }
        if (output !== undefined && 'conflict' in output) return { ok: false, state };
        const next = child(state, input.value);
        if (output === undefined) return { ok: true, state: next };
        return { ok: 'position' in output && output.position === next.length, state: next };
      }
      if (output === undefined) return { ok: true, state };
      if (!('values' in output)) return { ok: false, state };
      if (output.from !== undefined && output.from > 1) {
        return { ok: input.limit === undefined && suffixMatches(state, output.from, output.values), state };
      }
      const want = input.limit === undefined ? state.length : Math.min(input.limit, state.length);
      return { ok: output.values.length === want && prefixMatches(state, output.values), state };
    },
    key: (state) => String(state.id),
  };
}
