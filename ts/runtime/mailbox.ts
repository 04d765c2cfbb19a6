/**
 * A bounded FIFO mailbox. `offer` refuses past the bound. `park` queues an item behind
 * the bound instead (a transport that must not drop waits this way, which slows the
 * stream that feeds the mailbox: backpressure); a parked item moves in, in order, as soon
 * as a slot frees, and nothing offered later overtakes it.
 */
export class Mailbox<T> {
  private items: T[] = [];
  private head = 0;
  private parked: T[] = [];

  /** `entered` is told when a parked item moves into the mailbox. */
  constructor(
    readonly bound: number,
    private readonly entered?: (item: T) => void,
  ) {}

  /** Items in the mailbox (parked ones not counted). */
  get length(): number {
    return this.items.length - this.head;
  }

  /** Items waiting for room. */
  get waiting(): number {
    return this.parked.length;
  }

  get full(): boolean {
    return this.length >= this.bound;
  }

  /** Adds an item unless the mailbox is full or items wait for room; returns whether it was added. */
  offer(item: T): boolean {
    if (this.full || this.parked.length > 0) return false;
    this.items.push(item);
    return true;
  }

  /** Queues an item to enter when there is room, after every item parked before it. */
  park(item: T): void {
    this.parked.push(item);
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head] as T;
    this.items[this.head] = undefined as T;
    this.head++;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    while (this.parked.length > 0 && !this.full) {
      const p = this.parked.shift() as T;
      this.items.push(p);
      this.entered?.(p);
    }
    return item;
  }

  /** Removes and returns every item, parked ones last. */
  drain(): T[] {
    const out = [...this.items.slice(this.head), ...this.parked];
    this.items = [];
    this.head = 0;
    this.parked = [];
    return out;
  }
}
