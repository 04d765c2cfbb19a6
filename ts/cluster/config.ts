/**
 * The cluster's tunables with the defaults of the specification: ClusterConfig (transport),
 * LeaseConfig (lease length and the owner's safety margin) and DetectorConfig (suspect and
 * failed timeouts). All durations are milliseconds.
 */
import { MAX_CLUSTER_FRAME } from '../codec/cluster-frame.js';
import { ClusterCode, clusterError } from './errors.js';

export interface ClusterConfig {
  /** Forwards between nodes before a message fails. */
  readonly hopLimit: number;
  /** An inbound frame waits while the target's mailbox holds this many messages. */
  readonly mailboxBound: number;
  /** Accepted message ids the receiver remembers. */
  readonly dedupCapacity: number;
  /** How long an outbound message is retried. */
  readonly deliveryDeadlineMs: number;
  /** The pause between retries. */
  readonly retryBackoffMs: number;
  /** The largest frame, header included. */
  readonly maxFrameBytes: number;
}

export const DEFAULT_CLUSTER_CONFIG: ClusterConfig = Object.freeze({
  hopLimit: 4,
  mailboxBound: 1024,
  dedupCapacity: 65_536,
  deliveryDeadlineMs: 30_000,
  retryBackoffMs: 50,
  maxFrameBytes: MAX_CLUSTER_FRAME,
});

export interface LeaseConfig {
  /** How long a grant or renewal lasts. */
  readonly ttlMs: number;
  /** The owner stops starting macrosteps this long before expiry, by its own monotonic clock. */
  readonly safetyMarginMs: number;
  /** How often an owner renews (default a third of the lease). */
  readonly renewEveryMs: number;
}

export const DEFAULT_LEASE_CONFIG: LeaseConfig = Object.freeze({
  ttlMs: 10_000,
  safetyMarginMs: 2_000,
  renewEveryMs: 3_000,
});

export interface DetectorConfig {
  /** A member silent this long is suspect. */
  readonly suspectAfterMs: number;
  /** A member silent this long is failed. */
  readonly failedAfterMs: number;
}

export const DEFAULT_DETECTOR_CONFIG: DetectorConfig = Object.freeze({ suspectAfterMs: 3_000, failedAfterMs: 10_000 });

function positive(name: string, v: unknown, max = Number.MAX_SAFE_INTEGER): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) {
    throw clusterError(ClusterCode.BAD_CONFIG, `${name} must be an integer from 0 to ${max}, got ${String(v)}`, {
      field: name,
    });
  }
}

/** The defaults with `over` applied, checked. */
export function clusterConfig(over: Partial<ClusterConfig> = {}): ClusterConfig {
  const c = { ...DEFAULT_CLUSTER_CONFIG, ...over };
  positive('hopLimit', c.hopLimit, 255);
  positive('mailboxBound', c.mailboxBound);
  positive('dedupCapacity', c.dedupCapacity);
  positive('deliveryDeadlineMs', c.deliveryDeadlineMs);
  positive('retryBackoffMs', c.retryBackoffMs);
  positive('maxFrameBytes', c.maxFrameBytes, MAX_CLUSTER_FRAME);
  if (c.mailboxBound < 1)
    throw clusterError(ClusterCode.BAD_CONFIG, 'mailboxBound must be at least 1', { field: 'mailboxBound' });
  return Object.freeze(c);
}

export function leaseConfig(over: Partial<LeaseConfig> = {}): LeaseConfig {
  const ttl = over.ttlMs ?? DEFAULT_LEASE_CONFIG.ttlMs;
  const c = {
    ttlMs: ttl,
    safetyMarginMs: over.safetyMarginMs ?? Math.min(DEFAULT_LEASE_CONFIG.safetyMarginMs, Math.floor(ttl / 5)),
    renewEveryMs: over.renewEveryMs ?? Math.max(1, Math.floor(ttl / 3)),
  };
  positive('ttlMs', c.ttlMs);
  positive('safetyMarginMs', c.safetyMarginMs);
  positive('renewEveryMs', c.renewEveryMs);
  if (c.safetyMarginMs >= c.ttlMs || c.renewEveryMs >= c.ttlMs - c.safetyMarginMs) {
    throw clusterError(
      ClusterCode.BAD_CONFIG,
      `lease config: need renewEveryMs < ttlMs - safetyMarginMs and safetyMarginMs < ttlMs (got ${c.renewEveryMs}, ${c.ttlMs}, ${c.safetyMarginMs})`,
      { field: 'ttlMs' },
    );
  }
  return Object.freeze(c);
}

export function detectorConfig(over: Partial<DetectorConfig> = {}): DetectorConfig {
  const c = { ...DEFAULT_DETECTOR_CONFIG, ...over };
  positive('suspectAfterMs', c.suspectAfterMs);
  positive('failedAfterMs', c.failedAfterMs);
  if (c.failedAfterMs < c.suspectAfterMs) {
    throw clusterError(ClusterCode.BAD_CONFIG, 'failedAfterMs must not be below suspectAfterMs', {
      field: 'failedAfterMs',
    });
  }
  return Object.freeze(c);
}
