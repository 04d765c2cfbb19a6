/**
 * Lifeguard's timing formulas against hashicorp/memberlist's own test tables, kept as published
 * (durations in milliseconds):
 * - suspicion_test.go, TestSuspicion_remainingSuspicionTime: (n confirmations, k, elapsed, min,
 *   max) -> remaining time;
 * - suspicion_test.go, TestSuspicion_Timer: k = 3, min 500 ms, max 2 s; the timer fires after
 *   the expected time given the distinct confirmations (repeats and the originator not counted,
 *   none counted beyond k). That test runs on wall time and accepts firing within its 25 ms
 *   "fudge" of the expected value; the formula gives 811 ms for its 810 ms entry, so this table
 *   is checked within the same 25 ms;
 * - util_test.go, TestSuspicionTimeout: suspicionTimeout(3, n, 1 s) / 3 by cluster size n;
 * - util_test.go, TestRetransmitLimit: retransmitLimit(3, n) for n = 0, 1, 99.
 * The formulas (util.go, suspicion.go): min = mult x max(1, log10 n) x interval, max = maxMult x
 * min, k = mult - 2 (0 when n - 2 < k), timeout(c) = max(min, max - (max - min) x log(c + 1) /
 * log(k + 1)).
 */
import { describe, expect, it } from 'vitest';
import {
  remainingSuspicionMs,
  retransmitLimit,
  suspicionConfirmations,
  suspicionMinMs,
  suspicionTimeoutMs,
} from '../../ts/cluster/gossip/suspicion.js';

describe('suspicion timeout (memberlist vectors)', () => {
  it('gives the remaining time of TestSuspicion_remainingSuspicionTime', () => {
    // n, k, elapsed, min, max, expected
    const cases: [number, number, number, number, number, number][] = [
      [0, 3, 0, 2_000, 30_000, 30_000],
      [1, 3, 2_000, 2_000, 30_000, 14_000],
      [2, 3, 3_000, 2_000, 30_000, 4_810],
      [3, 3, 4_000, 2_000, 30_000, -2_000],
      [4, 3, 5_000, 2_000, 30_000, -3_000],
      [5, 3, 10_000, 2_000, 30_000, -8_000],
    ];
    for (const [n, k, elapsed, min, max, expected] of cases) {
      expect(remainingSuspicionMs(n, k, elapsed, min, max), `case ${n}`).toBe(expected);
    }
  });

  it('gives the whole timeout of TestSuspicion_Timer', () => {
    // k = 3, min 500 ms, max 2 s: distinct confirmations -> when the timer fires.
    const cases: [number, number][] = [
      [0, 2_000],
      [1, 1_250],
      [2, 810],
      [3, 500],
    ];
    for (const [c, expected] of cases) {
      const t = suspicionTimeoutMs(c, 3, 500, 2_000);
      expect(Math.abs(t - expected), `${c} confirmations: ${t} ms`).toBeLessThan(25);
    }
    expect(suspicionTimeoutMs(2, 3, 500, 2_000)).toBe(811);
  });

  it('gives the minimum of TestSuspicionTimeout by cluster size', () => {
    const table: [number, number][] = [
      [5, 1_000],
      [10, 1_000],
      [50, 1_698],
      [100, 2_000],
      [500, 2_698],
      [1_000, 3_000],
    ];
    for (const [n, expected] of table) expect(suspicionMinMs(3, n, 1_000) / 3, `n = ${n}`).toBe(expected);
  });

  it('gives the retransmit limits of TestRetransmitLimit', () => {
    expect(retransmitLimit(3, 0)).toBe(0);
    expect(retransmitLimit(3, 1)).toBe(3);
    expect(retransmitLimit(3, 99)).toBe(6);
  });

  it('wants mult - 2 confirmations, none when the cluster cannot give them, and then starts at the minimum', () => {
    expect(suspicionConfirmations(4, 10)).toBe(2);
    expect(suspicionConfirmations(4, 4)).toBe(2);
    expect(suspicionConfirmations(4, 3)).toBe(0);
    expect(suspicionConfirmations(3, 3)).toBe(1);
    expect(suspicionConfirmations(3, 2)).toBe(0);
    expect(suspicionTimeoutMs(0, 0, 3_000, 6_000)).toBe(3_000);
  });

  it('never goes below the minimum nor above the maximum, and shrinks with each confirmation', () => {
    for (let k = 1; k <= 6; k++) {
      let prev = Number.POSITIVE_INFINITY;
      for (let c = 0; c <= k + 2; c++) {
        const t = suspicionTimeoutMs(c, k, 3_000, 18_000);
        expect(t).toBeGreaterThanOrEqual(3_000);
        expect(t).toBeLessThanOrEqual(18_000);
        if (c <= k) expect(t).toBeLessThan(prev);
        prev = t;
      }
      expect(suspicionTimeoutMs(k, k, 3_000, 18_000)).toBe(3_000);
    }
  });
});
