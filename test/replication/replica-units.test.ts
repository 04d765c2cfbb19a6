/**
 * The units a replica is built from, each driven alone through its dependencies: the apply
 * path on a real local log (files with fsync), with group commit and the real Raft driver and
 * core when a leader's proposal is replaced, leadership readiness on a real Raft core, the
 * catch-up retry policy, and the catch-up stream's answer timeout on an injected ManualClock
 * over a real loopback connection.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeEvfr } from '../../ts/codec/evfr.js';
import { ManualClock } from '../../ts/core/clock.js';
import type { PlexusError } from '../../ts/core/errors.js';
import { RaftNode } from '../../ts/raft/node.js';
import { message } from '../../ts/raft/raft.js';
import { MemoryRaftStorage } from '../../ts/raft/storage.js';
import type { Entry, Message } from '../../ts/raft/types.js';
import { RaftDriver } from '../../ts/raft-io/driver.js';
import { ApplyPath } from '../../ts/replication/apply.js';
import { replicationError } from '../../ts/replication/errors.js';
import { GroupCommit } from '../../ts/replication/group-commit.js';
import { Leadership } from '../../ts/replication/leadership.js';
import { ReplicaState } from '../../ts/replication/replica-state.js';
import { fetchRecords, queryHolding } from '../../ts/replication/snapshot.js';
import { CATCH_UP_RETRY } from '../../ts/replication/snapshots.js';
import type { AppliedBatch } from '../../ts/replication/types.js';
import { type FileLog, openLog } from '../../ts/storage/file-log.js';
import { freePort } from '../helpers/ports.js';
import { refusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';

const dirs: string[] = [];
const logs: FileLog[] = [];
const servers: Server[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  for (const l of logs.splice(0)) await l.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function localLog(): Promise<FileLog> {
  const d = mkdtempSync(join(tmpdir(), 'plexus-replica-units-'));
  dirs.push(d);
  const log = await openLog(d, { fsync: 'batch' });
  logs.push(log);
  return log;
}

const text = (s: string) => new TextEncoder().encode(s);

function frameEntry(index: number, first: number, batch: number, payloads: string[]): Entry {
  const data = encodeEvfr({
    batchId: new Uint8Array(16).fill(batch),
    first,
    epoch: 1n,
    records: payloads.map(text),
  });
  return { index, term: 1, type: 'normal', data };
}

function applyPath(local: FileLog, state: ReplicaState) {
  const batches: AppliedBatch[] = [];
  const failures: PlexusError[] = [];
  let appliedCalls = 0;
  const path = new ApplyPath({
    state,
    local,
    fail: (e) => {
      failures.push(e);
      return e;
    },
    checkOpen: () => undefined,
    installing: () => undefined,
    confChange: () => undefined,
    memberRecord: (m) => state.members.set(m.id, m),
    compactionAgreed: () => undefined,
    notify: (b) => batches.push(b),
    applied: () => {
      appliedCalls++;
    },
  });
  return { path, batches, failures, applied: () => appliedCalls };
}

describe('ApplyPath', () => {
  it('appends committed frames to the local log, moves the applied watermark and skips replays', async () => {
    const local = await localLog();
    const state = new ReplicaState();
    const a = applyPath(local, state);
    await a.path.apply([frameEntry(2, 1, 1, ['a', 'b']), frameEntry(3, 3, 2, ['c'])]);
    expect(local.last).toBe(3n);
    expect(state.raftApplied).toBe(3);
    expect(state.localTail).toBe(3);
    expect(a.batches.map((b) => [b.first, b.last])).toEqual([
      [1n, 2n],
      [3n, 3n],
    ]);
    expect(a.applied()).toBe(1);
    expect(state.positions.positionAt(3)).toBe(3);
    expect(state.positions.positionAt(2)).toBe(2);
    // A replay of the same entries (a restart): skipped, counted, nothing appended twice.
    await a.path.apply([frameEntry(2, 1, 1, ['a', 'b'])]);
    expect(a.path.duplicates).toBe(1);
    expect(a.path.appliedFrames).toBe(2);
    expect(local.last).toBe(3n);
    expect(a.failures).toEqual([]);
  });

  it('stops the member on a frame that leaves a gap (PLX_REPLICATION_DIVERGED)', async () => {
    const local = await localLog();
    const state = new ReplicaState();
    const a = applyPath(local, state);
    const e = await refusal(a.path.apply([frameEntry(2, 5, 1, ['x'])]));
    expect(e.code).toBe('PLX_REPLICATION_DIVERGED');
    expect(a.failures).toHaveLength(1);
    expect(state.raftApplied).toBe(0);
    expect(local.last).toBe(0n);
  });
});

describe('Raft index to position marks', () => {
  it("a leader's proposal that a later leader's entries replaced leaves no mark at its index once applied", async () => {
    // The write order the replicated-log simulation found (seed 1869, snapshots): a leader
    // proposes an append (group commit remembers the mark "Raft index 3 ends at position 1,
    // batch A"), is cut off before it commits, and the next leader's log has its own empty
    // first entry at index 3 and the append at position 1 (batch B) at index 4. A mark left at
    // index 3 became the point of a Raft snapshot whose descriptor named batch A at position 1,
    // and the member stopped with PLX_REPLICATION_DIVERGED when it installed it after a restart.
    const clock = new ManualClock(1_000);
    const storage = MemoryRaftStorage.bootstrap({ voters: [1, 2, 3], learners: [] });
    const node = new RaftNode({ id: 1, storage, random: () => 0 });
    const state = new ReplicaState();
    const local = await localLog();
    const a = applyPath(local, state);
    const sent: Message[] = [];
    const holder: { group?: GroupCommit } = {};
    const driver = new RaftDriver({
      node,
      storage,
      send: (ms) => sent.push(...ms),
      applier: { apply: (es) => a.path.apply(es) },
      clock,
      beforeReady: () => holder.group?.flush(),
    });
    const group = new GroupCommit({
      state,
      node,
      driver,
      groupCommitBytes: 1 << 20,
      acceptingWrites: () => node.role === 'leader',
      notLeader: (why) => replicationError('PLX_REPLICATION_NOT_LEADER', why),
    });
    holder.group = group;
    /** Lets the driver handle its Readies (timers due now on the manual clock) until `done`. */
    const run = (what: string, done: () => boolean) =>
      until(
        () => {
          clock.advance(0);
          return done();
        },
        { what, timeoutMs: 20_000 },
      );

    // Member 1 leads term t; member 2 acknowledges its first (empty) entry, at index 2.
    node.campaign();
    const t = node.term;
    driver.receive(message('MsgVoteResp', { from: 2, to: 1, term: t }));
    expect(node.role).toBe('leader');
    await run('the leader to write its first entry', () => storage.lastIndex() === 2);
    driver.receive(message('MsgAppResp', { from: 2, to: 1, term: t, index: 2 }));
    await run('index 2 applied', () => state.raftApplied === 2);

    // An append of batch A at position 1, proposed at index 3: the leader remembers its mark.
    const batchA = new Uint8Array(16).fill(0xa);
    const frameA = encodeEvfr({ batchId: batchA, first: 1, epoch: 1n, records: [text('a')] });
    state.projectedLast = 0;
    const proposed = refusal(group.gather(frameA, node.term, 1, 1, batchA));
    await run('the proposal at index 3', () => storage.lastIndex() === 3);
    expect(state.positions.markAt(3)?.slice(0, 3)).toEqual([3, 1, batchA]);

    // Member 2 leads term t + 1 without it: its empty first entry at index 3, batch B at
    // position 1 at index 4, both committed.
    const batchB = new Uint8Array(16).fill(0xb);
    const frameB = encodeEvfr({ batchId: batchB, first: 1, epoch: 2n, records: [text('b')] });
    driver.receive(
      message('MsgApp', {
        from: 2,
        to: 1,
        term: t + 1,
        index: 2,
        logTerm: t,
        commit: 4,
        entries: [
          { index: 3, term: t + 1, type: 'normal', data: new Uint8Array(0) },
          { index: 4, term: t + 1, type: 'normal', data: frameB },
        ],
      }),
    );
    await run('index 4 applied', () => state.raftApplied === 4);
    expect(node.role).toBe('follower');
    expect((await proposed).code).toBe('PLX_RAFT_PROPOSAL_LOST');
    expect(a.failures).toEqual([]);
    const [rec] = await local.read(1n, { maxCount: 1, maxBytes: 1 << 20 });
    expect(rec?.batchId).toEqual(batchB);
    // No committed entry at or below index 3 carries a frame: no mark there (a snapshot at
    // index 3 would otherwise name batch A at position 1); index 4 ends at position 1 with B.
    expect(state.positions.markAt(3)).toBeUndefined();
    expect(state.positions.positionAt(3)).toBe(0);
    expect(state.positions.markAt(4)?.slice(0, 3)).toEqual([4, 1, batchB]);
    await driver.stop();
  });
});

describe('Leadership', () => {
  /** A single-voter Raft core whose log holds two entries of term 1 (committed, not applied here). */
  function leaderOfNewTerm() {
    const storage = MemoryRaftStorage.bootstrap({ voters: [1], learners: [] });
    storage.append([
      { index: 2, term: 1, type: 'normal', data: text('a') },
      { index: 3, term: 1, type: 'normal', data: text('b') },
    ]);
    storage.setHardState({ term: 1, vote: 1, commit: 3 });
    const node = new RaftNode({ id: 1, storage, random: () => 0 });
    const state = new ReplicaState();
    const clock = new ManualClock(1_000);
    let localLast = 2n;
    const leadership = new Leadership({
      state,
      node,
      clock,
      timeoutMs: 5_000,
      localLast: () => localLast,
      checkOpen: () => {
        if (state.closed) throw replicationError('PLX_REPLICATION_STOPPED', 'closed');
      },
      notLeader: (why) => replicationError('PLX_REPLICATION_NOT_LEADER', `not leading (${why})`),
    });
    return { node, state, clock, leadership, setLocalLast: (v: bigint) => (localLast = v) };
  }

  it('serves a new leader only once it applied its log as of the election; group commit starts at the local end', async () => {
    const { node, state, leadership, setLocalLast } = leaderOfNewTerm();
    expect((await refusal(leadership.whenAcceptingWrites())).code).toBe('PLX_REPLICATION_NOT_LEADER');
    node.campaign();
    expect(node.role).toBe('leader');
    const won = node.status().lastIndex; // its first entry of term 2, after the two of term 1
    expect(won).toBe(4);
    leadership.roleChanged('leader');
    expect(leadership.acceptingWrites).toBe(false);
    // Appends queue in call order until it is ready.
    const order: number[] = [];
    const first = leadership.admit(Number.MAX_SAFE_INTEGER).then(() => order.push(1));
    const second = leadership.admit(Number.MAX_SAFE_INTEGER).then(() => order.push(2));
    state.raftApplied = 3;
    leadership.observe();
    expect(leadership.acceptingWrites).toBe(false);
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual([]);
    setLocalLast(7n);
    state.raftApplied = won;
    leadership.observe();
    expect(leadership.acceptingWrites).toBe(true);
    expect(state.projectedLast).toBe(7);
    await Promise.all([first, second]);
    expect(order).toEqual([1, 2]);
  });

  it('refuses with NOT_READY once the deadline passes unapplied, on the clock it is given', async () => {
    const { node, clock, leadership } = leaderOfNewTerm();
    node.campaign();
    leadership.roleChanged('leader');
    const waiting = leadership.whenAcceptingWrites(clock.now() + 10);
    clock.advance(20);
    leadership.notify();
    expect((await refusal(waiting)).code).toBe('PLX_REPLICATION_NOT_READY');
  });

  it('fails what waits on its leadership at once when it steps down, with the details given', async () => {
    const { node, state, leadership } = leaderOfNewTerm();
    node.campaign();
    state.raftApplied = 4;
    leadership.roleChanged('leader');
    expect(leadership.acceptingWrites).toBe(true);
    const never = new Promise<number>(() => undefined);
    const pending = refusal(leadership.untilStepDown(never, (why) => `${why}; retry`, { outcomeUnknown: true }));
    const settled = leadership.untilStepDown(Promise.resolve(5), (why) => why);
    expect(await settled).toBe(5);
    // A heartbeat of a newer term from another member: the core steps down.
    node.step(message('MsgHeartbeat', { from: 2, to: 1, term: node.term + 1 }));
    expect(node.role).toBe('follower');
    leadership.roleChanged(node.role);
    const e = await pending;
    expect(e.code).toBe('PLX_REPLICATION_NOT_LEADER');
    expect(e.message).toContain(`it stepped down in term ${node.term}`);
    expect(e.details).toMatchObject({ outcomeUnknown: true });
    expect(leadership.acceptingWrites).toBe(false);
  });
});

describe('catch-up retry policy', () => {
  it('waits 20 ms doubling up to 1 s without jitter, and from 20 ms again after a reset', () => {
    const clock = new ManualClock();
    const b = CATCH_UP_RETRY.start(clock);
    const seq = Array.from({ length: 9 }, () => b.next());
    expect(seq).toEqual([20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
    b.reset();
    expect(b.next()).toBe(20);
  });
});

/** A loopback server that never answers; a client socket connected to it. */
async function silentPeer(): Promise<Socket> {
  const server = createServer((s) => {
    sockets.push(s);
  });
  servers.push(server);
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  const client = connect(port, '127.0.0.1');
  sockets.push(client);
  await new Promise<void>((r, j) => client.once('connect', r).once('error', j));
  return client;
}

describe('catch-up stream timeouts on the injected clock', () => {
  it('queryHolding times out when the manual clock passes the timeout, not before', async () => {
    const clock = new ManualClock();
    const client = await silentPeer();
    let settled = false;
    const p = queryHolding(client, 60_000, clock).finally(() => {
      settled = true;
    });
    expect(clock.pending()).toBe(1);
    clock.advance(59_999);
    await Promise.resolve();
    expect(settled).toBe(false);
    clock.advance(1);
    const e = await refusal(p);
    expect(e.code).toBe('PLX_RAFT_TRANSPORT_UNREACHABLE');
    expect(e.details.reason).toBe('timeout');
    expect(clock.pending()).toBe(0);
  });

  it('fetchRecords waits for an answer on the timers it is given', async () => {
    const clock = new ManualClock();
    const client = await silentPeer();
    const local = await localLog();
    const p = fetchRecords(client, { local, to: 10, chunkBytes: 1024, timeoutMs: 30_000, timers: clock });
    expect(clock.pending()).toBe(1);
    clock.advance(30_000);
    const e = await refusal(p);
    expect(e.code).toBe('PLX_RAFT_TRANSPORT_UNREACHABLE');
    expect(e.details.reason).toBe('timeout');
    expect(local.last).toBe(0n);
  });
});
