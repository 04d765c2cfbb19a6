/**
 * The failure detector as a pure state machine: it never reads a clock. `heard(node, now)`
 * records a sign of life, `tick(now)` moves time; a member silent for `suspectAfterMs` is
 * suspect and for `failedAfterMs` failed (DetectorConfig, 3 s and 10 s by default). Status
 * changes queue up until `ready()` hands them out and `advance()` clears them.
 */
import { type DetectorConfig, detectorConfig } from './config.js';

export type Health = 'alive' | 'suspect' | 'failed';

export interface HealthChange {
  readonly node: string;
  readonly from: Health;
  readonly to: Health;
  readonly at: number;
}

export class FailureDetector {
  readonly config: DetectorConfig;
  private readonly last = new Map<string, number>();
  private readonly health = new Map<string, Health>();
  private changes: HealthChange[] = [];
  private now = 0;

  constructor(config: Partial<DetectorConfig> = {}) {
    this.config = detectorConfig(config);
  }

  /** A sign of life from `node` at `now` (which also moves time forward). */
  heard(node: string, now: number): void {
    this.tick(now);
    this.last.set(node, this.now);
    this.set(node, 'alive');
  }

  /** Stops watching `node`. */
  forget(node: string): void {
    this.last.delete(node);
    this.health.delete(node);
  }

  /** Moves time to `now` (never backwards) and re-judges every member. */
  tick(now: number): void {
    if (now > this.now) this.now = now;
    for (const [node, at] of this.last) {
      const silent = this.now - at;
      this.set(
        node,
        silent >= this.config.failedAfterMs ? 'failed' : silent >= this.config.suspectAfterMs ? 'suspect' : 'alive',
      );
    }
  }

  status(node: string): Health | undefined {
    return this.health.get(node);
  }

  /** Status changes since the last `advance()`. */
  ready(): readonly HealthChange[] {
    return this.changes;
  }

  advance(): void {
    this.changes = [];
  }

  private set(node: string, to: Health): void {
    const from = this.health.get(node);
    if (from === to) return;
    this.health.set(node, to);
    if (from !== undefined) this.changes.push({ node, from, to, at: this.now });
  }
}
