/**
 * Follower reads with a staleness bound, on three real `node dist/cli/main.js chronacta serve
 * --cluster` processes: a `follower` read served by a follower within the bound (its reply says
 * so, with its applied position), `leader` reads redirected to the leader, and a follower whose
 * leader is SIGSTOPped refusing with PLX_CHRONACTA_STALE_READ once the bound has passed, then
 * serving again under the leader elected meanwhile. Build first: `npx tsc -p tsconfig.build.json`.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { until } from '../helpers/until.js';
import { cli, initCluster, MAIN, type ServeMember, spawnMember, stopAll, stopMember } from './helpers.js';

type Member = ServeMember;

/** Every process this file started (stopped by PID in afterAll, whatever happened). */
const children = new Set<ChildProcess>();

// Elections take 10 to 20 ticks (2 to 4 s here): the staleness bound passes long before one,
// even on a loaded machine.
const TICK_MS = 200;
const BOUND_MS = 500;

let root = '';
const members: Member[] = [];

beforeAll(async () => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.build.json)`);
  const made = await initCluster('plexus-chronacta-followers-');
  root = made.root;
  expect(made.init.code).toBe(0);
  const flags = ['--tick-ms', String(TICK_MS), '--max-read-staleness-ms', String(BOUND_MS)];
  members.push(
    ...(await Promise.all([1, 2, 3].map((id) => spawnMember(id, join(root, `node-${id}`), flags, children)))),
  );
}, 60_000);

afterAll(async () => {
  for (const m of members) {
    if (m.child.pid !== undefined && m.child.exitCode === null) process.kill(m.child.pid, 'SIGCONT');
    await stopMember(m);
  }
  await stopAll(children);
  if (root) rmSync(root, { recursive: true, force: true });
});

async function leaderOf(among: Member[]): Promise<Member> {
  return until(
    async () => {
      for (const m of among) {
        const s = await m.client.clusterStatus().catch(() => undefined);
        if (s?.acceptingWrites) return m;
      }
      return undefined;
    },
    { timeoutMs: 15_000, what: 'a leader accepting writes', intervalMs: 25 },
  );
}

/**
 * Lets the staleness bound pass on the members' own clocks (separate processes: no manual
 * clock reaches them). The time that passes is the scenario: a read after it must show what
 * the bound promises, a read past it from a cut-off follower must be refused.
 */
const letTheBoundPass = (extraMs: number) => new Promise((r) => setTimeout(r, BOUND_MS + extraMs));

describe('follower reads with a staleness bound, real processes', () => {
  it('serves follower reads within the bound, redirects leader reads, refuses once a SIGSTOPped leader is past the bound', async () => {
    const leader = await leaderOf(members);
    const [follower, other] = members.filter((m) => m !== leader) as [Member, Member];
    const writer = new ChronactaClient(leader.address, { deadlineMs: 5000 });
    const followerReads = new ChronactaClient(follower.address, { deadlineMs: 5000, readConsistency: 'follower' });
    const noRedirect = new ChronactaClient(follower.address, { deadlineMs: 5000, followReadRedirects: false });
    try {
      for (let i = 0; i < 20; i++) await writer.append(`s-${i % 3}`, [{ type: 't', data: `e${i}` }]);
      const want = (await writer.readAll({ maxCount: 100 })).events.map((e) => e.position);
      expect(want).toHaveLength(20);

      // Once the bound has passed since the last acknowledged append, a follower read must see it.
      await letTheBoundPass(50);
      // (A follower may refuse when its question to the leader took longer than the bound; any read
      // it does serve must hold every event.)
      const fr = await until(
        async () => {
          const r = await noRedirect.readAll({ maxCount: 100, readConsistency: 'follower' });
          return r.read?.servedBy === 'follower' ? r : undefined;
        },
        { timeoutMs: 5000, what: 'a read served by the follower', intervalMs: 25 },
      );
      expect(fr.read).toEqual({ servedBy: 'follower', appliedPosition: 20n, address: follower.address });
      expect((await followerReads.readAll({ maxCount: 100 })).events).toHaveLength(20);
      expect(fr.events.map((e) => e.position)).toEqual(want);
      const fs = await until(
        async () => {
          const r = await noRedirect.readStream('s-1', { readConsistency: 'follower' });
          return r.read?.servedBy === 'follower' ? r : undefined;
        },
        { timeoutMs: 5000, what: 'a stream read served by the follower', intervalMs: 25 },
      );
      expect(fs.events.map((e) => Buffer.from(e.data).toString())).toEqual([
        'e1',
        'e4',
        'e7',
        'e10',
        'e13',
        'e16',
        'e19',
      ]);

      // Latency of the three ways to read (printed, not asserted: the machine is shared).
      const median = async (c: ChronactaClient, opts: { readConsistency?: 'leader' | 'follower' }) => {
        const xs: number[] = [];
        for (let i = 0; i < 40; i++) {
          const t = performance.now();
          await c.readAll({ maxCount: 10, ...opts });
          xs.push(performance.now() - t);
        }
        return xs.sort((a, b) => a - b)[20] as number;
      };
      const rounds: number[][] = [];
      for (let round = 0; round < 3; round++) {
        rounds.push([
          await median(followerReads, {}),
          await median(writer, { readConsistency: 'leader' }),
          await median(follower.client, { readConsistency: 'leader' }),
        ]);
      }
      const ms = (k: number) => rounds.map((r) => (r[k] as number).toFixed(2)).join('/');
      console.log(
        `readAll(10) median ms per round: follower read at a follower ${ms(0)}, leader read at the leader ${ms(1)}, leader read redirected by a follower ${ms(2)}`,
      );

      // Leader reads (the default) on a follower go to the leader.
      const lr = await follower.client.readAll({ maxCount: 100 });
      expect(lr.read).toMatchObject({ servedBy: 'leader', address: leader.address, appliedPosition: 20n });
      const refused = await noRedirect.readAll({}).catch((e: unknown) => e);
      expect(refused).toMatchObject({
        code: 'PLX_CHRONACTA_HA_NOT_LEADER',
        details: { leaderAddress: leader.address, grpcStatus: 9 },
      });
      const own = await leader.client.readAll({ readConsistency: 'follower' });
      expect(own.read).toMatchObject({ servedBy: 'leader', address: leader.address });

      // The CLI asks for follower reads with --consistency follower.
      const out = await cli('read', '--all', '--consistency', 'follower', '--server', other.address);
      expect(out.code, out.stderr).toBe(0);
      const last = JSON.parse(out.stdout.trim().split('\n').at(-1) as string);
      expect(last).toMatchObject({ servedBy: 'follower', servedAt: other.address, appliedPosition: 20 });
      const bad = await cli('read', '--all', '--consistency', 'any', '--server', other.address);
      expect(bad.code).toBe(2);

      // The leader stops answering: within the bound a follower may still serve; past it, it refuses.
      const pid = leader.child.pid as number;
      process.kill(pid, 'SIGSTOP');
      let resumed = false;
      try {
        const stoppedAt = performance.now();
        await letTheBoundPass(150);
        const stale = await noRedirect.readAll({ readConsistency: 'follower' }).catch((e: unknown) => e);
        const refusedAfter = performance.now() - stoppedAt;
        expect(stale).toMatchObject({
          code: 'PLX_CHRONACTA_STALE_READ',
          details: { leaderAddress: leader.address, grpcStatus: 9 },
        });
        expect((stale as Error).message).toMatch(/has not heard from its leader/);
        expect(refusedAfter).toBeGreaterThan(BOUND_MS);
        // Leader reads refused too: the follower names the (stopped) leader.
        const leaderRead = await noRedirect.readAll({}).catch((e: unknown) => e);
        expect(leaderRead).toMatchObject({ code: 'PLX_CHRONACTA_HA_NOT_LEADER' });

        // The other two elect a leader; follower reads resume under it and see every event.
        const next = await leaderOf([follower, other]);
        const nw = new ChronactaClient(next.address, { deadlineMs: 5000 });
        try {
          const r = await nw.append('s-0', [{ type: 't', data: 'after' }]);
          expect(r.lastPosition).toBe(21n);
        } finally {
          nw.close();
        }
        const reader = next === follower ? other : follower;
        const again = new ChronactaClient(reader.address, {
          deadlineMs: 5000,
          readConsistency: 'follower',
          followReadRedirects: false,
        });
        try {
          await letTheBoundPass(50);
          const rr = await until(async () => again.readAll({ maxCount: 100 }), {
            timeoutMs: 5000,
            what: 'a follower read under the new leader',
            intervalMs: 25,
          });
          expect(rr.read).toMatchObject({ servedBy: 'follower', appliedPosition: 21n });
          expect(rr.events).toHaveLength(21);
        } finally {
          again.close();
        }
        process.kill(pid, 'SIGCONT');
        resumed = true;
      } finally {
        if (!resumed) process.kill(pid, 'SIGCONT');
      }
    } finally {
      writer.close();
      followerReads.close();
      noRedirect.close();
    }
  }, 40_000);
});
