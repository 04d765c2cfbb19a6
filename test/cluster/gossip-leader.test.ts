/**
 * The gossip lease leader (ts/cluster/gossip/leader.ts): the LeaseAuthority compliance suite on
 * an injected clock, its tagged epochs across restarts (the fault-matrix regression test), a
 * takeover by a new leader, members from gossip, two leaders at once in a partition (elected by
 * real SWIM tables on each side) kept safe by fencing on a real shared journal store (a FileLog,
 * fsync always) and a real dead-letter log, and StaticMembership members over mutual-TLS
 * Http2Wires keeping their leases through a leader change. The same leader restarted as a real
 * process is in gossip-leader-procs.test.ts.
 *
 * In the suite, the gossip table the leader reads (`status`) is stood in for by the failure
 * detector (ts/cluster/detector.ts) fed with every request a member makes: a member the leader
 * hears from is alive to gossip too; elsewhere a test sets the table's word itself.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join as pathJoin } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeReply, encodeRequest } from '../../ts/cluster/codec.js';
import { detectorConfig } from '../../ts/cluster/config.js';
import { FailureDetector } from '../../ts/cluster/detector.js';
import { DEAD_LETTER_LOG, DeadLetters, EpochGate } from '../../ts/cluster/fencing.js';
import { gossipConfigFor } from '../../ts/cluster/gossip/config.js';
import { driveSwim, type SwimDriver } from '../../ts/cluster/gossip/driver.js';
import {
  EPOCH_TAG_BITS,
  epochRound,
  epochTag,
  type GossipLeaderOptions,
  GossipLeaseLeader,
  leaderTag,
  nextTaggedEpoch,
  taggedEpoch,
} from '../../ts/cluster/gossip/leader.js';
import { Swim } from '../../ts/cluster/gossip/swim.js';
import { gossipName, MemoryGossipNet } from '../../ts/cluster/gossip/transport.js';
import { AuthorityHost } from '../../ts/cluster/host.js';
import { ClusterJournal } from '../../ts/cluster/journal.js';
import type { AuthorityReply, AuthorityRequest, LeaseAuthority } from '../../ts/cluster/lease-authority.js';
import { shardOfIri } from '../../ts/cluster/meta.js';
import { fencedReceiver } from '../../ts/cluster/receive.js';
import { StaticMembership } from '../../ts/cluster/static.js';
import { type MemberStatus, ownerOf } from '../../ts/cluster/types.js';
import { decodeClusterFrame, encodeClusterFrame } from '../../ts/codec/cluster-frame.js';
import { type Clock, ManualClock, monotonicClock } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';
import type { Http2Wire } from '../../ts/net/http2-wire.js';
import { SimRandom } from '../../ts/sim/rng.js';
import { openLog } from '../../ts/storage/index.js';
import type { LogStorage } from '../../ts/storage/types.js';
import {
  LEASE_AUTHORITY_SUITE,
  type LeaseAuthorityHarness,
  leaseAuthoritySuite,
} from '../compliance/lease-authority.suite.js';
import { until } from '../helpers/until.js';
import { http2Net } from '../net/helpers.js';

const { meta, lease, detector } = LEASE_AUTHORITY_SUITE;
/** 2026-12-01T00:00:00Z: the wall time the tests' leaders start around. */
const T0 = Date.UTC(2026, 11, 1);
const NODES = ['a', 'b', 'c', 'd'];

/** A member's requests that are a sign of life from it (not `remove`, an operator's word on it). */
const sender = (req: AuthorityRequest): string | undefined =>
  req.type === 'remove' || req.type === 'revoke' || req.type === 'view' ? undefined : req.node;

/**
 * The gossip table a leader reads: the failure detector on the leader's clock, hearing a member
 * whenever it sends a request (a member that left stays in the table, as gossip keeps it as left).
 */
class HeardTable {
  private readonly detector = new FailureDetector(detector);
  constructor(private readonly clock: { now: number }) {}
  status = (node: string): MemberStatus | undefined => {
    this.detector.tick(this.clock.now);
    return this.detector.status(node);
  };
  /** Wraps a leader: every request is heard first, as gossip would hear the member. */
  wrap(leader: LeaseAuthority): LeaseAuthority {
    return {
      call: async (req) => {
        const from = sender(req);
        if (from !== undefined) this.detector.heard(from, this.clock.now);
        return leader.call(req);
      },
      isMember: (n) => leader.isMember(n),
      isAdmitted: (n) => leader.isAdmitted(n),
      close: () => leader.close(),
    };
  }
}

/** Leader options on `clock`: a `{ now }` the test sets, or a Clock (a ManualClock). */
function options(clock: { now: number } | Clock, over: Partial<GossipLeaderOptions> = {}): GossipLeaderOptions {
  return {
    meta,
    self: 'a',
    lease,
    detector,
    autoAssign: false,
    clock: typeof clock.now === 'function' ? (clock as Clock) : { now: () => (clock as { now: number }).now },
    wallClock: { now: () => T0 },
    status: (n) => (NODES.includes(n) ? 'alive' : undefined),
    address: (n) => `${n}.test:7000`,
    // Time moves only when a test calls: the periodic tick never fires during a test.
    tickEveryMs: 1_000_000,
    ...over,
  };
}

// The suite builds the leader at time 0 on its clock and starts at 1000 = one lease length:
// the grace period of a new leader is over when the suite's first grant comes. A restart is
// a new leader object (memory empty) on a new process clock, started at a later wall second:
// its strictly greater epochs and view versions come from its later start (the round), not
// from anything kept. With the wall clock standing still or going back, epochs still never
// repeat (the regression test below), but are not promised to be greater.
interface GossipHarness extends LeaseAuthorityHarness {
  leader: GossipLeaseLeader;
}

leaseAuthoritySuite('GossipLeaseLeader', {
  setup: async (): Promise<GossipHarness> => {
    const clock = { now: 0 };
    let wall = T0;
    const start = () => {
      const table = new HeardTable(clock);
      const leader = new GossipLeaseLeader(options(clock, { wallClock: { now: () => wall }, status: table.status }));
      return { leader, authority: table.wrap(leader) };
    };
    const h: GossipHarness = {
      clock,
      ...start(),
      restart: async () => {
        h.leader.close();
        wall += 2_000;
        Object.assign(h, start());
      },
    };
    return h;
  },
  teardown: async (h) => h.authority.close(),
});

type Ok = AuthorityReply & { ok: true };
async function ok(a: LeaseAuthority, req: AuthorityRequest): Promise<Ok> {
  const r = await a.call(req);
  if (!r.ok) throw new Error(`${req.type} refused: ${r.code} ${r.message}`);
  return r;
}
async function refused(a: LeaseAuthority, req: AuthorityRequest): Promise<AuthorityReply & { ok: false }> {
  const r = await a.call(req);
  if (r.ok) throw new Error(`${req.type} was answered ok; a refusal was expected`);
  return r;
}
async function grant(a: LeaseAuthority, node: string, shard: number): Promise<bigint> {
  const r = await ok(a, { type: 'grant', node, shard });
  expect(r.lease?.shard).toBe(shard);
  return r.lease?.epoch as bigint;
}
async function join(a: LeaseAuthority, ...nodes: string[]): Promise<void> {
  for (const node of nodes) await ok(a, { type: 'join', node, address: '', meta });
}

describe('the epoch layout', () => {
  it('puts the round above the tag; the next epoch is above the last known and at least the start round', () => {
    const tag = leaderTag('a', T0, new Uint8Array(8).fill(7));
    expect(tag).toBeLessThan(1n << EPOCH_TAG_BITS);
    expect(tag).toBe(leaderTag('a', T0, new Uint8Array(8).fill(7)));
    expect(leaderTag('a', T0, new Uint8Array(8).fill(8))).not.toBe(tag);
    expect(leaderTag('b', T0, new Uint8Array(8).fill(7))).not.toBe(tag);
    const e = taggedEpoch(BigInt(T0), tag);
    expect([epochRound(e), epochTag(e)]).toEqual([BigInt(T0), tag]);
    expect(e).toBeLessThan(1n << 64n);
    // Nothing known: the start round. Known above the start: one round above it.
    expect(nextTaggedEpoch(0n, BigInt(T0), tag)).toBe(e);
    const later = taggedEpoch(BigInt(T0) + 50n, (1n << EPOCH_TAG_BITS) - 1n);
    expect(nextTaggedEpoch(later, BigInt(T0), tag)).toBe(taggedEpoch(BigInt(T0) + 51n, tag));
    expect(nextTaggedEpoch(later, BigInt(T0), tag)).toBeGreaterThan(later);
    // A small plain epoch (a static cluster's counter) is below every tagged one.
    expect(nextTaggedEpoch(41n, BigInt(T0), tag)).toBe(e);
    expect(() => taggedEpoch(1n << 44n, 0n)).toThrow(RangeError);
  });
});

describe('GossipLeaseLeader', () => {
  it('a gossip leader that restarts never grants an epoch twice (the fault-matrix bug)', async () => {
    const clock = { now: 0 };
    /**
     * One leader incarnation (a new object, memory empty, a new process clock from 0): after its
     * grace period it grants every shard to b, revokes it and grants it again, three times.
     */
    const incarnation = async (make: () => LeaseAuthority): Promise<bigint[]> => {
      clock.now = 0;
      const a = make();
      try {
        await join(a, 'b');
        clock.now = lease.ttlMs;
        const epochs: bigint[] = [];
        for (let s = 0; s < meta.shardCount; s++) {
          for (let round = 0; round < 3; round++) {
            epochs.push(await grant(a, 'b', s));
            await ok(a, { type: 'revoke', shard: s });
          }
        }
        return epochs;
      } finally {
        a.close();
      }
    };
    const walls = [T0, T0, T0 + 5_000, T0 - 3_600_000, T0 - 3_600_000, T0 + 5_000];
    const tagged: bigint[][] = [];
    const leaders: GossipLeaseLeader[] = [];
    for (const w of walls) {
      tagged.push(
        await incarnation(() => {
          const l = new GossipLeaseLeader(options(clock, { wallClock: { now: () => w } }));
          leaders.push(l);
          return l;
        }),
      );
    }
    // Epochs are per shard: no (shard, epoch) is granted twice.
    const grants = (runs: bigint[][]) => runs.flatMap((epochs) => epochs.map((e, i) => `${Math.floor(i / 3)}/${e}`));
    const all = grants(tagged);
    expect(all).toHaveLength(walls.length * meta.shardCount * 3);
    expect(new Set(all).size).toBe(all.length);
    // Each incarnation's grants of a shard strictly increase.
    for (const epochs of tagged) {
      for (let s = 0; s < meta.shardCount; s++) {
        const [x, y, z] = epochs.slice(s * 3, s * 3 + 3) as [bigint, bigint, bigint];
        expect(x < y && y < z).toBe(true);
      }
    }
    // Two incarnations started at the same wall time draw the same rounds: only the tag tells
    // their epochs apart. A wall clock that went back an hour reuses rounds of the first ones.
    expect(tagged[1]?.map(epochRound)).toEqual(tagged[0]?.map(epochRound));
    expect(leaders[1]?.tag).not.toBe(leaders[0]?.tag);
    expect(tagged[4]?.map(epochRound)).toEqual(tagged[3]?.map(epochRound));
    expect(new Set(leaders.map((l) => l.tag)).size).toBe(leaders.length);
    for (let i = 0; i < leaders.length; i++) {
      expect(new Set(tagged[i]?.map(epochTag))).toEqual(new Set([leaders[i]?.tag]));
    }
    // The same incarnations with epochs from a plain counter from 1 (a MemoryAuthority in an
    // AuthorityHost that keeps nothing, as a gossip leader without the tag would): every
    // restart repeats them.
    const plain: bigint[][] = [];
    for (const _ of walls) {
      plain.push(
        await incarnation(
          () =>
            new AuthorityHost({
              meta,
              members: NODES.map((id) => ({ id, address: '' })),
              lease,
              autoAssign: false,
              clock: { now: () => clock.now },
              tickEveryMs: 1_000_000,
            }),
        ),
      );
    }
    const flat = grants(plain);
    expect(new Set(flat).size).toBe(meta.shardCount * 3);
    expect(plain[1]).toEqual(plain[0]);
  });

  it('takes over: refuses unseen shards for a lease length, adopts reported leases at their epochs, then grants above', async () => {
    const clock = { now: 0 };
    const statusA: Record<string, MemberStatus> = { a: 'alive', b: 'alive', c: 'alive', d: 'alive' };
    const A = new GossipLeaseLeader(options(clock, { status: (n) => statusA[n] }));
    clock.now = lease.ttlMs;
    await join(A, 'a', 'b', 'c', 'd');
    const byA = new Map<number, bigint>();
    const ownerA = (s: number) => (s < 4 ? 'b' : s < 6 ? 'c' : 'd');
    for (let s = 0; s < meta.shardCount; s++) byA.set(s, await grant(A, ownerA(s), s));
    const lastOfA = (await ok(A, { type: 'view' })).view;
    A.close();

    // a and d die; gossip on b says so; b (now the lowest live id) starts a leader 3 s later by
    // the wall clock, on its own process clock.
    const statusB: Record<string, MemberStatus> = { a: 'failed', b: 'alive', c: 'alive', d: 'failed' };
    clock.now = 0;
    const B = new GossipLeaseLeader(
      options(clock, { self: 'b', wallClock: { now: () => T0 + 3_000 }, status: (n) => statusB[n] }),
    );
    const first = (await ok(B, { type: 'view' })).view;
    expect(first.version).toBeGreaterThan(lastOfA.version);
    expect(first.leases).toEqual([]);
    await join(B, 'b');
    expect((await refused(B, { type: 'join', node: 'zz', address: '', meta })).code).toBe('PLX_CLUSTER_UNKNOWN_NODE');
    expect(
      (await refused(B, { type: 'heartbeat', node: 'zz', held: [{ shard: 6, epoch: byA.get(6) as bigint }] })).code,
    ).toBe('PLX_CLUSTER_UNKNOWN_NODE');

    // During the grace period nothing it has not seen reported is granted, free or not, even
    // to the member A had granted it to.
    clock.now = 100;
    for (const s of [0, 4, 6, 7]) {
      const r = await refused(B, { type: 'grant', node: 'b', shard: s });
      expect(r.code).toBe('PLX_CLUSTER_LEASE_HELD');
      expect(r.details).toMatchObject({ shard: s, reason: 'takeover' });
      expect(r.details.retryAfterMs).toBe(lease.ttlMs - 100);
    }
    // Heartbeats from the holders: adopted at A's epochs.
    const heldB = [0, 1, 2, 3].map((shard) => ({ shard, epoch: byA.get(shard) as bigint }));
    const hb = await ok(B, { type: 'heartbeat', node: 'b', held: heldB });
    expect(hb.renewed).toEqual([0, 1, 2, 3]);
    for (const { shard, epoch } of heldB) expect(ownerOf(hb.view, shard)).toEqual({ shard, owner: 'b', epoch });
    // c, which joined A only, reports its shards (and so joins B), and also shard 0 at an older
    // epoch: that one is not its.
    const stale = (byA.get(0) as bigint) - 1n;
    const hc = await ok(B, {
      type: 'heartbeat',
      node: 'c',
      held: [
        { shard: 4, epoch: byA.get(4) as bigint },
        { shard: 5, epoch: byA.get(5) as bigint },
        { shard: 0, epoch: stale },
      ],
    });
    expect(hc.renewed).toEqual([4, 5]);
    expect(B.isMember('c')).toBe(true);
    expect(ownerOf(hc.view, 0)?.owner).toBe('b');
    // An adopted lease is held: another member is refused, its holder gets it at its epoch.
    expect((await refused(B, { type: 'grant', node: 'c', shard: 1 })).details).toMatchObject({ owner: 'b' });
    expect(await grant(B, 'b', 1)).toBe(byA.get(1));
    expect((await ok(B, { type: 'renew', node: 'c', shard: 4, epoch: byA.get(4) as bigint })).lease?.epoch).toBe(
      byA.get(4),
    );

    // b keeps renewing; d, failed by gossip, never reports 6 and 7: once a lease length since
    // B's start has passed, they go to c at epochs greater than A's.
    clock.now = 600;
    await ok(B, { type: 'heartbeat', node: 'b', held: heldB });
    await ok(B, {
      type: 'heartbeat',
      node: 'c',
      held: [4, 5].map((shard) => ({ shard, epoch: byA.get(shard) as bigint })),
    });
    clock.now = lease.ttlMs;
    const e6 = await grant(B, 'c', 6);
    const e7 = await grant(B, 'c', 7);
    expect(e6).toBeGreaterThan(byA.get(6) as bigint);
    expect(e7).toBeGreaterThan(byA.get(7) as bigint);
    expect(epochTag(e6)).toBe(B.tag);
    // An adopted lease runs from its adoption (or last renewal): b renewed at 600.
    clock.now = 600 + lease.ttlMs - 1;
    expect(ownerOf((await ok(B, { type: 'view' })).view, 2)?.owner).toBe('b');
    clock.now = 600 + lease.ttlMs;
    const v = (await ok(B, { type: 'view' })).view;
    expect(ownerOf(v, 2)).toBeUndefined();
    // Regranted later, above the adopted epoch.
    expect(await grant(B, 'c', 2)).toBeGreaterThan(byA.get(2) as bigint);
    B.close();

    // A leader whose wall clock is behind A's still grants above A's epochs for the shards its
    // host's last view listed (`previous`), and publishes newer views.
    clock.now = 0;
    const behind = new GossipLeaseLeader(
      options(clock, {
        self: 'b',
        wallClock: { now: () => T0 - 60_000 },
        status: (n) => statusB[n],
        previous: lastOfA,
      }),
    );
    expect((await ok(behind, { type: 'view' })).view.version).toBeGreaterThan(lastOfA.version);
    await join(behind, 'c');
    clock.now = lease.ttlMs;
    for (let s = 0; s < meta.shardCount; s++) expect(await grant(behind, 'c', s)).toBeGreaterThan(byA.get(s) as bigint);
    behind.close();
  });

  it('takes members and their status from gossip, and frees leases only by expiry', async () => {
    const clock = { now: 0 };
    const gossip = new Map<string, MemberStatus>([
      ['a', 'alive'],
      ['b', 'alive'],
    ]);
    const L = new GossipLeaseLeader(options(clock, { status: (n) => gossip.get(n), autoAssign: true }));
    await join(L, 'a', 'b');
    // c is unknown to gossip: refused; once gossip knows it, it joins with the address gossip has.
    expect((await refused(L, { type: 'join', node: 'c', address: '', meta })).message).toMatch(/gossip table/);
    expect(L.isAdmitted('c')).toBe(false);
    gossip.set('c', 'alive');
    expect(L.isAdmitted('c')).toBe(true);
    await join(L, 'c');
    expect(
      (await refused(L, { type: 'join', node: 'd', address: '', meta: { ...meta, shardCount: 16 } })).details,
    ).toEqual(expect.objectContaining({ field: 'shardCount' }));
    // No automatic assignment during the grace period; all shards after it, to alive members.
    expect((await ok(L, { type: 'view' })).view.leases).toEqual([]);
    clock.now = lease.ttlMs;
    let v = (await ok(L, { type: 'heartbeat', node: 'a' })).view;
    expect(v.leases).toHaveLength(meta.shardCount);
    expect(v.members).toEqual([
      { id: 'a', address: 'a.test:7000', status: 'alive' },
      { id: 'b', address: 'b.test:7000', status: 'alive' },
      { id: 'c', address: 'c.test:7000', status: 'alive' },
    ]);
    const ofC = v.leases.filter((l) => l.owner === 'c');
    expect(ofC.length).toBeGreaterThan(0);
    // Gossip suspects c, then fails it: the view says so at once, c's leases stay until expiry.
    gossip.set('c', 'suspect');
    v = (await ok(L, { type: 'view' })).view;
    expect(v.members.find((m) => m.id === 'c')?.status).toBe('suspect');
    const version = v.version;
    gossip.set('c', 'failed');
    clock.now = lease.ttlMs + 10;
    v = (await ok(L, { type: 'view' })).view;
    expect(v.version).toBeGreaterThan(version);
    expect(v.members.find((m) => m.id === 'c')?.status).toBe('failed');
    for (const l of ofC) {
      expect(ownerOf(v, l.shard)).toEqual(l);
      expect((await refused(L, { type: 'grant', node: 'a', shard: l.shard })).code).toBe('PLX_CLUSTER_LEASE_HELD');
    }
    // a and b renew theirs; at c's expiry, c's shards go to the alive members at greater epochs.
    clock.now = lease.ttlMs * 2 - 1;
    const held = (n: string) => v.leases.filter((l) => l.owner === n).map(({ shard, epoch }) => ({ shard, epoch }));
    await ok(L, { type: 'heartbeat', node: 'a', held: held('a') });
    await ok(L, { type: 'heartbeat', node: 'b', held: held('b') });
    expect((await ok(L, { type: 'view' })).view.leases.filter((l) => l.owner === 'c')).toEqual(ofC);
    clock.now = lease.ttlMs * 2;
    v = (await ok(L, { type: 'heartbeat', node: 'a', held: held('a') })).view;
    for (const l of ofC) {
      const now = ownerOf(v, l.shard);
      expect(now?.owner === 'a' || now?.owner === 'b').toBe(true);
      expect(now?.epoch).toBeGreaterThan(l.epoch);
    }
    // Removed: refused from then on, even while gossip still knows it.
    await ok(L, { type: 'remove', node: 'c' });
    expect(L.isAdmitted('c')).toBe(false);
    expect((await refused(L, { type: 'join', node: 'c', address: '', meta })).message).toMatch(/removed/);
    // Draining: no new grants.
    await ok(L, { type: 'drain', node: 'b' });
    await ok(L, { type: 'revoke', shard: 0 });
    expect((await refused(L, { type: 'grant', node: 'b', shard: 0 })).code).toBe('PLX_CLUSTER_LEAVING');
    L.close();
  });
});

/**
 * Four SWIM members (ts/cluster/gossip/swim.ts) on one in-process network (MemoryGossipNet),
 * driven on a manual clock: `run` moves time in 10 ms steps, letting messages through between
 * steps, until `done` holds.
 */
function gossip() {
  const clock = new ManualClock(0);
  const net = new MemoryGossipNet();
  const rng = new SimRandom(7);
  const name = (id: string) => gossipName(id, `${id}.test:7000`);
  const swims = new Map<string, Swim>();
  const drivers: SwimDriver[] = [];
  for (const id of NODES) {
    const t = net.transport(name(id));
    const s = new Swim({
      name: name(id),
      config: gossipConfigFor(detectorConfig(detector)),
      random: rng.fork(),
      now: 0,
      send: (to, m) => t.send(to, m),
    });
    const d = driveSwim(s, clock);
    t.onMessage((m) => d.deliver(m));
    swims.set(id, s);
    drivers.push(d);
    if (id !== 'a') {
      s.join([name('a')], 0);
      d.poke();
    }
  }
  /** The gossip table of `viewer` as a leader reads it: dead is failed, left is gone. */
  const tableOf =
    (viewer: string) =>
    (id: string): MemberStatus | undefined => {
      const v = swims.get(viewer)?.member(name(id));
      if (v === undefined || v.state === 'left') return undefined;
      return v.state === 'dead' ? 'failed' : v.state;
    };
  return {
    clock,
    net,
    name,
    tableOf,
    /** The lowest id `viewer`'s table holds alive: who it takes for the leader. */
    leaderSeenBy: (viewer: string) => NODES.filter((n) => tableOf(viewer)(n) === 'alive').sort()[0],
    async run(ms: number, done: () => boolean): Promise<boolean> {
      for (let t = 0; t < ms && !done(); t += 10) {
        clock.advance(10);
        await new Promise((r) => setImmediate(r));
      }
      return done();
    },
    stop: () => {
      for (const d of drivers) d.stop();
    },
  };
}

describe('two gossip leaders at once (a partition)', () => {
  const dirs: string[] = [];
  afterEach(async () => {
    for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  });

  // A partition splits {a, b} from {c, d}; each side's gossip (real SWIM tables) fails the other
  // side, and each side's lowest id (a, c) leads and grants shard 3 to a member of its side. Gossip granting is
  // weaker than consensus here: two owners at once. Fencing on the shared journal store and on
  // the receive side keeps it safe: once the greater epoch has written, the other owner's
  // appends are refused and its frames go to the dead-letter log. What it costs is
  // availability (the fenced owner's work on the shard is refused), never safety. Run with each
  // side's leader starting first, so the fenced owner is the new one, then the old one.
  for (const cFirst of [false, true]) {
    it(`only the greater epoch commits to the shard; the other owner's appends and frames are fenced (${cFirst ? 'c' : 'a'} started first)`, async () => {
      const dir = await mkdtemp(pathJoin(tmpdir(), 'plexus-gossip-partition-'));
      dirs.push(dir);
      const g = gossip();
      try {
        expect(await g.run(20_000, () => NODES.every((v) => NODES.every((n) => g.tableOf(v)(n) === 'alive')))).toBe(
          true,
        );
        expect(NODES.map(g.leaderSeenBy)).toEqual(['a', 'a', 'a', 'a']);
        for (const x of ['a', 'b']) for (const y of ['c', 'd']) g.net.partition(g.name(x), g.name(y));
        const split = () =>
          NODES.map(g.leaderSeenBy).join('') === 'aacc' &&
          ['c', 'd'].every((n) => g.tableOf('a')(n) === 'failed' && g.tableOf('b')(n) === 'failed') &&
          ['a', 'b'].every((n) => g.tableOf('c')(n) === 'failed' && g.tableOf('d')(n) === 'failed');
        expect(await g.run(30_000, split)).toBe(true);
      } finally {
        g.stop();
      }
      // Each side's leader reads its own member's gossip table, as it stands after the split.
      const A = new GossipLeaseLeader(
        options(g.clock, {
          self: 'a',
          wallClock: { now: () => T0 + (cFirst ? 1_000 : 0) },
          status: g.tableOf('a'),
        }),
      );
      const C = new GossipLeaseLeader(
        options(g.clock, {
          self: 'c',
          wallClock: { now: () => T0 + (cFirst ? 0 : 1_000) },
          status: g.tableOf('c'),
        }),
      );
      await join(A, 'a', 'b');
      await join(C, 'c', 'd');
      // Across the partition, neither leader's member can reach the other; had d reached a, a
      // would take it: gossip there has failed it, not forgotten it.
      g.clock.advance(lease.ttlMs);
      const shard = 3;
      const eb = await grant(A, 'b', shard);
      const ed = await grant(C, 'd', shard);
      expect(eb).not.toBe(ed);
      const viewA = (await ok(A, { type: 'view' })).view;
      const viewC = (await ok(C, { type: 'view' })).view;
      expect(ownerOf(viewA, shard)?.owner).toBe('b');
      expect(ownerOf(viewC, shard)?.owner).toBe('d');
      const [hi, lo] = ed > eb ? (['d', 'b'] as const) : (['b', 'd'] as const);
      const epochOf = { b: eb, d: ed } as Record<string, bigint>;

      // The shard's store, shared by both owners (one process serves it; fsync on every append).
      const store = await openLog(pathJoin(dir, `shard-${shard}`), { fsync: 'always' });
      const shared = (log: LogStorage): LogStorage =>
        new Proxy(log, {
          get: (t, k) => {
            if (k === 'close') return async () => {};
            const v = Reflect.get(t, k, t);
            return typeof v === 'function' ? v.bind(t) : v;
          },
        });
      const journalOf = (owner: string) =>
        new ClusterJournal({
          shardCount: meta.shardCount,
          layout: 'shared',
          open: async () => shared(store),
          epochOf: (s) => (s === shard ? epochOf[owner] : undefined),
        });
      const jb = journalOf('b');
      const jd = journalOf('d');
      const jHi = hi === 'b' ? jb : jd;
      const jLo = lo === 'b' ? jb : jd;
      const onShard = Array.from({ length: 200 }, (_, i) => `vt:counter-${i}`).filter(
        (x) => shardOfIri(meta, x) === shard,
      );
      const [iri, other] = onShard as [string, string];
      const entry = (seq: number, by: string) => ({
        seq,
        time: seq,
        dispatchedThrough: 0,
        messageId: `${by}-${seq}`,
        event: { name: `by-${by}` },
        sends: [],
      });
      const fenced = async (p: Promise<unknown>) => {
        try {
          await p;
        } catch (e) {
          if (isPlexusError(e)) return e.code;
          throw e;
        }
        return 'committed';
      };
      try {
        // The lower epoch writes first (before the other side's owner started), then the
        // greater one; from then on only the greater one commits.
        expect(await fenced(jLo.append(iri, entry(1, lo), { expectedSeq: 0 }))).toBe('committed');
        expect(await fenced(jHi.append(iri, entry(2, hi), { expectedSeq: 1 }))).toBe('committed');
        expect(await fenced(jLo.append(iri, entry(2, lo), { expectedSeq: 1 }))).toBe('PLX_CLUSTER_FENCED');
        // Another actor of the shard, never written: refused all the same (the store fences the shard).
        expect(await fenced(jLo.append(other, entry(1, lo), { expectedSeq: 0 }))).toBe('PLX_CLUSTER_FENCED');
        expect(await fenced(jHi.append(iri, entry(3, hi), { expectedSeq: 2 }))).toBe('committed');
        const history = await jHi.history(iri);
        expect(history.records.map((m) => m.messageId)).toEqual([`${lo}-1`, `${hi}-2`, `${hi}-3`]);
        expect((await jHi.history(other)).records).toEqual([]);
        expect(store.highestEpoch).toBe(epochOf[hi]);
      } finally {
        await jb.close();
        await jd.close();
        await store.close();
      }

      // Frames: a receiver that has seen both sides' views (after the partition heals, or a
      // node that heard both leaders) takes the greater epoch's frames and dead-letters the other's.
      const deadLog = await openLog(pathJoin(dir, DEAD_LETTER_LOG), { fsync: 'always' });
      try {
        const gate = new EpochGate();
        gate.observe(viewA);
        gate.observe(viewC);
        const dead = new DeadLetters(deadLog);
        const delivered: string[] = [];
        const receive = fencedReceiver(gate, dead, async (_from, f) => {
          delivered.push(f.target);
        });
        const frame = (from: string, n: number) =>
          decodeClusterFrame(
            encodeClusterFrame({
              shard,
              epoch: epochOf[from] as bigint,
              messageId: new Uint8Array(16).fill(n),
              sender: iri,
              target: `vt:to-${from}-${n}`,
            }),
          );
        expect(await receive(lo, frame(lo, 1))).toBe('stale');
        expect(await receive(hi, frame(hi, 2))).toBe('stored');
        expect(await receive(lo, frame(lo, 3))).toBe('stale');
        expect(delivered).toEqual([`vt:to-${hi}-2`]);
        const letters = await dead.list();
        expect(letters.map((l) => [l.reason, l.from, l.epoch, l.current])).toEqual([
          ['stale-epoch', lo, `${epochOf[lo]}`, `${epochOf[hi]}`],
          ['stale-epoch', lo, `${epochOf[lo]}`, `${epochOf[hi]}`],
        ]);
      } finally {
        await deadLog.close();
        A.close();
        C.close();
      }
    });
  }
});

describe('members over mutual TLS through a leader change', () => {
  // Real Http2Wires on loopback (mutual TLS 1.3, one cluster CA), StaticMembership members
  // whose requests go to whichever member leads (as gossip membership routes them), on real
  // time. The leader on a stops answering; b, the lowest live id now, starts a leader.
  it('members keep their leases at the same epochs when a new leader takes over', async () => {
    const nodes = ['a', 'b', 'c'];
    const net = await http2Net(nodes, { deliveryDeadlineMs: 3000 });
    const ttl = { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 };
    const gossip = new Map<string, MemberStatus>(nodes.map((n) => [n, 'alive']));
    const leaderOn = (self: string) => {
      const l = new GossipLeaseLeader({
        meta,
        self,
        lease: ttl,
        autoAssign: true,
        clock: monotonicClock,
        status: (n) => gossip.get(n),
        address: (n) => net.addresses.get(n),
        tickEveryMs: 20,
      });
      net.wires.get(self)?.onCall(l.handle);
      return l;
    };
    let leaderNode = 'a';
    let leader = leaderOn('a');
    const first = leader;
    const members = ['b', 'c'].map(
      (id) =>
        new StaticMembership({
          config: {
            meta,
            self: { id, address: net.addresses.get(id) as string },
            members: nodes.map((n) => ({ id: n, address: net.addresses.get(n) as string })),
            authority: 'the gossip lease leader',
          },
          call: async (req) => {
            const to = leaderNode;
            if (to === id) return leader.call(req);
            return decodeReply(await (net.wires.get(id) as Http2Wire).call(to, encodeRequest(req)));
          },
          lease: ttl,
          heartbeatEveryMs: 50,
        }),
    );
    const owned = () =>
      new Map(members.flatMap((m) => m.held().map((l) => [l.shard, { owner: m.self, epoch: l.epoch }] as const)));
    try {
      for (const m of members) await m.join();
      const before = await until(() => (owned().size === meta.shardCount ? owned() : undefined), {
        what: 'b and c to hold every shard from the first leader',
        timeoutMs: 20_000,
      });
      for (const { epoch } of before.values()) expect(epochTag(epoch)).toBe(first.tag);

      // a stops answering and gossip fails it; b leads from now on.
      first.close();
      net.wires.get('a')?.onCall(async () => {
        throw new Error('a is gone');
      });
      gossip.set('a', 'failed');
      leader = leaderOn('b');
      leaderNode = 'b';
      const second = leader;
      // Past the grace period, b's leader lists every shard: adopted, not granted again.
      const view = await until(
        () => {
          const v = second.authority.view();
          return second.graceOver() && v.leases.length === meta.shardCount ? v : undefined;
        },
        { what: 'the new leader past its grace period with every shard leased', timeoutMs: 20_000 },
      );
      for (const l of view.leases) expect(before.get(l.shard)).toEqual({ owner: l.owner, epoch: l.epoch });
      expect(owned()).toEqual(before);
      expect(view.members.map((m) => [m.id, m.status])).toEqual([
        ['b', 'alive'],
        ['c', 'alive'],
      ]);
      // A shard given back is granted again by the new leader, above the first leader's epoch.
      const [shard, was] = [...before].find(([, l]) => l.owner === 'c') as [number, { epoch: bigint }];
      await (members[1] as StaticMembership).release(shard, was.epoch);
      const again = await until(() => ownerOf(second.authority.view(), shard), `shard ${shard} granted again`);
      expect(again.epoch).toBeGreaterThan(was.epoch);
      expect(epochTag(again.epoch)).toBe(second.tag);
    } finally {
      for (const m of members) await m.close();
      leader.close();
      first.close();
      await net.close();
    }
  }, 60_000);
});
