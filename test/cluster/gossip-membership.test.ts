/**
 * GossipMembership (ts/cluster/gossip/membership.ts) passes the Membership compliance suite
 * twice: over the in-process MemoryGossipNet with direct authority calls, and over real
 * Http2Wires on loopback (mutual TLS 1.3, gossip and authority requests on the wire's call).
 * Then, over real wires: a node whose certificate another CA signed never joins, a member
 * the leader removed is refused at the handshake, and when the leader goes the requests go to
 * the next one, whose grants carry greater epochs.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeReply, encodeRequest } from '../../ts/cluster/codec.js';
import type { GossipConfig } from '../../ts/cluster/gossip/config.js';
import {
  defaultGossipLeader,
  GossipMembership,
  type GossipMembershipOptions,
} from '../../ts/cluster/gossip/membership.js';
import { loadGossipRemoved, saveGossipRemoved } from '../../ts/cluster/gossip/removed-file.js';
import { GOSSIP_TAG, gossipName, MemoryGossipNet, wireGossipTransport } from '../../ts/cluster/gossip/transport.js';
import type { LeaseAuthority } from '../../ts/cluster/lease-authority.js';
import type { ClusterMeta } from '../../ts/cluster/meta.js';
import type { LeaseEntry } from '../../ts/cluster/types.js';
import { ManualClock } from '../../ts/core/clock.js';
import { createClusterCa, issueNodeCertificate, type NodeCredentials } from '../../ts/net/ca.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { failureCostsSuite } from '../compliance/failure-costs.suite.js';
import { type MembershipHarness, membershipSuite } from '../compliance/membership.suite.js';
import { refusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';
import { nodeCreds } from '../net/helpers.js';
import { META } from './helpers.js';

const LEASE = { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 };
const DETECTOR = { suspectAfterMs: 300, failedAfterMs: 1000 };
/** Fast gossip: a silent member is suspect within about 0.2 s and dead within about 0.8 s. */
const FAST: Partial<GossipConfig> = {
  probeIntervalMs: 100,
  probeTimeoutMs: 40,
  gossipIntervalMs: 30,
  pushPullIntervalMs: 1000,
};
const UNLISTED =
  'gossip membership has no list of node ids: a node is admitted by its certificate (the foreign-certificate test below)';

/** Members over MemoryGossipNet with direct authority calls; every timer on `clock` when given. */
function memoryHarness(
  nodes: readonly string[],
  time: { readonly clock?: ManualClock; readonly wallClock?: () => number } = {},
  leaseClockRate?: (node: string) => number,
): MembershipHarness {
  const net = new MemoryGossipNet();
  const live = new Map<string, GossipMembership>();
  const all: GossipMembership[] = [];
  const name = (id: string) => gossipName(id, `${id}.test:7000`);
  const seeds = [name(nodes[0] as string)];
  const make = (id: string, meta: ClusterMeta = META) => {
    const gm = new GossipMembership({
      meta,
      self: { id, address: `${id}.test:7000` },
      seeds,
      transport: net.transport(name(id)),
      call: async (peer, bytes) => {
        // A member that closed answers nothing, as a stopped process does.
        const to = live.get(peer);
        if (to === undefined || to.isClosed()) throw new Error(`${peer} does not answer`);
        return to.serve(id, bytes);
      },
      leader: defaultGossipLeader({ meta, lease: LEASE, detector: DETECTOR, ...time }),
      gossip: FAST,
      lease: LEASE,
      heartbeatEveryMs: 50,
      ...(time.clock ? { clock: time.clock } : {}),
      ...(leaseClockRate && leaseClockRate(id) !== 1
        ? { leaseClock: { now: () => performance.now() * leaseClockRate(id) } }
        : {}),
    });
    live.set(id, gm);
    all.push(gm);
    return gm;
  };
  const members = new Map(nodes.map((n) => [n, make(n)]));
  return {
    members,
    make,
    meta: META,
    teardown: async () => {
      for (const m of all) await m.close();
    },
  };
}

interface WireNode {
  readonly wire: Http2Wire;
  readonly address: string;
  membership?: GossipMembership;
}

/** Listening Http2Wires whose admission is each node's gossip membership, and memberships made on them. */
class WireCluster {
  readonly nodes = new Map<string, WireNode>();
  private readonly addresses = new Map<string, string>();
  private readonly all: GossipMembership[] = [];
  private readonly wires: Http2Wire[] = [];

  async add(id: string, creds?: NodeCredentials): Promise<WireNode> {
    const c = creds ?? (await nodeCreds(id));
    let node: WireNode | undefined;
    let transport: ReturnType<typeof wireGossipTransport> | undefined;
    const wire = new Http2Wire({
      self: id,
      cluster: 'c1',
      tls: c,
      resolve: (peer) => this.addresses.get(peer) ?? transport?.addressOf(peer),
      isMember: (peer) => node?.membership?.admits(peer) ?? true,
      deliveryDeadlineMs: 1500,
      retryBackoffMs: 20,
    });
    const address = await wire.listen();
    this.addresses.set(id, address);
    this.wires.push(wire);
    node = { wire, address };
    this.nodes.set(id, node);
    return node;
  }

  /** A gossip membership of node `id` on its wire (the wire's call handler serves it). */
  make(
    id: string,
    seeds: readonly string[],
    meta: ClusterMeta = META,
    more: Pick<GossipMembershipOptions, 'removed' | 'saveRemoved'> = {},
  ): GossipMembership {
    const node = this.nodes.get(id) as WireNode;
    const transport = wireGossipTransport(node.wire, gossipName(id, node.address));
    const gm = new GossipMembership({
      meta,
      self: { id, address: node.address },
      seeds,
      transport,
      call: (peer, bytes) => node.wire.call(peer, bytes),
      leader: defaultGossipLeader({ meta, lease: LEASE, detector: DETECTOR }),
      gossip: FAST,
      lease: LEASE,
      heartbeatEveryMs: 50,
      ...more,
    });
    node.wire.onCall((from, body) =>
      body[0] === GOSSIP_TAG ? transport.handleCall(from, body) : gm.serve(from, body),
    );
    node.membership = gm;
    this.all.push(gm);
    return gm;
  }

  name(id: string): string {
    return gossipName(id, (this.nodes.get(id) as WireNode).address);
  }

  async close(): Promise<void> {
    for (const m of this.all) await m.close();
    await Promise.all(this.wires.map((w) => w.close()));
  }
}

membershipSuite('GossipMembership (memory)', async (nodes) => memoryHarness(nodes), { skip: { unlisted: UNLISTED } });

failureCostsSuite('GossipMembership (memory)', async (nodes, opts) => memoryHarness(nodes, {}, opts?.leaseClockRate));

membershipSuite(
  'GossipMembership (http2, mutual TLS)',
  async (nodes) => {
    const c = new WireCluster();
    for (const n of nodes) await c.add(n);
    const seeds = [c.name(nodes[0] as string)];
    const members = new Map(nodes.map((n) => [n, c.make(n, seeds)]));
    return {
      members,
      make: (node, meta) => c.make(node, seeds, meta),
      meta: META,
      teardown: () => c.close(),
    };
  },
  { skip: { unlisted: UNLISTED } },
);

describe('GossipMembership: following the leader', () => {
  it('a request to a leader that does not answer fails as an unreachable authority; the next leader answers once gossip declares it dead', async () => {
    const h = memoryHarness(['a', 'b', 'c']);
    try {
      const m = (id: string) => h.members.get(id) as GossipMembership;
      for (const id of ['a', 'b', 'c']) await m(id).join();
      await until(() => m('c').view().leases.length === META.shardCount, 'every shard leased');
      expect(m('c').leader()).toBe('a');
      const held = m('c').held()[0] ?? (await until(() => m('c').held()[0], 'c to hold a shard'));
      // a stops answering (its process is gone) but gossip still holds it alive for a while.
      await m('a').close();
      const e = await refusal(m('c').renew(held.shard, held.epoch));
      expect(e.code).toBe('PLX_CLUSTER_UNAVAILABLE');
      expect(e.message).toContain('gossip leader a');
      // Gossip declares a dead; b leads, admits c again and, after its grace period, grants.
      await until(() => m('c').leader() === 'b' && m('b').authority() !== undefined, 'b to lead');
      expect(m('b').gossipStatus('a')).toBe('failed');
      await until(
        () =>
          m('c').view().leases.length === META.shardCount &&
          m('c')
            .view()
            .leases.every((l) => l.owner !== 'a'),
        { timeoutMs: 15_000, what: 'b to grant every shard' },
      );
      const mine = await until(() => m('c').held()[0], 'c to hold a shard from b');
      expect((await m('c').renew(mine.shard, mine.epoch)).epoch).toBe(mine.epoch);
      expect(
        m('c')
          .view()
          .members.find((x) => x.id === 'a')?.status ?? 'failed',
      ).toBe('failed');
    } finally {
      await h.teardown();
    }
  }, 30_000);
});

describe('GossipMembership on an injected clock', () => {
  it('runs gossip, heartbeats, the join wait and the leader’s authority on the clock it is given', async () => {
    const clock = new ManualClock(0);
    const h = memoryHarness(['a', 'b'], { clock, wallClock: () => 1_000 });
    const a = h.members.get('a') as GossipMembership;
    const b = h.members.get('b') as GossipMembership;
    /** Moves the clock by `ms` in steps of 10 ms, letting messages and replies through between steps. */
    const run = async (ms: number) => {
      for (let t = 0; t < ms; t += 10) {
        clock.advance(10);
        await new Promise((r) => setImmediate(r));
      }
    };
    try {
      await a.join();
      await b.join();
      // The leader grants nothing during its first lease length on this clock, whatever real time passes.
      await new Promise((r) => setTimeout(r, 300));
      expect(a.view().leases).toHaveLength(0);
      await run(LEASE.ttlMs + 200);
      expect(a.view().leases).toHaveLength(META.shardCount);
      // Epochs start above the leader's start (wall ms 1000) shifted by 16 bits.
      for (const l of a.view().leases) expect(l.epoch).toBeGreaterThan(1000n << 16n);
      const ofB = a.view().leases.filter((l) => l.owner === 'b');
      expect(ofB.length).toBeGreaterThan(0);
      // b goes silent: while the clock stands still, nothing changes, in real time too.
      await b.close();
      await new Promise((r) => setTimeout(r, 1500));
      expect(a.gossipStatus('b')).toBe('alive');
      expect(a.view().leases.filter((l) => l.owner === 'b')).toEqual(ofB);
      // On the clock: gossip declares b dead, then its leases expire and go to a.
      await run(3000);
      expect(a.gossipStatus('b')).toBe('failed');
      expect(a.view().leases.every((l) => l.owner === 'a')).toBe(true);
    } finally {
      await h.teardown();
    }
  });
});

describe('GossipMembership over mutual TLS', () => {
  let c: WireCluster | undefined;
  afterEach(async () => {
    await c?.close();
    c = undefined;
  });

  it('a node whose certificate another CA signed never joins', async () => {
    c = new WireCluster();
    await c.add('a');
    await c.add('b');
    const seeds = [c.name('a')];
    const a = c.make('a', seeds);
    const b = c.make('b', seeds);
    await a.join();
    await b.join();
    // Same cluster id and node naming, another CA: the TLS handshake fails both ways.
    const foreignCa = await createClusterCa('c1');
    await c.add('x', await issueNodeCertificate(foreignCa, 'x'));
    const x = new GossipMembership({
      meta: META,
      self: { id: 'x', address: (c.nodes.get('x') as WireNode).address },
      seeds,
      transport: wireGossipTransport((c.nodes.get('x') as WireNode).wire, c.name('x')),
      call: (peer, bytes) => (c!.nodes.get('x') as WireNode).wire.call(peer, bytes),
      leader: defaultGossipLeader({ meta: META, lease: LEASE }),
      gossip: FAST,
      lease: LEASE,
      joinTimeoutMs: 1500,
    });
    const e = await refusal(x.join());
    expect(e.code).toBe('PLX_CLUSTER_UNAVAILABLE');
    expect(e.details.field).toBe('seeds');
    await x.close();
    // Neither member ever heard of x, and a's wire turned its certificate away.
    for (const m of [a, b]) {
      expect(m.gossipState('x')).toBeUndefined();
      expect(m.view().members.map((v) => v.id)).toEqual(['a', 'b']);
    }
    const refused = (c.nodes.get('a') as WireNode).wire.refusals();
    expect(refused.some((r) => r.code === 'PLX_WIRE_UNTRUSTED')).toBe(true);
  });

  it('a member the leader removed is refused at the handshake', async () => {
    c = new WireCluster();
    for (const id of ['a', 'b', 'c']) await c.add(id);
    const seeds = [c.name('a')];
    const a = c.make('a', seeds);
    const b = c.make('b', seeds);
    const cm = c.make('c', seeds);
    for (const m of [a, b, cm]) await m.join();
    await until(() => a.view().members.length === 3, 'three members');
    expect(a.leader()).toBe('a');
    // Before removal the leader admits c; the operator removes it at the leader's authority.
    expect(a.admits('c')).toBe(true);
    const r = await a.authority()!.call({ type: 'remove', node: 'c' });
    expect(r.ok).toBe(true);
    expect(a.admits('c')).toBe(false);
    expect(a.admits('b')).toBe(true);
    // c comes back on a new connection (a new wire with its own certificate, on a new port;
    // the old one closes with the others at the end): a's wire turns it away once the
    // handshake names it.
    await cm.close();
    const c2 = await c.add('c');
    const before = (c.nodes.get('a') as WireNode).wire.refusals().length;
    const err = await c2.wire.call('a', new Uint8Array([0x7b])).then(
      () => undefined,
      (e: unknown) => e as { code?: string },
    );
    expect(err?.code).toMatch(/^PLX_WIRE_/);
    const after = (c.nodes.get('a') as WireNode).wire.refusals().slice(before);
    expect(after.some((x) => x.code === 'PLX_WIRE_NOT_MEMBER' && x.peer === 'c')).toBe(true);
    // b, which does not lead, learns the removal from the leader's replies and refuses c too.
    await until(() => !b.admits('c'), 'b to learn that c was removed');
    expect(b.removed()).toEqual(['c']);
    // A node gossip does not know may connect (to join), and so may one it holds dead (to
    // come back and refute): only removal turns a node away.
    expect(a.admits('d')).toBe(true);
    await b.close();
    await until(() => a.gossipStatus('b') === 'failed', 'a to hold b dead');
    expect(a.admits('b')).toBe(true);
  });

  it('a removal outlives a leader change: the new leader refuses the removed node, and so does every member’s handshake and data directory', async () => {
    c = new WireCluster();
    const ids = ['a', 'b', 'c', 'd'];
    for (const id of ids) await c.add(id);
    const dirs = new Map<string, string>();
    for (const id of ids) dirs.set(id, await mkdtemp(join(tmpdir(), `plexus-gossip-removed-${id}-`)));
    try {
      const seeds = [c.name('a')];
      const ms = new Map(
        ids.map((id) => [
          id,
          c!.make(id, seeds, META, {
            saveRemoved: (list) => saveGossipRemoved(dirs.get(id) as string, META.id, list),
          }),
        ]),
      );
      const [a, b, cm, d] = ids.map((id) => ms.get(id) as GossipMembership) as [
        GossipMembership,
        GossipMembership,
        GossipMembership,
        GossipMembership,
      ];
      for (const m of ms.values()) await m.join();
      await until(() => [a, b, d].every((m) => m.view().members.length === 4), 'four members');
      expect(a.leader()).toBe('a');
      // The operator's removal reaches the leader over the wire (from b's certificate here).
      const r = decodeReply(
        await (c.nodes.get('b') as WireNode).wire.call('a', encodeRequest({ type: 'remove', node: 'c' })),
      );
      expect(r.ok).toBe(true);
      expect(r.removed).toEqual(['c']);
      // Every other member learns it from the leader's replies, refuses c at its wire and keeps
      // the removed set in its data directory (read back from the file).
      await until(() => [a, b, d].every((m) => !m.admits('c')), 'every member to refuse c');
      for (const id of ['a', 'b', 'd']) {
        await until(
          async () => (await loadGossipRemoved(dirs.get(id) as string, META.id)).includes('c'),
          `${id} to keep the removed set on disk`,
        );
      }
      expect(await loadGossipRemoved(dirs.get('c') as string, META.id)).toEqual([]);
      for (const m of [a, b, d]) expect(m.view().members.map((v) => v.id)).toEqual(['a', 'b', 'd']);
      // The leader leaves; b, the next lowest id, leads with the removed set it held.
      await a.leave();
      await until(() => b.leader() === 'b' && d.leader() === 'b', 'b to lead');
      const lb = b.authority() as LeaseAuthority;
      expect(lb).toBeDefined();
      expect(lb.isAdmitted('c')).toBe(false);
      const join = await lb.call({ type: 'join', node: 'c', address: '', meta: META });
      expect(join.ok).toBe(false);
      expect(join.ok === false && join.message).toMatch(/removed/);
      expect(join.removed).toEqual(['c']);
      // c, still running, reaches neither b nor d: their handshakes turn it away.
      const cWire = (c.nodes.get('c') as WireNode).wire;
      for (const id of ['b', 'd']) {
        const w = (c.nodes.get(id) as WireNode).wire;
        const before = w.refusals().length;
        const err = await cWire.call(id, encodeRequest({ type: 'view' })).then(
          () => undefined,
          (e: unknown) => e as { code?: string },
        );
        expect(err?.code).toMatch(/^PLX_WIRE_/);
        // The caller may see its call fail before the refusing side has recorded why.
        await until(
          () =>
            w
              .refusals()
              .slice(before)
              .some((x) => x.code === 'PLX_WIRE_NOT_MEMBER' && x.peer === 'c'),
          { timeoutMs: 5_000, what: `${id} to record its refusal of c` },
        );
      }
      // The new leader grants b and d every shard, none to c, once its grace period is over.
      await until(() => b.view().leases.length === META.shardCount, { timeoutMs: 15_000, what: 'every shard leased' });
      expect(b.view().leases.every((l) => l.owner === 'b' || l.owner === 'd')).toBe(true);
      expect(cm.held().every((l) => !b.view().leases.some((v) => v.shard === l.shard && v.epoch === l.epoch))).toBe(
        true,
      );
      // A member started again from its data directory refuses c from the start, before any
      // leader answered it.
      const kept = await loadGossipRemoved(dirs.get('d') as string, META.id);
      const restarted = new GossipMembership({
        meta: META,
        self: { id: 'e', address: '127.0.0.1:1' },
        seeds: [],
        transport: new MemoryGossipNet().transport(gossipName('e', '127.0.0.1:1')),
        call: async () => {
          throw new Error('no peer');
        },
        leader: defaultGossipLeader({ meta: META, lease: LEASE }),
        removed: kept,
      });
      expect(restarted.admits('c')).toBe(false);
      expect(restarted.admits('b')).toBe(true);
      await restarted.close();
    } finally {
      for (const dir of dirs.values()) await rm(dir, { recursive: true, force: true });
    }
  }, 40_000);

  it('a leader that did not know of a removal learns it from a member’s heartbeats', async () => {
    c = new WireCluster();
    for (const id of ['a', 'b', 'x']) await c.add(id);
    const seeds = [c.name('a')];
    // b kept x's removal (its data directory); a, which leads, started without it.
    const a = c.make('a', seeds);
    const b = c.make('b', seeds, META, { removed: ['x'] });
    const x = c.make('x', seeds);
    await a.join();
    await b.join();
    expect(b.admits('x')).toBe(false);
    await until(() => a.removed().includes('x'), 'a to learn x’s removal from b');
    expect(a.admits('x')).toBe(false);
    expect((a.authority() as LeaseAuthority).isAdmitted('x')).toBe(false);
    // x, which a's gossip may know, is refused when it joins.
    const e = await refusal(x.join());
    expect(e.code).toMatch(/^PLX_CLUSTER_/);
    expect(a.view().members.map((m) => m.id)).toEqual(['a', 'b']);
  }, 30_000);

  it('when the leader leaves, requests go to the next lowest id, which keeps reported leases and grants the leaver’s shards at greater epochs', async () => {
    c = new WireCluster();
    for (const id of ['a', 'b', 'c']) await c.add(id);
    const seeds = [c.name('a'), c.name('b')];
    const ms = ['a', 'b', 'c'].map((id) => c!.make(id, seeds));
    const [a, b, cm] = ms as [GossipMembership, GossipMembership, GossipMembership];
    // Every seed list names another member: the members wait for one another, so they join together.
    await Promise.all(ms.map((m) => m.join()));
    await until(() => b.view().leases.length === META.shardCount, 'every shard leased');
    const first = new Map(b.view().leases.map((l) => [l.shard, l]));
    expect(b.leader()).toBe('a');
    expect(a.authority()).toBeDefined();
    expect(b.authority()).toBeUndefined();
    await a.leave();
    await until(() => b.leader() === 'b' && cm.leader() === 'b', 'b to lead');
    expect(b.authority()).toBeDefined();
    await until(
      () =>
        cm.view().leases.length === META.shardCount &&
        cm.view().leases.every((l) => {
          const before = first.get(l.shard) as LeaseEntry;
          // a's shards are granted anew at greater epochs; b and c report theirs to the new
          // leader, which keeps them at their epochs (or they are granted again, greater).
          return l.owner !== 'a' && (before.owner === 'a' ? l.epoch > before.epoch : l.epoch >= before.epoch);
        }),
      { timeoutMs: 15_000, what: 'every shard held by b or c, a’s granted again by b at greater epochs' },
    );
    // c's requests reach b now: a grant of a shard c holds keeps its epoch.
    const mine = cm.held()[0] ?? (await until(() => cm.held()[0], 'c to hold a shard'));
    expect((await cm.grant(mine.shard)).epoch).toBe(mine.epoch);
    expect(cm.view().members.map((m) => m.id)).toEqual(['b', 'c']);
  }, 30_000);
});
