/**
 * Refuses replayed registration requests. A keylist-update must carry a `created_time` within
 * `skewMs` of the mediator's clock, and its id (per client) must not have been seen while it could
 * still be fresh. Ids are remembered for 2 x skew (past that, the time check refuses a replay),
 * in a map of at most `capacity` entries. When the map is full of ids still fresh, the oldest is
 * forgotten and a floor is raised to its `created_time`: a message created at or before the floor
 * is refused too, so forgetting an id never lets its message through again. An entry is keyed by
 * the SHA-256 of client and id, so its size does not depend on how long a DID or an id is.
 */

import { createHash } from 'node:crypto';
import type { Clock } from '../../core/clock.js';
import { PlexusError } from '../../core/errors.js';

interface Seen {
  /** When the entry may be forgotten (ms). */
  until: number;
  /** The message's created_time (s). */
  created: number;
}

export class ReplayGuard {
  private readonly seen = new Map<string, Seen>();
  /** Messages created at or before this second are refused (raised when a fresh id is evicted). */
  private floor = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly skewMs: number,
    private readonly capacity: number,
    private readonly clock: Clock,
  ) {}

  get size(): number {
    return this.seen.size;
  }

  /**
   * Accepts a message once: throws PLX_MEDIATOR_REPLAY when its time is missing or outside the
   * window, or its id was seen (or may have been: below the floor).
   */
  check(client: string, id: unknown, createdTime: unknown, what: string): void {
    const now = this.clock.now();
    this.expire(now);
    if (typeof createdTime !== 'number' || !Number.isSafeInteger(createdTime)) {
      refuse('no-time', `${what} must carry created_time (seconds since the epoch) to be taken`);
    }
    if (Math.abs(createdTime * 1000 - now) > this.skewMs) {
      refuse(
        'stale',
        `${what} was created at ${createdTime}, more than ${Math.round(this.skewMs / 1000)} s from the mediator's clock (${Math.floor(now / 1000)}): send a fresh one`,
      );
    }
    if (typeof id !== 'string' || id.length === 0) refuse('no-id', `${what} must carry an id`);
    const key = createHash('sha256').update(client).update('\n').update(id).digest('base64');
    if (this.seen.has(key)) refuse('seen', `${what} ${id.slice(0, 80)} was already taken: a replay is refused`);
    if (createdTime <= this.floor) {
      refuse('stale', `${what} is older than the ids the mediator still remembers: send a fresh one`);
    }
    while (this.seen.size >= this.capacity) {
      const [k, v] = this.seen.entries().next().value as [string, Seen];
      this.seen.delete(k);
      this.floor = Math.max(this.floor, v.created);
    }
    this.seen.set(key, { until: now + 2 * this.skewMs, created: createdTime });
  }

  private expire(now: number): void {
    for (const [k, v] of this.seen) {
      if (v.until > now) break;
      this.seen.delete(k);
    }
  }
}

function refuse(reason: string, message: string): never {
  throw new PlexusError('PLX_MEDIATOR_REPLAY', message, { reason });
}
