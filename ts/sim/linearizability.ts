/**
 * A linearizability checker in the style of Wing & Gong with the memoization of Lowe (as
 * Porcupine does it): depth-first search for an order of the operations that respects real
 * time (an operation that returned before another was invoked comes first) and the sequential
 * model, caching every (set of linearized operations, model state) already explored.
 * Operations whose outcome is unknown may be placed anywhere after their call, or left out;
 * those resolved as having taken effect (`effect`) must be placed, with their output.
 */
import type { Operation } from './history.js';

export interface Model<S, I, O> {
  init(): S;
  /** Applies `input` to `state`. `output` undefined means the outcome is unknown (any output fits). */
  step(state: S, input: I, output: O | undefined): { ok: boolean; state: S };
  /** A string that identifies a state (for the cache). */
  key(state: S): string;
}

export interface LinearizabilityResult<I, O> {
  /** `unknown` when the search ran past `maxStates`. */
  readonly result: 'ok' | 'violation' | 'unknown';
  /** The longest linearization found (operation ids in order). */
  readonly longest: readonly number[];
  /** On a violation: the completed operations the longest linearization could not place. */
  readonly unplaced: readonly Operation<I, O>[];
  readonly statesExplored: number;
}

export function checkLinearizable<S, I, O>(
  ops: readonly Operation<I, O>[],
  model: Model<S, I, O>,
  maxStates = 1_000_000,
): LinearizabilityResult<I, O> {
  const n = ops.length;
  const sorted = [...ops].sort((a, b) => a.call - b.call);
  const done = new Uint8Array(n);
  const required = (o: Operation<I, O>) => Number.isFinite(o.ret) || o.effect === true;
  const mustDone = sorted.filter(required).length;
  const seen = new Set<string>();
  let explored = 0;
  let longest: number[] = [];
  const order: number[] = [];
  let completedDone = 0;

  const cacheKey = (state: S) => {
    let bits = '';
    for (let i = 0; i < n; i += 6) {
      let v = 0;
      for (let j = 0; j < 6 && i + j < n; j++) v |= done[i + j]! << j;
      bits += String.fromCharCode(48 + v);
    }
    return `${bits}|${model.key(state)}`;
  };

  // Iterative DFS: each frame remembers the state and the next candidate to try.
  interface Frame {
    state: S;
    cand: number[];
    at: number;
    placed: number; // index into sorted of the op placed to reach this frame, -1 for the root
  }
  const candidates = (): number[] => {
    let minRet = Number.POSITIVE_INFINITY;
    for (let i = 0; i < n; i++) if (!done[i] && sorted[i]!.ret < minRet) minRet = sorted[i]!.ret;
    const out: number[] = [];
    for (let i = 0; i < n; i++) if (!done[i] && sorted[i]!.call < minRet) out.push(i);
    return out;
  };
  const stack: Frame[] = [{ state: model.init(), cand: candidates(), at: 0, placed: -1 }];
  seen.add(cacheKey(stack[0]!.state));

  while (stack.length > 0) {
    if (completedDone === mustDone) {
      return { result: 'ok', longest: [...order], unplaced: [], statesExplored: explored };
    }
    if (explored > maxStates) {
      return { result: 'unknown', longest, unplaced: [], statesExplored: explored };
    }
    const top = stack[stack.length - 1]!;
    if (top.at >= top.cand.length) {
      stack.pop();
      if (top.placed >= 0) {
        done[top.placed] = 0;
        order.pop();
        if (required(sorted[top.placed]!)) completedDone--;
      }
      continue;
    }
    const i = top.cand[top.at++]!;
    const op = sorted[i]!;
    const r = model.step(top.state, op.input, required(op) ? op.output : undefined);
    explored++;
    if (!r.ok) continue;
    done[i] = 1;
    const key = cacheKey(r.state);
    if (seen.has(key)) {
      done[i] = 0;
      continue;
    }
    seen.add(key);
    order.push(op.id);
    if (required(op)) completedDone++;
    if (order.length > longest.length) longest = [...order];
    stack.push({ state: r.state, cand: candidates(), at: 0, placed: i });
  }
  const placed = new Set(longest);
  return {
    result: 'violation',
    longest,
    unplaced: sorted.filter((o) => required(o) && !placed.has(o.id)),
    statesExplored: explored,
  };
}
