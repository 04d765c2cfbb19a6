/**
 * A history of client operations for the linearizability checker. Each operation has an
 * invoke and (maybe) a return, stamped with a global event counter that orders every event of
 * the run, and the virtual time for people reading it. An operation without a return (the
 * client gave up, its node crashed) may or may not have taken effect.
 */
import { SimErrorCode, simError } from './errors.js';

export interface Operation<I, O> {
  readonly id: number;
  readonly client: number;
  readonly input: I;
  /** Undefined while pending, or forever when the outcome is unknown. */
  output: O | undefined;
  /** Event counters: `call` < `ret`; `ret` is Infinity when the outcome is unknown. */
  readonly call: number;
  ret: number;
  /** The client never saw a return, but the operation is known to have taken effect with `output`. */
  effect?: boolean;
  readonly callTime: number;
  retTime: number;
}

export class History<I, O> {
  private ops: Operation<I, O>[] = [];
  private counter = 0;

  invoke(client: number, input: I, time: number): number {
    const id = this.ops.length;
    this.ops.push({
      id,
      client,
      input,
      output: undefined,
      call: this.counter++,
      ret: Number.POSITIVE_INFINITY,
      callTime: time,
      retTime: Number.POSITIVE_INFINITY,
    });
    return id;
  }

  private op(id: number): Operation<I, O> {
    const op = this.ops[id];
    if (op === undefined) throw simError(SimErrorCode.BAD_HISTORY, `no operation ${id} was invoked`);
    if (op.ret !== Number.POSITIVE_INFINITY) {
      throw simError(SimErrorCode.BAD_HISTORY, `operation ${id} has already returned`);
    }
    return op;
  }

  /** The operation returned `output`. */
  ok(id: number, output: O, time: number): void {
    const op = this.op(id);
    if (time < op.callTime) throw simError(SimErrorCode.BAD_HISTORY, `operation ${id} returns before its call`);
    op.output = output;
    op.ret = this.counter++;
    op.retTime = time;
  }

  /**
   * An operation without a return is known (from the replicas' records) to have taken effect
   * with `output`: the checker must place it, with that output, anywhere after its call.
   */
  resolve(id: number, output: O): void {
    const op = this.op(id);
    op.output = output;
    op.effect = true;
  }

  /** Operations still without a return and not resolved. */
  unknown(): Operation<I, O>[] {
    return this.ops.filter((o) => o.ret === Number.POSITIVE_INFINITY && !o.effect);
  }

  /** The operation certainly had no effect: it is removed from what the checker sees. */
  fail(id: number): void {
    const op = this.op(id);
    op.ret = Number.NEGATIVE_INFINITY;
  }

  /** The operations for the checker: failed ones left out, unknown ones with `ret` Infinity. */
  operations(): Operation<I, O>[] {
    return this.ops.filter((o) => o.ret !== Number.NEGATIVE_INFINITY);
  }

  get size(): number {
    return this.ops.length;
  }

  toJSON(): unknown {
    return this.ops.map((o) => ({
      id: o.id,
      client: o.client,
      input: o.input,
      output: o.output,
      call: o.callTime,
      ret: o.ret === Number.NEGATIVE_INFINITY ? 'failed' : Number.isFinite(o.retTime) ? o.retTime : 'unknown',
    }));
  }
}
