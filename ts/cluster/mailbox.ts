/**
 * A bounded in-memory mailbox: `put` resolves once the message is stored, which is when the
 * mailbox holds fewer than `bound` messages (ClusterConfig.mailboxBound); until then the put
 * waits, and with it the wire stream that feeds it. The runtime's mailboxes follow the same
 * contract; this one serves tests and the transport benchmark.
 */
export class BoundedMailbox<T> {
  private readonly items: T[] = [];
  private head = 0;
  private readonly waiting: { item: T; resolve: () => void }[] = [];
  private readonly takers: ((v: T) => void)[] = [];

  constructor(readonly bound: number) {
    if (!Number.isInteger(bound) || bound < 1) throw new RangeError('a mailbox bound is an integer of at least 1');
  }

  /** Messages stored (not counting puts still waiting). */
  get size(): number {
    return this.items.length - this.head;
  }

  /** Puts still waiting for room. */
  get waitingPuts(): number {
    return this.waiting.length;
  }

  put(item: T): Promise<void> {
    const t = this.takers.shift();
    if (t) {
      t(item);
      return Promise.resolve();
    }
    if (this.size < this.bound) {
      this.items.push(item);
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiting.push({ item, resolve }));
  }

  /** The oldest message, or undefined. */
  take(): T | undefined {
    if (this.size === 0) return undefined;
    const v = this.items[this.head] as T;
    this.items[this.head] = undefined as T;
    this.head++;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items.splice(0, this.head);
      this.head = 0;
    }
    const w = this.waiting.shift();
    if (w) {
      this.items.push(w.item);
      w.resolve();
    }
    return v;
  }

  /** The oldest message, waiting for one. */
  async next(): Promise<T> {
    const v = this.take();
    if (v !== undefined) return v;
    return new Promise((resolve) => this.takers.push(resolve));
  }
}
