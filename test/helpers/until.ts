/**
 * Waiting in tests: `until` asks a probe again and again until it gives a value, and fails
 * with a message naming what it waited for (and the probe's last error) when time runs out.
 * A test waits for the thing it needs, never for a fixed time.
 */

export interface UntilOptions {
  /** How long to keep asking before failing (default 10 s: generous for a loaded machine). */
  readonly timeoutMs?: number;
  /** What is awaited, for the failure message ("the leader", "3 lines on stdout"). */
  readonly what?: string;
  /** Pause between two probes (default 5 ms). */
  readonly intervalMs?: number;
}

/**
 * Thrown by a probe that knows the wait is over without the value (the process it waits on
 * exited): `until` fails at once with it instead of asking again.
 */
export class StopWaiting extends Error {}

/** What `until` resolves with: the probe's value once it is neither false, null nor undefined. */
export type Settled<T> = Exclude<T, false | null | undefined>;

/**
 * Resolves once `probe` returns (or resolves to) a value other than `false`, `null` or
 * `undefined`, with that value. A probe that throws is asked again (its last error is part of
 * the failure message), unless it throws `StopWaiting`, which fails the wait at once. Fails after `timeoutMs` with `timed out after N ms waiting for <what>`.
 * `opts` may be just the description.
 */
export async function until<T>(probe: () => T | Promise<T>, opts: UntilOptions | string = {}): Promise<Settled<T>> {
  const o: UntilOptions = typeof opts === 'string' ? { what: opts } : opts;
  const timeoutMs = o.timeoutMs ?? 10_000;
  const intervalMs = o.intervalMs ?? 5;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  let failed = false;
  for (;;) {
    try {
      const v = await probe();
      if (v !== false && v !== null && v !== undefined) return v as Settled<T>;
      failed = false;
    } catch (e) {
      if (e instanceof StopWaiting)
        throw new Error(`stopped waiting for ${o.what ?? 'a condition'}: ${e.message}`, { cause: e });
      last = e;
      failed = true;
    }
    if (Date.now() >= deadline) {
      const why = failed ? ` (last error: ${last instanceof Error ? last.message : String(last)})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${o.what ?? 'a condition'}${why}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
