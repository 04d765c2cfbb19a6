/**
 * Three `plexus chronacta serve --cluster` processes on loopback (node dist/cli/main.js,
 * built by `npm run build`, which `npm test` runs first): redirects from a follower to the leader,
 * every acknowledged event on every member at the same positions, metrics and /readyz,
 * and a SIGKILLed leader: a new one takes appends and nothing acknowledged is lost.
 */

import type { ChildProcess } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { get } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import type { ClusterStatus } from '../../ts/chronacta/types.js';
import { until } from '../helpers/until.js';
import { cli, initCluster, MAIN, type ServeMember, spawnMember, stopAll, stopMember } from './helpers.js';

function http(url: string): Promise<{ status: number; body: string }> {
  return new Promise((res, rej) => {
    get(url, (r) => {
      let body = '';
      r.setEncoding('utf8').on('data', (d: string) => {
        body += d;
      });
      r.on('end', () => res({ status: r.statusCode ?? 0, body }));
    }).on('error', rej);
  });
}

function metric(text: string, name: string): number {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : Number.NaN;
}

type Member = ServeMember;

let root = '';
const members: Member[] = [];
/** Every process this file started (stopped by PID in afterAll, whatever happened). */
const children = new Set<ChildProcess>();

beforeAll(async () => {
  // The processes run the built CLI (npm test builds it first; so does npm ci).
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build first`);
  const made = await initCluster('plexus-chronacta-cluster-procs-');
  root = made.root;
  expect(made.init.code, made.init.stderr).toBe(0);
  expect(made.init.stdout.trim().split('\n')).toHaveLength(3);
  for (let id = 1; id <= 3; id++) {
    members.push(await spawnMember(id, join(root, `node-${id}`), ['--tick-ms', '20'], children));
  }
}, 120_000);

afterAll(async () => {
  for (const m of members) await stopMember(m, 'SIGTERM');
  await stopAll(children);
  if (root) rmSync(root, { recursive: true, force: true });
});

async function leaderOf(ms = 15_000): Promise<{ leader: Member; status: ClusterStatus }> {
  return until(
    async () => {
      for (const m of members.filter((x) => x.alive)) {
        const s = await m.client.clusterStatus();
        if (s.acceptingWrites) return { leader: m, status: s };
      }
      return undefined;
    },
    { timeoutMs: ms, what: 'a leader accepting writes', intervalMs: 25 },
  );
}

async function allEvents(c: ChronactaClient): Promise<string[]> {
  // Each member's own applied events (a follower read within its bound; leader reads would all go to the leader).
  const r = await c.readAll({ maxCount: 1000, readConsistency: 'follower' });
  return r.events.map((e) => `${e.position}|${e.stream}|${e.version}|${e.id}|${Buffer.from(e.data).toString()}`);
}

describe('plexus chronacta serve --cluster, three processes', () => {
  it('documents the cluster commands in --help and refuses to overwrite cluster files without --force', async () => {
    for (const args of [
      ['cluster', 'init', '--help'],
      ['cluster', 'status', '--help'],
      ['serve', '--help'],
    ]) {
      const h = await cli(...args);
      expect(h.code, h.stderr).toBe(0);
      expect(h.stdout).toContain('cluster init --members N --root DIR');
      expect(h.stdout).toContain('serve --cluster');
    }
    const again = await cli('cluster', 'init', '--members', '3', '--root', root);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('--force');
  });

  it('redirects keyed appends from a follower to the leader, replicates them, reports status, metrics and readyz; survives a SIGKILLed leader', async () => {
    const { leader, status } = await leaderOf();
    expect(status.mode).toBe('cluster');
    expect(status.role).toBe('leader');
    const follower = members.find((m) => m !== leader) as Member;
    const other = members.find((m) => m !== leader && m !== follower) as Member;

    // A follower refuses an unkeyed append: FAILED_PRECONDITION with the leader's address.
    const refused = await follower.client.append('orders', [{ type: 't', data: 'x' }]).catch((e: unknown) => e);
    expect(refused).toMatchObject({
      code: 'PLX_CHRONACTA_HA_NOT_LEADER',
      details: { leaderAddress: leader.address, grpcStatus: 9 },
    });

    // A live subscription on the other follower sees the replicated events as they apply.
    const live: bigint[] = [];
    const sub = other.client.subscribe({ all: true, fromPosition: 'start' });
    const reader = (async () => {
      for await (const m of sub) {
        if (m.kind === 'event') live.push(m.event.position);
        if (live.length === 30) break;
      }
    })();
    // Keyed appends sent to the follower land on the leader.
    const acked: { key: string; position: bigint }[] = [];
    const client = new ChronactaClient(follower.address, { deadlineMs: 5000, appendAttempts: 60, retryDelayMs: 50 });
    try {
      for (let i = 0; i < 30; i++) {
        const r = await client.append(`orders-${i % 4}`, [{ type: 't', data: `e${i}` }], { idempotencyKey: `k${i}` });
        acked.push({ key: `k${i}`, position: r.lastPosition });
      }
      expect(acked.map((a) => a.position)).toEqual(Array.from({ length: 30 }, (_, i) => BigInt(i + 1)));
      const want = await allEvents(leader.client);
      expect(want).toHaveLength(30);
      for (const m of [follower, other]) {
        await until(async () => ((await allEvents(m.client)).length === 30 ? true : undefined), {
          timeoutMs: 5000,
          what: 'replication',
          intervalMs: 25,
        });
        expect(await allEvents(m.client)).toEqual(want);
      }

      await until(async () => (live.length === 30 ? true : undefined), {
        timeoutMs: 5000,
        what: 'the follower subscription',
        intervalMs: 25,
      });
      sub.close();
      await reader.catch(() => undefined);
      expect(live).toEqual(Array.from({ length: 30 }, (_, i) => BigInt(i + 1)));

      // ClusterService on the follower: leader, term, members with addresses.
      const fs = await follower.client.clusterStatus();
      expect(fs).toMatchObject({ role: 'follower', leaderId: String(leader.id), leaderAddress: leader.address });
      expect(fs.members).toHaveLength(3);
      expect(fs.lastPosition).toBe(30n);

      // Metrics and readiness.
      const lm = (await http(`http://${leader.metrics}/metrics`)).body;
      const fm = (await http(`http://${follower.metrics}/metrics`)).body;
      expect(metric(lm, 'chronacta_cluster_leader')).toBe(1);
      expect(metric(fm, 'chronacta_cluster_leader')).toBe(0);
      expect(metric(lm, 'chronacta_cluster_epoch')).toBe(Number(status.term));
      expect(metric(fm, 'chronacta_replication_append_entries_total')).toBeGreaterThanOrEqual(30);
      expect(metric(lm, 'chronacta_replication_lag_positions')).toBeGreaterThanOrEqual(0);
      await until(async () => ((await http(`http://${leader.metrics}/readyz`)).status === 200 ? true : undefined), {
        timeoutMs: 5000,
        what: 'the leader ready (no lag)',
        intervalMs: 25,
      });

      // The leader is SIGKILLed while a writer appends (keyed, retried): a new leader takes
      // appends, and every acknowledged event is on every survivor, once, at its position.
      const bg: { key: string; position: bigint }[] = [];
      let stopWriter = false;
      const writer = (async () => {
        for (let i = 0; !stopWriter; i++) {
          const key = `bg${i}`;
          const w = await client.append('bg', [{ type: 't', data: key }], { idempotencyKey: key });
          bg.push({ key, position: w.lastPosition });
        }
      })();
      await until(async () => (bg.length >= 5 ? true : undefined), {
        timeoutMs: 5000,
        what: 'the writer running',
        intervalMs: 25,
      });
      const killedAt = performance.now();
      await stopMember(leader, 'SIGKILL');
      const r = await client.append('orders-0', [{ type: 't', data: 'after' }], { idempotencyKey: 'after-kill' });
      const failoverMs = performance.now() - killedAt;
      console.log(`failover (SIGKILL to first acknowledged append): ${failoverMs.toFixed(0)} ms`);
      expect(r.lastPosition).toBeGreaterThan(30n);
      const afterKill = bg.length;
      await until(async () => (bg.length >= afterKill + 5 ? true : undefined), {
        timeoutMs: 5000,
        what: 'the writer on the new leader',
        intervalMs: 25,
      });
      stopWriter = true;
      await writer;
      const { leader: next } = await leaderOf();
      expect(next).not.toBe(leader);
      const total = 31 + bg.length;
      for (const m of [follower, other]) {
        await until(async () => ((await allEvents(m.client)).length === total ? true : undefined), {
          timeoutMs: 5000,
          what: 'replication',
          intervalMs: 25,
        });
        const got = await allEvents(m.client);
        expect(got.slice(0, 30)).toEqual(want);
        const byData = new Map(got.map((line) => [line.split('|')[4], line]));
        expect(byData.size).toBe(got.length); // no event twice
        for (const a of bg) expect(byData.get(a.key)?.split('|')[0]).toBe(String(a.position));
        expect(byData.get('after')?.split('|')[0]).toBe(String(r.lastPosition));
      }
      // A retry with the same key is answered as a duplicate, not appended again.
      const dup = await client.append('orders-0', [{ type: 't', data: 'after' }], { idempotencyKey: 'after-kill' });
      expect(dup).toMatchObject({ duplicate: true, lastPosition: r.lastPosition });
      // The dead member lags behind the new leader: /readyz says not ready (ReadinessMaxReplicationLag 0).
      const ready = await http(`http://${next.metrics}/readyz`);
      expect(ready.status).toBe(503);
      expect(JSON.parse(ready.body).checks.replication.ok).toBe(false);
      const nm = (await http(`http://${next.metrics}/metrics`)).body;
      expect(metric(nm, 'chronacta_replication_lag_positions')).toBeGreaterThanOrEqual(1);
    } finally {
      client.close();
    }
  }, 60_000);
});
