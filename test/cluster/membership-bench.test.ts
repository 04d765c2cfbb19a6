/**
 * The membership benchmarks (bench/cluster/) run with `--quick` as a user runs them: real
 * gossip member processes over mutual TLS, a real 3-member etcd, lease-holder processes on it
 * through EtcdAuthority and through KubeAuthority on the Lease-API stand-in (which the benches
 * transpile from test/helpers/kube-lease-server.ts and run as its own process).
 * Each writes its rows with `--json`; the test checks the fields and what must hold whatever
 * the machine's load: nothing is declared failed before the suspicion minimum of its
 * configuration, no shard is granted again before its owner's lease could have run out, and
 * only Lifeguard moves a health score. Every process a bench starts is stopped by the bench by
 * its PID; the bench processes themselves are stopped here by theirs (`stopStarted`).
 * Needs `npm run build` first; the etcd parts need `etcd` on PATH.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { etcdAvailable } from '../helpers/etcd.js';
import { ROOT } from '../helpers/paths.js';
import { built, runNode, stopStarted } from '../helpers/processes.js';

const bench = (name: string) => join(ROOT, 'bench/cluster', `${name}.mjs`);
// biome-ignore lint/suspicious/noExplicitAny: the rows are the bench's JSON
type Json = any;

describe.skipIf(!built)('membership benchmarks, --quick (build dist first)', () => {
  let dir = '';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'plexus-membership-bench-'));
  });
  afterAll(async () => {
    await stopStarted();
    await rm(dir, { recursive: true, force: true });
  });

  async function run(name: string, args: string[]): Promise<Json> {
    const out = join(dir, `${name}.json`);
    const r = await runNode(bench(name), ['--quick', '--json', out, ...args], { timeoutMs: 360_000 });
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(await readFile(out, 'utf8'));
  }

  it('failure detection: every member fails a SIGKILLed and a SIGSTOPped member, never before the suspicion minimum', async () => {
    const res = await run('failure-detection', etcdAvailable ? [] : ['--only', 'gossip']);
    const gossip = res.rows.filter((r: Json) => r.expected !== undefined);
    expect(gossip.length).toBeGreaterThanOrEqual(1);
    for (const row of gossip) {
      expect(row.rounds.map((x: Json) => x.signal).sort()).toEqual(['SIGKILL', 'SIGSTOP']);
      for (const x of row.rounds) {
        expect(x.allFailedMs).toBeGreaterThanOrEqual(row.expected.suspicionMinMs);
        expect(x.firstSuspectMs).toBeLessThan(x.allFailedMs);
      }
      expect(Number.isFinite(row.medians.SIGKILL)).toBe(true);
    }
    if (etcdAvailable) {
      const etcdRow = res.rows.find((r: Json) => r.row.startsWith('etcd'));
      const kubeRow = res.rows.find((r: Json) => r.row.startsWith('Kubernetes'));
      expect(etcdRow.store).toBe('etcd');
      expect(kubeRow.store).toBe('kube');
      for (const lease of [etcdRow, kubeRow]) {
        expect(lease.rounds.map((x: Json) => x.signal).sort()).toEqual(['SIGKILL', 'SIGSTOP']);
        for (const x of lease.rounds) {
          // The owner renewed at most renewEveryMs (plus one request) before the signal: its lease
          // runs ttlMs from then (etcd), or another process sees its last Lease revision unchanged
          // for ttlMs from no earlier than that write (Kubernetes), and only then is a grant given.
          expect(x.allFailedMs).toBeGreaterThanOrEqual(lease.config.ttlMs - lease.config.renewEveryMs - 1000);
          expect(BigInt(x.epoch)).toBeGreaterThanOrEqual(2n);
        }
        expect(Number.isFinite(lease.medians.SIGKILL)).toBe(true);
        expect(Number.isFinite(lease.medians.SIGSTOP)).toBe(true);
      }
      // The stand-in process the bench started for the Kubernetes row was stopped by its PID.
      expect(Number.isInteger(kubeRow.standInPid)).toBe(true);
      expect(() => process.kill(kubeRow.standInPid, 0)).toThrow();
    }
  }, 420_000);

  it('false positives: counts healthy members declared failed with Lifeguard on, off, and off with its longest timeout', async () => {
    const res = await run('false-positives', []);
    expect(res.bursts).toBeGreaterThanOrEqual(3);
    expect(typeof res.seed).toBe('number');
    const on = res.rows.find((r: Json) => r.cluster === 'lifeguard on');
    const off = res.rows.find((r: Json) => r.cluster === 'lifeguard off');
    const long = res.rows.find((r: Json) => r.cluster === 'lifeguard off, 6 s');
    for (const r of [on, off, long]) {
      expect(r.healthyDeclaredFailed).toBeGreaterThanOrEqual(0);
      expect(r.healthyDeclaredFailed).toBeLessThanOrEqual(4);
      expect(Number.isInteger(r.starvedDeclaredFailed)).toBe(true);
    }
    expect(on.config.lifeguard).toBe(true);
    expect(off.config.lifeguard).toBe(false);
    expect(long.config.lifeguard).toBe(false);
    expect(long.config.suspicionMult).toBe(on.config.suspicionMult * on.config.suspicionMaxTimeoutMult);
    // The starved member's failed probes raise its health score, with Lifeguard only.
    expect(on.maxAwareness).toBeGreaterThan(0);
    expect(off.maxAwareness).toBe(0);
    expect(long.maxAwareness).toBe(0);
  }, 300_000);
});

describe.skipIf(!built || !etcdAvailable)(
  'lease operations bench, --quick (skipped: no dist or no etcd on PATH)',
  () => {
    afterAll(() => stopStarted());

    it('measures etcd and Kubernetes authority renewals and grants next to their floors, with 1 and 8 clients', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'plexus-etcd-leases-bench-'));
      try {
        const out = join(dir, 'rows.json');
        const r = await runNode(bench('etcd-leases'), ['--quick', '--json', out], { timeoutMs: 150_000 });
        expect(r.code, r.stderr).toBe(0);
        const res = JSON.parse(await readFile(out, 'utf8'));
        expect(res.rows).toHaveLength(14);
        for (const row of res.rows) {
          expect([1, 8]).toContain(row.clients);
          expect(['etcd', 'kube']).toContain(row.store);
          expect(row.opsPerSec).toBeGreaterThan(0);
          expect(row.p50Ms).toBeGreaterThan(0);
          expect(row.p99Ms).toBeGreaterThanOrEqual(row.p50Ms);
          expect(row.errors).toBe(0);
        }
        const kube = res.rows.filter((x: Json) => x.store === 'kube');
        expect(kube.map((x: Json) => `${x.case}/${x.clients}`).sort()).toEqual(
          [
            'KubeAuthority grant + release/1',
            'KubeAuthority grant + release/8',
            'KubeAuthority renew/1',
            'KubeAuthority renew/8',
            'Lease read + replace (floor)/1',
            'Lease read + replace (floor)/8',
          ].sort(),
        );
        // The stand-in process the bench started was stopped by the bench, by its PID.
        expect(Number.isInteger(res.standInPid)).toBe(true);
        expect(() => process.kill(res.standInPid, 0)).toThrow();
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 200_000);
  },
);
