/**
 * A bounded map with least-recently-used eviction and a time to live per entry. Time is read
 * from an injected clock (milliseconds), so tests drive expiry without waiting.
 */
import { type Clock, systemClock } from '../../core/clock.js';

export class LruTtlCache<V> {
  private readonly map = new Map<string, { value: V; expires: number }>();

  constructor(
    readonly capacity: number,
    readonly ttlMs: number,
    private readonly clock: Clock = systemClock,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('capacity must be a positive integer');
    if (!(ttlMs > 0)) throw new RangeError('ttlMs must be positive');
  }

  get size(): number {
    return this.map.size;
  }

  get(key: string): V | undefined {
    const e = this.map.get(key);
    if (e === undefined) return undefined;
    this.map.delete(key);
    if (e.expires <= this.clock.now()) return undefined;
    this.map.set(key, e);
    return e.value;
  }

  set(key: string, value: V): void {
    this.map.delete(key);
    this.map.set(key, { value, expires: this.clock.now() + this.ttlMs });
    while (this.map.size > this.capacity) {
      const oldest = this.map.keys().next().value as string;
      this.map.delete(oldest);
    }
  }

  delete(key: string): boolean {
    return this.map.delete(key);
  }

  clear(): void {
    this.map.clear();
  }
}
