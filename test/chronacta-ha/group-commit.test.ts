/**
 * Group commit: appends that reach the leader while its Raft log is written (or in the same
 * turn) are proposed as one Raft entry carrying one EVFR frame per append. Each append keeps its
 * own positions, batch id, compare-and-set and fencing checks and its own outcome; every member
 * applies the frames as separate batches, and a restarted member replays such entries as
 * duplicates frame by frame.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { AppliedBatch, ReplicatedLog } from '../../ts/chronacta/cluster-log.js';
import { encodeEvfr } from '../../ts/codec/evfr.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { SOLO_FRAME_BYTES } from '../../ts/replication/replicated-log.js';
import { until } from '../helpers/until.js';
import { type Cluster, snapshot, startCluster, text } from './helpers.js';

/** Group commit is off unless configured (cluster.json of `cluster init` sets it); these tests turn it on. */
const GROUP = 128 * 1024;

let cluster: Cluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

function idOf(c: Cluster, log: ReplicatedLog): number {
  return [...c.logs].find(([, l]) => l === log)?.[0] as number;
}

async function sameEverywhere(c: Cluster): Promise<string[]> {
  const leader = await c.waitLeader();
  await until(() => c.ids.every((id) => c.logs.get(id)?.last === leader.last), {
    timeoutMs: 10_000,
    what: 'convergence',
  });
  const snaps = await Promise.all(c.ids.map((id) => snapshot(c.logs.get(id) as ReplicatedLog)));
  for (const s of snaps) expect(s).toEqual(snaps[0]);
  return snaps[0] as string[];
}

describe('group commit of concurrent appends', () => {
  it('is off by default: appends of one turn each get an entry of their own, the form earlier versions read', async () => {
    const c = (cluster = await startCluster());
    const leader = await c.waitLeader();
    await leader.append([text('first')]);
    const before = leader.status();
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => leader.append([text(`solo${i}`)])));
    expect(results.map((r) => r.first)).toEqual([2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n]);
    const after = leader.status();
    expect(after.appendGroupsProposed - before.appendGroupsProposed).toBe(8);
    expect(after.appendsGrouped - before.appendsGrouped).toBe(8);
    expect(await sameEverywhere(c)).toHaveLength(9);
  });

  it('gives an append of SOLO_FRAME_BYTES of frames or more an entry of its own; smaller ones around it still group', async () => {
    const c = (cluster = await startCluster(3, { groupCommitBytes: GROUP }));
    const leader = await c.waitLeader();
    await leader.append([text('first')]);
    const before = leader.status();
    const big = 'B'.repeat(SOLO_FRAME_BYTES);
    const results = await Promise.all([
      leader.append([text('a')]),
      leader.append([text('b')]),
      leader.append([text(big)]),
      leader.append([text('d')]),
      leader.append([text('e')]),
    ]);
    expect(results.map((r) => r.first)).toEqual([2n, 3n, 4n, 5n, 6n]);
    const after = leader.status();
    // [a, b], [big], [d, e]
    expect(after.appendGroupsProposed - before.appendGroupsProposed).toBe(3);
    expect(after.appendsGrouped - before.appendsGrouped).toBe(5);
    const all = await sameEverywhere(c);
    expect(all.map((r) => r.split('|')[3])).toEqual(['first', 'a', 'b', big, 'd', 'e']);
  });

  it('proposes the appends of one turn as one entry, each with its own positions, batch id and outcome', async () => {
    const c = (cluster = await startCluster(3, { groupCommitBytes: GROUP }));
    const leader = await c.waitLeader();
    await leader.append([text('first')]);
    await sameEverywhere(c); // every member applied it before the listeners start
    const applied = new Map<number, AppliedBatch[]>();
    for (const [id, log] of c.logs) {
      const got: AppliedBatch[] = [];
      applied.set(id, got);
      log.onApply((b) => got.push(b));
    }
    const before = leader.status();
    const ids = Array.from({ length: 12 }, (_, i) => new Uint8Array(16).fill(i + 1));
    // In one turn: good appends, a wrong compare-and-set, a right one, a stale epoch.
    const calls: Promise<unknown>[] = [];
    for (let i = 0; i < 12; i++) {
      const opts =
        i === 3
          ? { batchId: ids[i] as Uint8Array, expectedLast: 1n } // wrong: 7 is projected by then
          : i === 5
            ? { batchId: ids[i] as Uint8Array, expectedLast: 9n } // right: appends 0, 1, 2, 4 take 2..9
            : { batchId: ids[i] as Uint8Array };
      calls.push(leader.append([text(`g${i}`), text(`g${i}+`)], opts).catch((e: unknown) => e));
    }
    const results = await Promise.all(calls);
    const conflict = results[3];
    expect(isPlexusError(conflict) && conflict.code).toBe('PLX_STORAGE_CONFLICT');
    // Appends 0, 1, 2 took 2..7; 3 failed; 4 took 8..9; 5 expected 9 and got 10..11.
    const ok = results.filter((_r, i) => i !== 3) as { first: bigint; last: bigint; batchId: Uint8Array }[];
    expect(ok.map((r) => r.first)).toEqual([2n, 4n, 6n, 8n, 10n, 12n, 14n, 16n, 18n, 20n, 22n]);
    for (const r of ok) expect(r.last).toBe(r.first + 1n);
    expect(ok.map((r) => r.batchId[0])).toEqual([1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12]);
    // One Raft entry carried the 11 appends that passed their checks.
    const after = leader.status();
    expect(after.appendGroupsProposed - before.appendGroupsProposed).toBe(1);
    expect(after.appendsGrouped - before.appendsGrouped).toBe(11);

    const all = await sameEverywhere(c);
    expect(all.length).toBe(23);
    expect(all[2]?.split('|')[3]).toBe('g0+');
    expect(all[7]?.split('|')[3]).toBe('g4'); // position 8: the failed append left no gap
    expect(all[22]?.split('|')[3]).toBe('g11+');
    // Every member applied one batch per append, in order, all from the same Raft entry.
    await until(() => [...applied.values()].every((a) => a.length === 11), { timeoutMs: 5000, what: 'listeners' });
    for (const a of applied.values()) {
      expect(a.map((b) => b.first)).toEqual(ok.map((r) => r.first));
      expect(a.map((b) => b.batchId[0])).toEqual(ok.map((r) => r.batchId[0]));
      expect(new Set(a.map((b) => b.raftIndex)).size).toBe(1);
    }
    // Fencing stays per append: a stale epoch fails alone.
    const term = BigInt(leader.status().term);
    const mixed = await Promise.all([
      leader.append([text('h0')], { epoch: term }),
      leader.append([text('h1')], { epoch: term + 5n }).catch((e: unknown) => e),
      leader.append([text('h2')]),
    ]);
    expect((mixed[0] as { first: bigint }).first).toBe(24n);
    expect(isPlexusError(mixed[1]) && mixed[1].code).toBe('PLX_CHRONACTA_HA_NOT_LEADER');
    expect((mixed[2] as { first: bigint }).first).toBe(25n);
    expect((await sameEverywhere(c)).length).toBe(25);
  });

  it('replays grouped entries frame by frame after a restart', async () => {
    const c = (cluster = await startCluster(3, { groupCommitBytes: GROUP }));
    const leader = await c.waitLeader();
    await Promise.all(Array.from({ length: 8 }, (_, i) => leader.append([text(`a${i}`)])));
    await Promise.all(Array.from({ length: 8 }, (_, i) => leader.append([text(`b${i}`)])));
    const held = await sameEverywhere(c);
    const fid = c.ids.find((id) => id !== idOf(c, leader)) as number;
    await c.stop(fid);
    await Promise.all(Array.from({ length: 5 }, (_, i) => leader.append([text(`c${i}`)])));
    const back = await c.restart(fid);
    await until(() => back.last === 21n, { timeoutMs: 10_000, what: 'catch-up' });
    // The 16 appends it held come back from its Raft journal in two entries, skipped one frame at a time.
    expect(back.status().duplicatesSkipped).toBe(16);
    const all = await sameEverywhere(c);
    expect(all.slice(0, 16)).toEqual(held);
    expect(all.map((r) => r.split('|')[3]).slice(15, 18)).toEqual(['b7', 'c0', 'c1']);
  });

  it('counts snapshots in appends, not entries: grouped appends still compact the Raft log', async () => {
    const c = (cluster = await startCluster(3, { snapshotEvery: 40, snapshotRetain: 8, groupCommitBytes: GROUP }));
    const leader = await c.waitLeader();
    // 120 appends in 12 turns of 10: about 12 entries, far below 40, but 120 appends.
    for (let t = 0; t < 12; t++) {
      await Promise.all(Array.from({ length: 10 }, (_, i) => leader.append([text(`s${t}.${i}`)])));
    }
    const s = leader.status();
    expect(s.appendsGrouped).toBe(120);
    expect(s.appendGroupsProposed).toBeLessThan(40);
    await until(() => leader.status().snapshotsTaken >= 2, { timeoutMs: 10_000, what: 'snapshots' });
    const all = await sameEverywhere(c);
    expect(all.length).toBe(120);
    // A restarted member still has every record (its Raft log starts at a snapshot).
    const fid = c.ids.find((id) => id !== idOf(c, leader)) as number;
    await c.stop(fid);
    await leader.append([text('after')]);
    const back = await c.restart(fid);
    await until(() => back.last === 121n, { timeoutMs: 10_000, what: 'catch-up' });
    expect((await sameEverywhere(c)).slice(0, 120)).toEqual(all);
  });

  it('stops a member whose committed entry holds a damaged second frame', async () => {
    const c = (cluster = await startCluster(3, { groupCommitBytes: GROUP }));
    const leader = await c.waitLeader();
    await leader.append([text('x')]);
    const term = BigInt(leader.status().term);
    const a = encodeEvfr({ batchId: new Uint8Array(16).fill(1), first: 2, epoch: term, records: [text('y')] });
    const b = encodeEvfr({ batchId: new Uint8Array(16).fill(2), first: 3, epoch: term, records: [text('z')] });
    const bytes = new Uint8Array(a.length + b.length - 3); // the second frame is cut short
    bytes.set(a, 0);
    bytes.set(b.subarray(0, b.length - 3), a.length);
    const driver = (leader as unknown as { driver: { propose(d: Uint8Array): Promise<number> } }).driver;
    await driver.propose(bytes).catch(() => undefined);
    await until(() => leader.status().failure !== undefined, { timeoutMs: 10_000, what: 'the member stops' });
    expect(leader.status().failure).toMatch(/not a valid EVFR frame/);
  });
});
