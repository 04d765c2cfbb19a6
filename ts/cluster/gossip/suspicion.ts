/**
 * Lifeguard's timing formulas as hashicorp/memberlist computes them (util.go, suspicion.go), in
 * whole milliseconds: the suspicion timeout that starts at its maximum and shrinks as
 * independent members confirm a suspicion, the cluster-size scaling of its minimum, and the
 * retransmit limit of a piggybacked update. test/cluster/gossip-suspicion.test.ts checks them
 * against memberlist's own test tables.
 */

/** min = mult x max(1, log10(max(1, n))) x interval; the scale is kept to 1/1000 (truncated). */
export function suspicionMinMs(suspicionMult: number, n: number, probeIntervalMs: number): number {
  const scale = Math.max(1, Math.log10(Math.max(1, n)));
  return Math.floor((suspicionMult * Math.floor(scale * 1000) * probeIntervalMs) / 1000);
}

/** Confirmations that drive a suspicion to its minimum: mult - 2, or 0 when n - 2 members cannot give them. */
export function suspicionConfirmations(suspicionMult: number, n: number): number {
  const k = suspicionMult - 2;
  return n - 2 < k ? 0 : Math.max(0, k);
}

/**
 * The whole suspicion timeout after `c` independent confirmations of `k` wanted:
 * max(min, max - (max - min) x log(c + 1) / log(k + 1)), truncated to the millisecond; with
 * k < 1 it is `min` from the start.
 */
export function suspicionTimeoutMs(c: number, k: number, minMs: number, maxMs: number): number {
  if (k < 1) return minMs;
  const frac = Math.log(c + 1) / Math.log(k + 1);
  const raw = Math.floor(maxMs - frac * (maxMs - minMs));
  return Math.max(minMs, raw);
}

/** What is left of the timeout once `elapsedMs` have passed (negative: it is due already). */
export function remainingSuspicionMs(c: number, k: number, elapsedMs: number, minMs: number, maxMs: number): number {
  return suspicionTimeoutMs(c, k, minMs, maxMs) - elapsedMs;
}

/** How many messages carry one update: retransmitMult x ceil(log10(n + 1)). */
export function retransmitLimit(retransmitMult: number, n: number): number {
  return retransmitMult * Math.ceil(Math.log10(n + 1));
}
