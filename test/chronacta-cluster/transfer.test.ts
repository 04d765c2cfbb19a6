/**
 * Leadership transfer as an RPC (ClusterService.TransferLeader) and a CLI command (`plexus
 * chronacta cluster transfer`), on three real `node dist/cli/main.js chronacta serve --cluster`
 * processes: sent to a follower (redirected), without `--to` (the most caught-up other voter)
 * and with it; the new leader seen in status, taking appends, the old one redirecting; the
 * refusals with their codes. Plus the pure rules: the target choice and the request parsing
 * (fuzzed). Build first: `npx tsc -p tsconfig.build.json`.
 */
import { existsSync } from 'node:fs';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { parseTransferLeader, transferTarget } from '../../ts/chronacta/cluster-api.js';
import type { ReplicatedLogStatus } from '../../ts/chronacta/cluster-log.js';
import { methodDefinition } from '../../ts/chronacta/proto.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { until } from '../helpers/until.js';
import { cli, MAIN, signalMember, startThree, type ThreeMembers } from './helpers.js';

const settle = <T>(p: Promise<T>) =>
  p.then(
    (value) => ({ value, error: undefined }),
    (error: unknown) => ({ value: undefined, error }),
  );

describe('transfer rules', () => {
  it('picks the most caught-up other voter, the lowest id among equals, never a learner or itself', () => {
    const base = { id: 1, voters: [1, 2, 3, 4], learners: [5] } as unknown as ReplicatedLogStatus;
    const f = (id: number, match: number, learner = false) => ({ id, match, learner });
    const with_ = (followers: ReturnType<typeof f>[], voters = [1, 2, 3, 4]) =>
      ({ ...base, voters, followers }) as unknown as ReplicatedLogStatus;
    expect(transferTarget(with_([f(2, 10), f(3, 12), f(4, 12), f(5, 99, true)]))).toBe(3);
    expect(transferTarget(with_([f(2, 12), f(3, 12)]))).toBe(2);
    expect(transferTarget(with_([f(5, 99, true)]))).toBeUndefined();
    expect(transferTarget(with_([f(2, 5)], [1]))).toBeUndefined();
    expect(transferTarget({ ...base, followers: undefined } as unknown as ReplicatedLogStatus)).toBeUndefined();
  });

  it('parses TransferLeader requests and refuses any other bytes with PLX_CHRONACTA_BAD_INPUT', () => {
    const def = methodDefinition('ClusterService', 'TransferLeader');
    const enc = (o: object) => new Uint8Array(def.requestSerialize(o));
    expect(parseTransferLeader(enc({}))).toEqual({ to: 0, timeoutMs: 10_000 });
    expect(parseTransferLeader(enc({ to: '3', timeoutMs: 500 }))).toEqual({ to: 3, timeoutMs: 500 });
    const big = (() => {
      try {
        return parseTransferLeader(enc({ to: '18446744073709551615' }));
      } catch (e) {
        return e;
      }
    })();
    expect(isPlexusError(big, 'PLX_CHRONACTA_BAD_INPUT')).toBe(true);
    const long = (() => {
      try {
        return parseTransferLeader(enc({ timeoutMs: 4_000_000 }));
      } catch (e) {
        return e;
      }
    })();
    expect(isPlexusError(long, 'PLX_CHRONACTA_BAD_INPUT')).toBe(true);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        try {
          const r = parseTransferLeader(bytes);
          expect(Number.isSafeInteger(r.to) && r.to >= 0).toBe(true);
          expect(r.timeoutMs >= 1 && r.timeoutMs <= 3_600_000).toBe(true);
        } catch (e) {
          expect(isPlexusError(e, 'PLX_CHRONACTA_BAD_INPUT')).toBe(true);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('cluster transfer on three serve --cluster processes', () => {
  let three: ThreeMembers | undefined;
  beforeAll(async () => {
    if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.build.json)`);
    three = await startThree('plexus-chronacta-transfer-', ['--tick-ms', '50']);
  }, 60_000);
  afterAll(async () => {
    await three?.close();
  });

  it('documents cluster transfer and promote in --help and checks the flags before sending', async () => {
    const h = await cli('cluster', 'transfer', '--help');
    expect(h.code).toBe(0);
    expect(h.stdout).toContain('cluster transfer --server ADDR [--to N] [--timeout-ms MS]');
    expect(h.stdout).toContain('cluster promote --server ADDR --id N [--catch-up-ms MS]');
    const bad = await cli('cluster', 'transfer', '--server', '127.0.0.1:1', '--to', 'two');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--to');
  });

  it('hands leadership over through a follower, to the most caught-up voter or the one named; the old leader redirects', async () => {
    const t = three as ThreeMembers;
    const first = await t.leader();
    const writer = new ChronactaClient(first.address, { deadlineMs: 5000, appendAttempts: 40, retryDelayMs: 50 });
    try {
      for (let i = 0; i < 5; i++) {
        await writer.append('orders', [{ type: 't', data: `a${i}` }], { idempotencyKey: `a${i}` });
      }
      const via = t.members.find((m) => m !== first) as (typeof t.members)[number];
      // No --to, sent to a follower: it redirects to the leader, which picks a voter.
      const out = await cli('cluster', 'transfer', '--server', via.address);
      expect(out.code, out.stderr).toBe(0);
      const r = JSON.parse(out.stdout.trim()) as Record<string, unknown>;
      expect(r).toMatchObject({ transferred: true, previousLeaderId: String(first.id) });
      expect(r.leaderId).not.toBe(String(first.id));
      const second = t.members.find((m) => String(m.id) === r.leaderId) as (typeof t.members)[number];
      expect(r.leaderAddress).toBe(second.address);
      // Every member agrees on the new leader, which takes appends.
      for (const m of t.members) {
        await until(async () => ((await m.client.clusterStatus()).leaderId === String(second.id) ? true : undefined), {
          timeoutMs: 5000,
          what: `member ${m.id} following ${second.id}`,
          intervalMs: 25,
        });
      }
      expect((await second.client.clusterStatus()).acceptingWrites).toBe(true);
      const w = await writer.append('orders', [{ type: 't', data: 'moved' }], { idempotencyKey: 'moved' });
      expect(w.lastPosition).toBe(6n);
      // The old leader refuses an unkeyed append, naming the new one.
      const refused = await settle(first.client.append('orders', [{ type: 't', data: 'x' }]));
      expect(refused.error).toMatchObject({
        code: 'PLX_CHRONACTA_HA_NOT_LEADER',
        details: { leaderAddress: second.address },
      });

      // With --to, through the client API, sent to the old leader (a follower now): back to it.
      const back = await first.client.transferLeader({ to: first.id });
      expect(back).toMatchObject({ leaderId: String(first.id), previousLeaderId: String(second.id) });
      expect((await t.leader()).id).toBe(first.id);
      // To the leader itself: nothing to do, it still leads.
      const self = await first.client.transferLeader({ to: first.id });
      expect(self).toMatchObject({ leaderId: String(first.id), previousLeaderId: String(first.id) });
      const w2 = await writer.append('orders', [{ type: 't', data: 'back' }], { idempotencyKey: 'back' });
      expect(w2.lastPosition).toBe(7n);
    } finally {
      writer.close();
    }
  }, 60_000);

  it('refuses an unknown id, and a target that does not take over in time', async () => {
    const t = three as ThreeMembers;
    const leader = await t.leader();
    const viaClient = await settle(leader.client.transferLeader({ to: 9 }));
    expect(viaClient.error).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_UNKNOWN_ID', details: { grpcStatus: 5 } });

    // A frozen target never takes over: refused after the wait, and the leader stays.
    const target = t.members.find((m) => m !== leader) as (typeof t.members)[number];
    signalMember(target, 'SIGSTOP');
    try {
      const started = performance.now();
      const late = await settle(leader.client.transferLeader({ to: target.id, timeoutMs: 800 }));
      expect(late.error).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_TRANSFER_TIMEOUT', details: { grpcStatus: 14 } });
      expect(performance.now() - started).toBeLessThan(4000);
    } finally {
      signalMember(target, 'SIGCONT');
    }
    // The cluster goes on with a leader that takes appends.
    const writer = new ChronactaClient(leader.address, { deadlineMs: 5000, appendAttempts: 40, retryDelayMs: 50 });
    try {
      const w = await writer.append('orders', [{ type: 't', data: 'after-timeout' }], { idempotencyKey: 'late' });
      expect(w.lastPosition).toBeGreaterThan(0n);
    } finally {
      writer.close();
    }
  }, 60_000);
});
