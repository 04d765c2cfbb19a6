/**
 * A buffer filled front to back while its front is already being sent: the root of an
 * allreduce folds the last contribution run by run, and each finished run goes out to
 * every rank at once, so sending the result overlaps receiving the contributions.
 */

interface Waiter {
  readonly n: number;
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

export class GrowingBytes {
  private filled = 0;
  private failure: { error: unknown } | undefined;
  private waiters: Waiter[] = [];

  constructor(readonly bytes: Uint8Array) {}

  /** Bytes at the front that are final. */
  get ready(): number {
    return this.filled;
  }

  /** The error the bytes failed with, if they did. */
  get failed(): unknown {
    return this.failure?.error;
  }

  /**
   * Marks the first `n` bytes final (n only grows). The last byte is held back until
   * `complete()`: a receiver that has every byte has the whole message, so the last one
   * waits until nothing can fail any more.
   */
  advance(n: number): void {
    this.release(Math.min(n, this.bytes.length - 1));
  }

  /** Every byte is final. */
  complete(): void {
    this.release(this.bytes.length);
  }

  private release(n: number): void {
    if (n <= this.filled || this.failure !== undefined) return;
    this.filled = n;
    if (this.waiters.length === 0) return;
    const still: Waiter[] = [];
    for (const w of this.waiters) {
      if (w.n <= this.filled) w.resolve();
      else still.push(w);
    }
    this.waiters = still;
  }

  /** The bytes will never be complete: every wait rejects with `error`. */
  fail(error: unknown): void {
    if (this.failure !== undefined) return;
    this.failure = { error };
    const waiting = this.waiters;
    this.waiters = [];
    for (const w of waiting) w.reject(error);
  }

  /** Resolves once at least `n` bytes are final; rejects if they never will be. */
  until(n: number): Promise<void> {
    if (n <= this.filled) return Promise.resolve();
    if (this.failure !== undefined) return Promise.reject(this.failure.error);
    return new Promise((resolve, reject) => this.waiters.push({ n, resolve, reject }));
  }
}
