/**
 * The dedup window of one actor: the newest `capacity` message ids it consumed, in order.
 * Rebuilt on activation from the snapshot's list and the macrosteps after it, so a message
 * delivered again after a crash or a retry is recognised without a journal read.
 */
export class DedupWindow {
  private readonly ids = new Set<string>();

  constructor(
    readonly capacity: number,
    initial: readonly string[] = [],
  ) {
    for (const id of initial) this.add(id);
  }

  has(id: string): boolean {
    return this.ids.has(id);
  }

  add(id: string): void {
    if (this.capacity <= 0) return;
    this.ids.delete(id);
    this.ids.add(id);
    if (this.ids.size > this.capacity) {
      const oldest = this.ids.values().next().value as string;
      this.ids.delete(oldest);
    }
  }

  /** The ids, oldest first. */
  list(): string[] {
    return [...this.ids];
  }

  get size(): number {
    return this.ids.size;
  }
}
