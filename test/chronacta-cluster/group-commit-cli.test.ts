/**
 * Group commit on three real `plexus chronacta serve --cluster` member processes. A cluster
 * made by `cluster init` has it on (cluster.json `groupCommitBytes`): concurrent appends to
 * the leader share Raft entries (the leader's chronacta_replication_append_groups_total stays
 * below chronacta_replication_grouped_appends_total), each append keeps its own positions, and
 * every member applies all of them. `--group-commit-bytes 0` turns it off (one entry per
 * append). Bad values and the flag without --cluster are usage errors.
 * Build first: `npx tsc -p tsconfig.build.json`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { until } from '../helpers/until.js';
import { cli, MAIN, startThree, type ThreeMembers } from './helpers.js';

let cluster: ThreeMembers | undefined;

beforeAll(async () => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.build.json)`);
  cluster = await startThree('plexus-chronacta-group-commit-', []);
}, 60_000);

afterAll(async () => {
  await cluster?.close();
});

/** The value of a counter in a Prometheus text exposition (0 when absent). */
async function counter(metrics: string, name: string): Promise<number> {
  const text = await (await fetch(`http://${metrics}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.slice(name.length + 1));
}

/** The leader's chronacta_replication_grouped_appends_total, once it counts at least `n`. */
function groupedAppends(metrics: string, n: number): Promise<number> {
  return until(
    async () => {
      const g = await counter(metrics, 'chronacta_replication_grouped_appends_total');
      return g >= n ? g : undefined;
    },
    { timeoutMs: 10_000, what: `the leader to count ${n} appends`, intervalMs: 25 },
  );
}

/** `n` concurrent appends to the leader, each to a new stream; their results. */
async function appendMany(c: ThreeMembers, n: number) {
  const leader = await c.leader();
  const results = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      leader.client.append(`gc-${i}`, [{ type: 't', data: `e${i}` }], { expectedVersion: 'no_stream' }),
    ),
  );
  return { leader, results };
}

describe('group commit from cluster.json and --group-commit-bytes', () => {
  it('puts concurrent appends into shared entries; each keeps its positions; every member has them all', async () => {
    const c = cluster as ThreeMembers;
    const init = JSON.parse(readFileSync(join(c.root, 'node-1', 'cluster', 'cluster.json'), 'utf8'));
    expect(init.groupCommitBytes).toBe(131_072);
    const n = 64;
    const { leader, results } = await appendMany(c, n);
    const positions = results.map((r) => Number(r.firstPosition)).sort((a, b) => a - b);
    expect(new Set(positions).size).toBe(n);
    for (const r of results) expect(r.lastPosition).toBe(r.firstPosition);
    const grouped = await groupedAppends(leader.metrics, n);
    const groups = await counter(leader.metrics, 'chronacta_replication_append_groups_total');
    expect(groups).toBeGreaterThan(0);
    expect(groups).toBeLessThan(grouped);
    for (const m of c.members) {
      // Read from this member itself (no redirect to the leader).
      const own = new ChronactaClient(m.address, { deadlineMs: 5000, followReadRedirects: false });
      try {
        await until(
          async () => {
            const page = await own.readAll({ maxCount: 1000, readConsistency: 'follower' }).catch(() => undefined);
            const mine = page?.events.filter((e) => e.stream.startsWith('gc-')) ?? [];
            return mine.length === n ? true : undefined;
          },
          { timeoutMs: 10_000, what: `member ${m.id} to apply all ${n} appends`, intervalMs: 25 },
        );
      } finally {
        own.close();
      }
    }
  });

  it('proposes one entry per append with --group-commit-bytes 0', async () => {
    const off = await startThree('plexus-chronacta-group-commit-off-', ['--group-commit-bytes', '0']);
    try {
      const n = 32;
      const { leader, results } = await appendMany(off, n);
      expect(new Set(results.map((r) => r.firstPosition)).size).toBe(n);
      const grouped = await groupedAppends(leader.metrics, n);
      expect(await counter(leader.metrics, 'chronacta_replication_append_groups_total')).toBe(grouped);
    } finally {
      await off.close();
    }
  });

  it('refuses the flag without --cluster, above 1048576, and not a whole number', async () => {
    const alone = await cli('serve', '--group-commit-bytes', '1024');
    expect(alone.code).toBe(2);
    expect(alone.stderr).toContain('go with --cluster');
    const big = await cli('serve', '--cluster', '--data', '/nonexistent', '--group-commit-bytes', '2000000');
    expect(big.code).toBe(2);
    expect(big.stderr).toContain('--group-commit-bytes takes 0 to 1048576');
    const word = await cli('serve', '--cluster', '--group-commit-bytes', 'lots');
    expect(word.code).toBe(2);
    expect(word.stderr).toContain('takes a whole number');
  });
});
