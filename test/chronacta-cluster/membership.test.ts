/**
 * Cluster membership from the CLI, with real `node dist/cli/main.js chronacta serve --cluster`
 * processes on loopback: three members, a fourth made with `cluster join-files`, started and
 * added with `cluster add` (sent to a follower, which redirects), its events arriving; then a
 * member removed with `cluster remove`; every member's cluster.json following the membership;
 * and every refusal with its code. Build first: `npx tsc -p tsconfig.build.json`.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { parseAddMember, parseRemoveMember } from '../../ts/chronacta/cluster-api.js';
import { followerReadBounds } from '../../ts/chronacta/cluster-config.js';
import { type ClusterFile, joinFiles, membershipFile } from '../../ts/chronacta/layout.js';
import { methodDefinition } from '../../ts/chronacta/proto.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { until } from '../helpers/until.js';
import { cli, initCluster, MAIN, type ServeMember, spawnMember, stopAll, stopMember } from './helpers.js';

type Member = ServeMember;

/** Every process this file started (stopped by PID in afterAll, whatever happened). */
const children = new Set<ChildProcess>();

/** A member process at a 50 ms tick. */
const spawnAt50 = (id: number, dataDir: string) => spawnMember(id, dataDir, ['--tick-ms', '50'], children);

function clusterJson(m: Member): ClusterFile {
  return JSON.parse(readFileSync(join(m.dataDir, 'cluster', 'cluster.json'), 'utf8')) as ClusterFile;
}

let root = '';
const members: Member[] = [];
const ports: number[] = [];

beforeAll(async () => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.build.json)`);
  const made = await initCluster('plexus-chronacta-membership-', 6);
  root = made.root;
  ports.push(...made.ports);
  expect(made.init.code).toBe(0);
  const started = await Promise.all([1, 2, 3].map((id) => spawnAt50(id, join(root, `node-${id}`))));
  members.push(...started);
}, 60_000);

afterAll(async () => {
  for (const m of members) await stopMember(m);
  await stopAll(children);
  if (root) rmSync(root, { recursive: true, force: true });
});

async function leaderOf(): Promise<Member> {
  return until(
    async () => {
      for (const m of members.filter((x) => x.alive)) {
        const s = await m.client.clusterStatus().catch(() => undefined);
        if (s?.acceptingWrites) return m;
      }
      return undefined;
    },
    { timeoutMs: 15_000, what: 'a leader accepting writes', intervalMs: 25 },
  );
}

async function positions(m: Member): Promise<string[]> {
  const r = await m.client.readAll({ maxCount: 1000, readConsistency: 'follower' });
  return r.events.map((e) => `${e.position}|${e.stream}|${Buffer.from(e.data).toString()}`);
}

describe('cluster membership files (pure)', () => {
  const base: ClusterFile = {
    version: 1,
    clusterId: 'c',
    mode: 'cluster',
    epoch: 3,
    leader: '',
    members: [
      { id: '1', address: 'h:1', raftAddress: 'h:2' },
      { id: '2', address: 'h:3', raftAddress: 'h:4' },
    ],
  };
  const m = (id: number, p: number) => ({ id, advertise: `h:${p}`, raftAddress: `h:${p + 1}` });

  it('rewrites cluster.json only when the applied membership differs, with the epoch incremented', () => {
    expect(membershipFile(base, { voters: [1, 2], learners: [], members: [m(1, 1), m(2, 3)], leader: 1 })).toBe(
      undefined,
    );
    const added = membershipFile(base, {
      voters: [1, 2],
      learners: [3],
      members: [m(1, 1), m(2, 3), m(3, 5)],
      leader: 2,
    });
    expect(added).toMatchObject({ epoch: 4, leader: '2' });
    expect(added?.members).toEqual([
      { id: '1', address: 'h:1', raftAddress: 'h:2' },
      { id: '2', address: 'h:3', raftAddress: 'h:4' },
      { id: '3', address: 'h:5', raftAddress: 'h:6', learner: true },
    ]);
    const removed = membershipFile(added as ClusterFile, {
      voters: [1, 3],
      learners: [],
      members: [m(1, 1), m(3, 5)],
      leader: 1,
    });
    expect(removed).toMatchObject({ epoch: 5, removed: ['2'] });
    expect(removed?.members.map((x) => x.id)).toEqual(['1', '3']);
    // A joining member that has no configuration yet, or a member whose addresses are unknown: no change.
    expect(membershipFile(base, { voters: [], learners: [], members: [], leader: 0 })).toBe(undefined);
    expect(membershipFile(base, { voters: [1, 2, 9], learners: [], members: [m(1, 1), m(2, 3)], leader: 1 })).toBe(
      undefined,
    );
  });

  it('makes a joining member its files (join: true, itself a learner) and refuses a known id', () => {
    const f = joinFiles('c', [m(1, 1), m(2, 3)], m(4, 7));
    expect(f.node).toEqual({ version: 2, id: '4', advertiseAddress: 'h:7', clusterId: 'c', join: true });
    expect(f.cluster.members.at(-1)).toEqual({ id: '4', address: 'h:7', raftAddress: 'h:8', learner: true });
    expect(() => joinFiles('c', [m(1, 1)], m(1, 9))).toThrow(/already in the cluster/);
  });

  it('checks AddMember and RemoveMember requests: arbitrary bytes and fields give a member or a coded refusal', () => {
    const codes = new Set(['PLX_CHRONACTA_BAD_INPUT', 'PLX_CHRONACTA_CLUSTER_BAD_ADDRESS']);
    const refusedOrMember = (f: () => unknown) => {
      try {
        return f();
      } catch (e) {
        if (!isPlexusError(e) || !codes.has(e.code)) throw e;
        return undefined;
      }
    };
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        const add = refusedOrMember(() => parseAddMember(bytes)) as ReturnType<typeof parseAddMember> | undefined;
        if (add) expect(add.member.id).toBeGreaterThanOrEqual(1);
        const id = refusedOrMember(() => parseRemoveMember(bytes)) as number | undefined;
        if (id !== undefined) expect(Number.isSafeInteger(id) && id >= 1).toBe(true);
      }),
      { numRuns: 2000 },
    );
    const def = methodDefinition('ClusterService', 'AddMember');
    const address = fc.oneof(
      fc.string({ maxLength: 20 }),
      fc
        .tuple(fc.constantFrom('127.0.0.1', 'h', '', '[::1]'), fc.integer({ min: -5, max: 70_000 }))
        .map(([h, p]) => `${h}:${p}`),
    );
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
        address,
        address,
        fc.boolean(),
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        (id, raftAddress, advertise, learner, catchUpMs) => {
          const bytes = def.requestSerialize({ id: id.toString(), raftAddress, advertise, learner, catchUpMs });
          const r = refusedOrMember(() => parseAddMember(bytes)) as ReturnType<typeof parseAddMember> | undefined;
          const good = (a: string) =>
            /^.+:\d+$/.test(a) &&
            Number(a.slice(a.lastIndexOf(':') + 1)) >= 1 &&
            Number(a.slice(a.lastIndexOf(':') + 1)) <= 65535;
          const ok = id >= 1n && id <= 2n ** 53n - 1n && good(raftAddress) && good(advertise) && catchUpMs <= 3_600_000;
          expect(r !== undefined).toBe(ok);
          if (r) expect(r).toEqual({ member: { id: Number(id), raftAddress, advertise }, learner, catchUpMs });
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('fills the follower-read bounds from the Raft timing and refuses bad ones', () => {
    expect(followerReadBounds({})).toEqual({ maxReadLag: 0, maxReadStalenessMs: 1000 });
    expect(followerReadBounds({ tickMs: 20 })).toEqual({ maxReadLag: 0, maxReadStalenessMs: 200 });
    expect(followerReadBounds({ maxReadLag: 5, maxReadStalenessMs: 50 })).toEqual({
      maxReadLag: 5,
      maxReadStalenessMs: 50,
    });
    expect(() => followerReadBounds({ maxReadLag: -1 })).toThrow(
      expect.objectContaining({ code: 'PLX_CHRONACTA_HA_BAD_CONFIG' }),
    );
    expect(() => followerReadBounds({ maxReadStalenessMs: 0 })).toThrow(
      expect.objectContaining({ code: 'PLX_CHRONACTA_HA_BAD_CONFIG' }),
    );
  });
});

describe('plexus chronacta cluster add | remove | join-files, real processes', () => {
  it('documents the membership commands in --help', async () => {
    const h = await cli('cluster', 'add', '--help');
    for (const s of [
      'cluster join-files',
      'cluster add --server ADDR --id N',
      'cluster remove --server ADDR --id N',
      '--max-read-staleness-ms',
      '--consistency leader|follower',
    ]) {
      expect(h.stdout).toContain(s);
    }
  });

  it('adds a fourth member through a follower, replicates to it, refuses bad changes, removes a member; cluster.json follows', async () => {
    const leader = await leaderOf();
    const follower = members.find((m) => m !== leader) as Member;
    const writer = new ChronactaClient(leader.address, { deadlineMs: 5000, appendAttempts: 20, retryDelayMs: 50 });
    try {
      for (let i = 0; i < 10; i++)
        await writer.append('before', [{ type: 't', data: `b${i}` }], { idempotencyKey: `b${i}` });

      // The new member's data directory, from the membership a follower reports.
      const adv4 = `127.0.0.1:${ports[6]}`;
      const raft4 = `127.0.0.1:${ports[7]}`;
      const dir4 = join(root, 'node-4');
      /** `cluster join-files` through the follower for id `id` at member 4's addresses. */
      const joinFiles = (id: string, data: string) =>
        cli(
          'cluster',
          'join-files',
          '--server',
          follower.address,
          '--id',
          id,
          '--raft-address',
          raft4,
          '--advertise',
          adv4,
          '--data',
          data,
          ...certs,
        );
      // Its certificate is issued with the cluster CA's key, which `cluster init` left at the root.
      let certs = ['--ca-dir', root];
      const jf = await joinFiles('4', dir4);
      expect(jf.code, jf.stderr).toBe(0);
      const node4 = JSON.parse(readFileSync(join(dir4, 'cluster', 'node.json'), 'utf8'));
      expect(node4).toMatchObject({ id: '4', advertiseAddress: adv4, join: true });
      // join-files refuses an id the cluster has, and a directory with cluster files.
      const again = await joinFiles('4', dir4);
      expect(again.code).toBe(2);
      expect(again.stderr).toContain('--force');
      const known = await joinFiles('2', join(root, 'x'));
      expect(known.code).toBe(2);
      expect(known.stderr).toContain('already in the cluster');
      // Without a certificate, or with one that names another member, nothing is written.
      certs = [];
      const none = await joinFiles('5', join(root, 'y'));
      expect(none.code).toBe(2);
      expect(none.stderr).toContain('--ca-dir CA');
      const tls4 = join(dir4, 'cluster', 'tls');
      certs = ['--cert', join(tls4, 'member.pem'), '--key', join(tls4, 'member-key.pem'), '--ca', join(root, 'ca.pem')];
      const other = await joinFiles('5', join(root, 'y'));
      expect(other.code).toBe(1);
      expect(other.stderr).toContain('PLX_CHRONACTA_HA_BAD_CERTIFICATE');
      expect(existsSync(join(root, 'y', 'cluster', 'cluster.json'))).toBe(false);

      const m4 = await spawnAt50(4, dir4);
      members.push(m4);
      // Sent to a follower: redirected to the leader, which adds 4 as a learner, then a voter.
      const add = await cli(
        'cluster',
        'add',
        '--server',
        follower.address,
        '--id',
        '4',
        '--raft-address',
        raft4,
        '--advertise',
        adv4,
      );
      expect(add.code, add.stderr).toBe(0);
      const added = JSON.parse(add.stdout.trim());
      // (Leadership may move on a loaded machine: the change is made by whoever leads.)
      expect(added).toMatchObject({ added: 4 });
      expect(members.map((m) => m.address)).toContain(added.leaderAddress);
      // The member that made the change rewrote its cluster.json before it answered.
      const maker = members.find((m) => m.address === added.leaderAddress) as Member;
      expect(clusterJson(maker).members.map((x) => [x.id, x.learner ?? false])).toEqual([
        ['1', false],
        ['2', false],
        ['3', false],
        ['4', false],
      ]);
      expect(added.voters).toEqual(['1', '2', '3', '4']);
      expect(added.learners).toEqual([]);

      for (let i = 0; i < 5; i++)
        await writer.append('after', [{ type: 't', data: `a${i}` }], { idempotencyKey: `a${i}` });
      const want = await positions(leader);
      expect(want).toHaveLength(15);
      await until(async () => ((await positions(m4)).length === 15 ? true : undefined), {
        timeoutMs: 10_000,
        what: 'member 4 caught up',
        intervalMs: 25,
      });
      expect(await positions(m4)).toEqual(want);
      const s4 = await m4.client.clusterStatus();
      expect(s4).toMatchObject({ role: 'follower', lastPosition: 15n });
      expect(members.map((m) => m.address)).toContain(s4.leaderAddress);

      // Every member's cluster.json lists the four voters, with a higher epoch.
      for (const m of members) {
        const f = await until(
          async () => {
            const c = clusterJson(m);
            return c.members.length === 4 && c.members.every((x) => !x.learner) ? c : undefined;
          },
          { timeoutMs: 5000, what: `cluster.json of member ${m.id}`, intervalMs: 25 },
        );
        expect(f.members.map((x) => x.id)).toEqual(['1', '2', '3', '4']);
        expect(f.members[3]).toEqual({ id: '4', address: adv4, raftAddress: raft4 });
        expect(f.epoch).toBeGreaterThanOrEqual(1);
      }

      // Refusals, each with its code.
      const dup = await cli(
        'cluster',
        'add',
        '--server',
        leader.address,
        '--id',
        '4',
        '--raft-address',
        `127.0.0.1:${ports[8]}`,
        '--advertise',
        `127.0.0.1:${ports[9]}`,
      );
      expect(dup.code).toBe(1);
      expect(dup.stderr).toContain('PLX_CHRONACTA_CLUSTER_DUPLICATE_ID');
      const taken = await leader.client
        .addMember({ id: 9, raftAddress: `127.0.0.1:${ports[8]}`, advertise: leader.address })
        .catch((e: unknown) => e);
      expect(taken).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_BAD_ADDRESS', details: { address: leader.address } });
      const badCli = await cli(
        'cluster',
        'add',
        '--server',
        leader.address,
        '--id',
        '9',
        '--raft-address',
        'nohost',
        '--advertise',
        adv4,
      );
      expect(badCli.code).toBe(2);
      expect(badCli.stderr).toContain('is not host:port');
      const badRpc = await leader.client
        .addMember({ id: 9, raftAddress: '127.0.0.1:0', advertise: 'x' })
        .catch((e: unknown) => e);
      expect(badRpc).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_BAD_ADDRESS', details: { grpcStatus: 3 } });
      // Sent to a follower: redirected, then refused by the leader.
      const unknown = await follower.client.removeMember(7).catch((e: unknown) => e);
      expect(unknown).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_UNKNOWN_ID', details: { id: 7, grpcStatus: 5 } });

      // A change while another runs: member 5 has no process, so it never catches up and its add
      // waits; a removal meanwhile is refused. The add then fails and 5 stays a learner.
      const slow = leader.client
        .addMember(
          { id: 5, raftAddress: `127.0.0.1:${ports[10]}`, advertise: `127.0.0.1:${ports[11]}` },
          { catchUpMs: 1500 },
        )
        .catch((e: unknown) => e);
      await until(
        async () => ((await leader.client.clusterStatus()).members.some((x) => x.id === '5') ? true : undefined),
        { timeoutMs: 5000, what: 'member 5 being added', intervalMs: 25 },
      );
      const pending = await leader.client.removeMember(3).catch((e: unknown) => e);
      expect(pending).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_CHANGE_PENDING', details: { grpcStatus: 10 } });
      expect(await slow).toMatchObject({ code: 'PLX_CHRONACTA_HA_MEMBERSHIP' });
      const learner = await leader.client.removeMember(5);
      expect(learner.learners).toEqual([]);
      // Ids are never reused.
      const reuse = await leader.client
        .addMember({ id: 5, raftAddress: `127.0.0.1:${ports[10]}`, advertise: `127.0.0.1:${ports[11]}` })
        .catch((e: unknown) => e);
      expect(reuse).toMatchObject({ code: 'PLX_CHRONACTA_CLUSTER_DUPLICATE_ID' });

      // Remove a follower other than 4 through the CLI; the survivors' cluster.json drop it.
      const gone = members.find((m) => m !== leader && m !== m4) as Member;
      const rm = await cli('cluster', 'remove', '--server', m4.address, '--id', String(gone.id));
      expect(rm.code, rm.stderr).toBe(0);
      expect(JSON.parse(rm.stdout.trim()).voters).not.toContain(String(gone.id));
      await stopMember(gone);
      const survivors = members.filter((m) => m.alive);
      expect(survivors).toHaveLength(3);
      for (const m of survivors) {
        const f = await until(
          async () => {
            const c = clusterJson(m);
            return c.members.length === 3 && !c.members.some((x) => x.id === String(gone.id)) ? c : undefined;
          },
          { timeoutMs: 5000, what: `cluster.json of member ${m.id} without member ${gone.id}`, intervalMs: 25 },
        );
        expect(f.removed).toContain(String(gone.id));
        expect(f.epoch).toBeGreaterThanOrEqual(2);
      }
      // The three survivors commit on their own.
      await writer.append('end', [{ type: 't', data: 'z' }], { idempotencyKey: 'z' });
      for (const m of survivors) {
        await until(async () => ((await positions(m)).length === 16 ? true : undefined), {
          timeoutMs: 5000,
          what: `member ${m.id} at 16`,
          intervalMs: 25,
        });
      }

      // Down to one voter, which cannot be removed.
      const final = await leaderOf();
      for (const m of survivors.filter((x) => x !== final)) {
        const r = await final.client.removeMember(m.id);
        expect(r.voters).not.toContain(String(m.id));
        await stopMember(m);
      }
      const last = await cli('cluster', 'remove', '--server', final.address, '--id', String(final.id));
      expect(last.code).toBe(1);
      expect(last.stderr).toContain('PLX_CHRONACTA_CLUSTER_LAST_VOTER');
      expect((await final.client.clusterStatus()).acceptingWrites).toBe(true);
    } finally {
      writer.close();
    }
  }, 40_000);
});
