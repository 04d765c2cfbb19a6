/**
 * A learner whose catch-up wait timed out, on real `node dist/cli/main.js chronacta serve
 * --cluster` processes: AddMember of a member that is not running yet fails after its wait and
 * says to promote it later; the member stays a learner (it cannot lead: a transfer to it is
 * refused); PromoteMember refuses while it is behind, refuses voters and unknown ids, and once
 * the member runs and has caught up `cluster promote` makes it a voter, as etcd's `member
 * promote` does.
 * Build first: `npx tsc -p tsconfig.build.json`.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { parsePromoteMember } from '../../ts/chronacta/cluster-api.js';
import { joinFiles, writeClusterFiles } from '../../ts/chronacta/layout.js';
import { issueMemberFiles, readCa } from '../../ts/chronacta/member-tls.js';
import { methodDefinition } from '../../ts/chronacta/proto.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { until } from '../helpers/until.js';
import { cli, MAIN, spawnMember, startThree, type ThreeMembers } from './helpers.js';

const settle = <T>(p: Promise<T>) =>
  p.then(
    (value) => ({ value, error: undefined }),
    (error: unknown) => ({ value: undefined, error }),
  );

describe('PromoteMember requests', () => {
  it('parses them and refuses any other bytes with PLX_CHRONACTA_BAD_INPUT', () => {
    const def = methodDefinition('ClusterService', 'PromoteMember');
    const enc = (o: object) => new Uint8Array(def.requestSerialize(o));
    expect(parsePromoteMember(enc({ id: '4' }))).toEqual({ id: 4, catchUpMs: 10_000 });
    expect(parsePromoteMember(enc({ id: '4', catchUpMs: 250 }))).toEqual({ id: 4, catchUpMs: 250 });
    for (const bad of [{}, { id: '0' }, { id: '9007199254740993' }, { id: '4', catchUpMs: 3_600_001 }]) {
      let err: unknown;
      try {
        parsePromoteMember(enc(bad));
      } catch (e) {
        err = e;
      }
      expect(isPlexusError(err, 'PLX_CHRONACTA_BAD_INPUT')).toBe(true);
    }
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        try {
          const r = parsePromoteMember(bytes);
          expect(Number.isSafeInteger(r.id) && r.id >= 1).toBe(true);
        } catch (e) {
          expect(isPlexusError(e, 'PLX_CHRONACTA_BAD_INPUT')).toBe(true);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('promoting a learner whose catch-up timed out', () => {
  let three: ThreeMembers | undefined;
  beforeAll(async () => {
    if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.build.json)`);
    three = await startThree('plexus-chronacta-learner-', ['--tick-ms', '50'], 2);
  }, 60_000);
  afterAll(async () => {
    await three?.close();
  });

  it('add times out and says to promote; promote refuses while behind, then makes the caught-up learner a voter', async () => {
    const t = three as ThreeMembers;
    const leader = await t.leader();
    const follower = t.members.find((m) => m !== leader) as (typeof t.members)[number];
    const writer = new ChronactaClient(leader.address, { deadlineMs: 5000, appendAttempts: 40, retryDelayMs: 50 });
    try {
      for (let i = 0; i < 10; i++) {
        await writer.append('s', [{ type: 't', data: `e${i}` }], { idempotencyKey: `e${i}` });
      }
      const adv = `127.0.0.1:${t.ports[6]}`;
      const raft = `127.0.0.1:${t.ports[7]}`;
      const dir = join(t.root, 'node-4');
      // What `cluster join-files` writes (membership.test.ts runs the command itself).
      const s0 = await follower.client.clusterStatus();
      const current = s0.members.map((m) => ({
        id: Number(m.id),
        raftAddress: m.raftAddress ?? '',
        advertise: m.address,
      }));
      await writeClusterFiles(dir, joinFiles(s0.clusterId, current, { id: 4, raftAddress: raft, advertise: adv }));
      await issueMemberFiles(dir, await readCa(t.root), 4);
      // Added before it runs: the catch-up wait times out; the error says what to do next.
      const add = await settle(
        follower.client.addMember({ id: 4, raftAddress: raft, advertise: adv }, { catchUpMs: 400 }),
      );
      expect(add.error).toMatchObject({ code: 'PLX_CHRONACTA_HA_MEMBERSHIP', details: { id: 4, reason: 'behind' } });
      expect((add.error as Error).message).toContain('plexus chronacta cluster promote --id 4');
      const s = await leader.client.clusterStatus();
      expect(s.members.map((m) => m.id).sort()).toEqual(['1', '2', '3', '4']);

      // A learner cannot lead.
      const toLearner = await settle(follower.client.transferLeader({ to: 4 }));
      expect(toLearner.error).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_NOT_VOTER' });
      // Promote refuses while it is behind (down), a voter, and an unknown id.
      const behind = await settle(follower.client.promoteMember(4, { catchUpMs: 300 }));
      expect(behind.error).toMatchObject({
        code: 'PLX_CHRONACTA_CLUSTER_LEARNER_BEHIND',
        details: { id: 4, catchUpMs: 300, grpcStatus: 9 },
      });
      const voter = await settle(leader.client.promoteMember(follower.id));
      expect(voter.error).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_NOT_LEARNER' });
      const unknown = await settle(follower.client.promoteMember(9));
      expect(unknown.error).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_UNKNOWN_ID', details: { grpcStatus: 5 } });

      // Started later, it catches up as a learner; promote makes it a voter.
      const fourth = await spawnMember(4, dir, ['--tick-ms', '50'], t.children);
      t.members.push(fourth);
      await until(async () => ((await fourth.client.clusterStatus()).lastPosition === 10n ? true : undefined), {
        timeoutMs: 10_000,
        what: 'the learner catching up',
        intervalMs: 25,
      });
      const promoted = await cli('cluster', 'promote', '--server', follower.address, '--id', '4');
      expect(promoted.code, promoted.stderr).toBe(0);
      const r = JSON.parse(promoted.stdout.trim()) as { promoted: number; voters: string[]; learners: string[] };
      expect(r.promoted).toBe(4);
      expect(r.voters).toContain('4');
      expect(r.learners).not.toContain('4');
      // A voter now: it receives new entries and could lead.
      await writer.append('s', [{ type: 't', data: 'after' }], { idempotencyKey: 'after' });
      await until(async () => ((await fourth.client.clusterStatus()).lastPosition === 11n ? true : undefined), {
        timeoutMs: 5000,
        what: 'replication to the new voter',
        intervalMs: 25,
      });
      const again = await settle(leader.client.promoteMember(4));
      expect(again.error).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_NOT_LEARNER' });
    } finally {
      writer.close();
    }
  }, 60_000);
});
