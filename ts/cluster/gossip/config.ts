/**
 * The knobs of gossip membership, memberlist's names where it has them. The defaults meet the
 * seed's failure detector (DetectorConfig: a silent member suspect after 3 s, failed after
 * 10 s) for clusters of 2 to 20 members; docs/cluster.md, "Gossip membership", gives the
 * mapping.
 */
import { PlexusError } from '../../core/errors.js';
import type { DetectorConfig } from '../config.js';

export interface GossipConfig {
  /** One probe per interval (stretched by the local health score). */
  readonly probeIntervalMs: number;
  /** Wait this long for a direct ack before asking helpers (stretched like the interval). */
  readonly probeTimeoutMs: number;
  /** Helpers asked to probe indirectly (`k` of SWIM). */
  readonly indirectChecks: number;
  /** An update rides on retransmitMult x ceil(log10(n + 1)) messages. */
  readonly retransmitMult: number;
  /** Suspicion minimum = suspicionMult x max(1, log10 n) x probe interval; mult - 2 confirmations. */
  readonly suspicionMult: number;
  /** Suspicion maximum = this x the minimum. */
  readonly suspicionMaxTimeoutMult: number;
  /** The local health score runs from 0 to this minus one; timeouts scale by score + 1. */
  readonly awarenessMaxMultiplier: number;
  /** Piggybacked updates also go out every gossip interval to `gossipNodes` random members. */
  readonly gossipIntervalMs: number;
  readonly gossipNodes: number;
  /** Full state exchange with one random member this often. */
  readonly pushPullIntervalMs: number;
  /** Updates on one message at most. */
  readonly maxPiggyback: number;
  /**
   * Lifeguard on (the health score, a suspicion timeout shrinking with confirmations, the
   * suspicion carried to the suspect) or off (plain SWIM: a fixed suspicion timeout of the
   * minimum, no score).
   */
  readonly lifeguard: boolean;
}

export const DEFAULT_GOSSIP_CONFIG: GossipConfig = Object.freeze({
  probeIntervalMs: 1_000,
  probeTimeoutMs: 500,
  indirectChecks: 3,
  retransmitMult: 4,
  suspicionMult: 3,
  suspicionMaxTimeoutMult: 2,
  awarenessMaxMultiplier: 8,
  gossipIntervalMs: 200,
  gossipNodes: 3,
  pushPullIntervalMs: 10_000,
  maxPiggyback: 16,
  lifeguard: true,
});

function check(field: string, v: unknown, min: number): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > 2 ** 31) {
    throw new PlexusError('PLX_GOSSIP_BAD_CONFIG', `${field} must be a whole number from ${min}, got ${String(v)}`, {
      field,
    });
  }
}

/** The defaults with `over` applied, checked. */
export function gossipConfig(over: Partial<GossipConfig> = {}): GossipConfig {
  const c = { ...DEFAULT_GOSSIP_CONFIG, ...over };
  check('probeIntervalMs', c.probeIntervalMs, 1);
  check('probeTimeoutMs', c.probeTimeoutMs, 1);
  if (c.probeTimeoutMs >= c.probeIntervalMs) {
    throw new PlexusError('PLX_GOSSIP_BAD_CONFIG', 'probeTimeoutMs must be below probeIntervalMs', {
      field: 'probeTimeoutMs',
    });
  }
  check('indirectChecks', c.indirectChecks, 0);
  check('retransmitMult', c.retransmitMult, 1);
  check('suspicionMult', c.suspicionMult, 1);
  check('suspicionMaxTimeoutMult', c.suspicionMaxTimeoutMult, 1);
  check('awarenessMaxMultiplier', c.awarenessMaxMultiplier, 1);
  check('gossipIntervalMs', c.gossipIntervalMs, 1);
  check('gossipNodes', c.gossipNodes, 0);
  check('pushPullIntervalMs', c.pushPullIntervalMs, 1);
  check('maxPiggyback', c.maxPiggyback, 1);
  if (c.maxPiggyback > 64) {
    throw new PlexusError('PLX_GOSSIP_BAD_CONFIG', 'maxPiggyback must be at most 64', { field: 'maxPiggyback' });
  }
  return Object.freeze(c);
}

/**
 * Gossip timings for a failure detector's bounds: the probe interval is a third of
 * `suspectAfterMs` (a silent member is probed and its probe fails within about three
 * intervals), the probe timeout half of it, and the multipliers of the defaults, whose
 * suspicion timeout (at most 2 x 3 intervals, 7.8 intervals at 20 members) ends by
 * `failedAfterMs` when that is at least 10/3 of `suspectAfterMs`.
 */
export function gossipConfigFor(detector: DetectorConfig, over: Partial<GossipConfig> = {}): GossipConfig {
  const probeIntervalMs = Math.max(2, Math.round(detector.suspectAfterMs / 3));
  return gossipConfig({ probeIntervalMs, probeTimeoutMs: Math.floor(probeIntervalMs / 2), ...over });
}
