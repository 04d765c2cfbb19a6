/**
 * "What each failure costs" (the seed's table, cluster-and-federation.txt), one test per row
 * that applies to membership, for any Membership implementation. Safety never depends on
 * clocks or relays behaving well; only availability does. An implementation runs it from its
 * own test file with the factory it gives `membershipSuite` (test/compliance/membership.suite.ts),
 * which may also honour `leaseClockRate` (the clock-skew row needs an owner whose lease clock
 * runs slow):
 *
 * ```ts
 * failureCostsSuite('StaticMembership + MemoryAuthority', factory);
 * ```
 *
 * Each test runs actors on three cluster nodes (`assembleClusterNode`) over MemoryWire with a
 * shared in-memory journal store, on the memberships the factory builds (shard count 8, leases
 * of about one second, free shards assigned automatically), and ends with the journals checked
 * by the history checker (ts/cluster/history.ts): epochs never go back, every message is
 * consumed at most once, and at most one node wrote under each (shard, epoch).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { DeadLetters } from '../../ts/cluster/fencing.js';
import { checkHistory, readShard, type ShardHistory } from '../../ts/cluster/history.js';
import { assembleClusterNode, type ClusterNode } from '../../ts/cluster/node.js';
import { type Membership, ownerOf } from '../../ts/cluster/types.js';
import { decodeJournalRecord } from '../../ts/codec/journal-record.js';
import { MemoryNetwork, MemoryWire } from '../../ts/net/memory-wire.js';
import { MemoryLog, MemoryLogState } from '../../ts/storage/index.js';
import { refusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';
import type { MembershipHarness } from './membership.suite.js';

export interface FailureCostsOptions {
  /** The rate of real time at which `node`'s lease clock runs (default 1). */
  readonly leaseClockRate?: (node: string) => number;
}

/** The `MembershipFactory` of membershipSuite, with the options a row may ask for. */
export type FailureCostsFactory = (nodes: readonly string[], opts?: FailureCostsOptions) => Promise<MembershipHarness>;

const NODES = ['a', 'b', 'c'] as const;

/** Three cluster nodes on the factory's memberships, over MemoryWire, sharing one journal store. */
interface Cluster {
  readonly h: MembershipHarness;
  readonly network: MemoryNetwork;
  readonly nodes: Map<string, ClusterNode>;
  readonly stores: Map<number, MemoryLogState>;
  readonly writers: Map<string, Set<string>>;
  m(id: string): Membership;
  shardOf(iri: string): number;
  /** The owner of `shard` in a's view. */
  owner(shard: number): { owner: string; epoch: bigint } | undefined;
  histories(): Promise<ShardHistory[]>;
  close(): Promise<void>;
}

async function cluster(factory: FailureCostsFactory, opts?: FailureCostsOptions): Promise<Cluster> {
  const h = await factory(NODES, opts);
  const network = new MemoryNetwork();
  const stores = new Map<number, MemoryLogState>();
  const writers = new Map<string, Set<string>>();
  const nodes = new Map<string, ClusterNode>();
  for (const id of NODES) {
    const wire = new MemoryWire({
      self: id,
      network,
      isMember: (p) => (NODES as readonly string[]).includes(p),
      deliveryDeadlineMs: 1000,
      retryBackoffMs: 20,
    });
    await wire.listen();
    let cn: ClusterNode | undefined;
    cn = assembleClusterNode({
      self: id,
      meta: h.meta,
      membership: h.members.get(id) as Membership,
      wire,
      layout: 'shared',
      open: async (shard) => {
        let s = stores.get(shard);
        if (s === undefined) {
          s = new MemoryLogState();
          stores.set(shard, s);
        }
        return new MemoryLog(s);
      },
      deadLetters: new DeadLetters(new MemoryLog()),
      config: { deliveryDeadlineMs: 20_000, retryBackoffMs: 20 },
      runtime: { idleAfter: 0, snapshotEvery: 0 },
      onMacrostep: (iri) => {
        const p = cn?.placement;
        if (!p) return;
        const shard = p.shardOf(iri);
        const key = `${shard}/${p.heldEpoch(shard)}`;
        let set = writers.get(key);
        if (set === undefined) {
          set = new Set();
          writers.set(key, set);
        }
        set.add(id);
      },
      onStop: async () => {
        await wire.close();
      },
    });
    nodes.set(id, cn);
  }
  for (const id of NODES) await (h.members.get(id) as Membership).join();
  const m = (id: string) => h.members.get(id) as Membership;
  const c: Cluster = {
    h,
    network,
    nodes,
    stores,
    writers,
    m,
    shardOf: (iri) => (nodes.get('a') as ClusterNode).placement.shardOf(iri),
    owner: (shard) => ownerOf(m('a').view(), shard),
    async histories() {
      const out: ShardHistory[] = [];
      for (const [shard, s] of stores) out.push(await readShard(shard, new MemoryLog(s)));
      return out;
    },
    async close() {
      network.faults = {};
      for (const n of nodes.values()) await n.stop().catch(() => {});
      await h.teardown();
    },
  };
  // Every shard leased, and usable by its owner (so every node has shards, and b has one).
  await until(
    () => {
      for (let s = 0; s < h.meta.shardCount; s++) {
        const o = c.owner(s);
        if (o === undefined || m(o.owner).leaseFor(s) === undefined) return false;
      }
      return true;
    },
    { timeoutMs: 15_000, what: 'every shard leased and usable by its owner' },
  );
  return c;
}

/** A shard b owns, after spreading the shards if b holds none. */
async function shardOfB(c: Cluster): Promise<number> {
  for (let round = 0; ; round++) {
    for (let s = 0; s < c.h.meta.shardCount; s++) if (c.owner(s)?.owner === 'b') return s;
    if (round > 0) throw new Error('b holds no shard');
    // One member may have taken every shard before the others joined: revoking spreads them.
    for (let s = 0; s < c.h.meta.shardCount; s++) await c.m('a').revoke(s);
    await until(
      () =>
        [...Array(c.h.meta.shardCount).keys()].every((s) => {
          const o = c.owner(s);
          return o !== undefined && c.m(o.owner).leaseFor(s) !== undefined;
        }) && [...Array(c.h.meta.shardCount).keys()].some((s) => c.owner(s)?.owner === 'b'),
      { timeoutMs: 15_000, what: 'the shards to spread' },
    );
  }
}

function iriIn(c: Cluster, prefix: string, shard: number): string {
  for (let i = 0; ; i++) if (c.shardOf(`${prefix}${i}`) === shard) return `${prefix}${i}`;
}

/** A frame stamped with `epoch` of `shard`, as b's actors' frames are. */
function staleFrame(shard: number, epoch: bigint, sender: string, target: string) {
  return {
    shard,
    epoch,
    sender,
    target,
    payload: new TextEncoder().encode(JSON.stringify({ node: 'b', id: 'zombie', event: { name: 'inc' } })),
  };
}

/** Waits until `shard` is owned by a member other than b at an epoch above `e1`, usable by it. */
async function movedOffB(c: Cluster, shard: number, e1: bigint): Promise<string> {
  await until(
    () => {
      const o = c.owner(shard);
      return o !== undefined && o.owner !== 'b' && o.epoch > e1 && c.m(o.owner).leaseFor(shard) !== undefined;
    },
    { timeoutMs: 15_000, what: `shard ${shard} to move off b at an epoch above ${e1}` },
  );
  return (c.owner(shard) as { owner: string }).owner;
}

export function failureCostsSuite(name: string, factory: FailureCostsFactory): void {
  describe(`What each failure costs: ${name}`, () => {
    let c: Cluster | undefined;
    afterEach(async () => {
      await c?.close();
      c = undefined;
    });

    it("a partition isolates a shard owner: a new owner gets a higher epoch; the old owner's appends and frames are fenced", async () => {
      c = await cluster(factory);
      const shard = await shardOfB(c);
      const [a, b] = [c.nodes.get('a')!, c.nodes.get('b')!];
      const actor = iriIn(c, 'vt:relay/p', shard);
      expect(await a.node.send(actor, 'ping', { id: 'before' })).toBe('processed');
      const e1 = b.placement.heldEpoch(shard);
      expect(e1).toBeGreaterThan(0n);
      // b is cut off: from the lease authority (its membership stops: no renewal arrives) and
      // from the other nodes (every frame to or from it is lost).
      c.network.faults = { drop: (from, to) => from === 'b' || to === 'b' };
      await c.m('b').close();
      const newOwner = await movedOffB(c, shard, e1);
      // Availability, not safety, paid: by its own clock b stopped using the lease before
      // anyone else could get it.
      expect(c.m('b').leaseFor(shard)).toBeUndefined();
      expect(b.placement.decide(actor).kind).not.toBe('local');
      expect(await a.node.send(actor, 'ping', { id: 'after' })).toBe('processed');
      // The partition heals. A frame b sent with the old epoch arrives late: dropped as stale.
      c.network.faults = {};
      const counter = iriIn(c, 'vt:counter/p', shard);
      expect(await b.wire.send(newOwner, staleFrame(shard, e1, actor, counter))).toBe('stale');
      expect((await c.nodes.get(newOwner)!.deadLetters.list()).at(-1)).toMatchObject({
        reason: 'stale-epoch',
        epoch: `${e1}`,
      });
      // An append b had in flight with the old epoch reaches the store late: fenced.
      const late = await refusal(new MemoryLog(c.stores.get(shard)!).append([new Uint8Array([1])], { epoch: e1 }));
      expect(late.code).toBe('PLX_STORAGE_FENCED');
      const report = checkHistory(await c.histories(), c.writers);
      expect(report.problems).toEqual([]);
      expect([...(report.consumed.get(actor) ?? [])].sort()).toEqual(['after', 'before']);
      expect(report.consumed.get(counter)).toBeUndefined();
      expect(report.epochs.get(shard)!.at(-1)! > e1).toBe(true);
    });

    it('clock skew beyond the safety margin: fencing on appends and frames keeps safety', async () => {
      // b's lease clock runs at a tenth of real time: cut off from the authority, it believes
      // its lease lasts ten times longer than it does.
      c = await cluster(factory, { leaseClockRate: (node) => (node === 'b' ? 0.1 : 1) });
      const shard = await shardOfB(c);
      const [a, b] = [c.nodes.get('a')!, c.nodes.get('b')!];
      const actor = iriIn(c, 'vt:relay/k', shard);
      expect(await a.node.send(actor, 'ping', { id: 'before' })).toBe('processed');
      const e1 = b.placement.heldEpoch(shard);
      await c.m('b').close();
      const newOwner = await movedOffB(c, shard, e1);
      expect(await a.node.send(actor, 'ping', { id: 'after' })).toBe('processed');
      // b still believes it owns the shard: it runs a macrostep and appends with the old epoch.
      expect(c.m('b').leaseFor(shard)?.epoch, 'b runs on a slow lease clock (the factory honours leaseClockRate)').toBe(
        e1,
      );
      expect(b.placement.decide(actor)).toEqual({ kind: 'local' });
      const e = await refusal(b.node.send(actor, 'ping', { id: 'skewed' }));
      expect(e.code).toBe('PLX_RUNTIME_JOURNAL_FAILED');
      expect((e.cause as { code?: string } | undefined)?.code).toBe('PLX_CLUSTER_FENCED');
      // Its actors' frames carry the old epoch: the receiver drops them.
      const counter = iriIn(c, 'vt:counter/k', shard);
      expect(await b.wire.send(newOwner, staleFrame(shard, e1, actor, counter))).toBe('stale');
      const report = checkHistory(await c.histories(), c.writers);
      expect(report.problems).toEqual([]);
      expect([...(report.consumed.get(actor) ?? [])].sort()).toEqual(['after', 'before']);
      expect(report.consumed.get(counter)).toBeUndefined();
    });

    it('owner crash, replication factor 1: the shard is unavailable until its journal is reachable again; messages wait', async () => {
      c = await cluster(factory);
      const shard = await shardOfB(c);
      const [a, b] = [c.nodes.get('a')!, c.nodes.get('b')!];
      const actor = iriIn(c, 'vt:counter/x', shard);
      expect(await a.node.send(actor, 'inc', { id: 'before' })).toBe('processed');
      const e1 = b.placement.heldEpoch(shard);
      // b crashes: no drain, no release; its lease runs out at the authority.
      await c.m('b').close();
      await b.wire.close();
      const crashedAt = Date.now();
      let settledAfter: number | undefined;
      const waiting = a.node.send(actor, 'inc', { id: 'waiting' }).finally(() => {
        settledAfter = Date.now() - crashedAt;
      });
      // While b's lease lasts nobody may run the shard: the message waits (neither lost nor
      // failed). The shard store is shared, so the journal is reachable from the next owner:
      // it takes the shard at a greater epoch and the message is delivered. (With per-node
      // stores the shard waits for b itself: test/cluster/actors-layout.test.ts.)
      await movedOffB(c, shard, e1);
      expect(await waiting).toBe('processed');
      // Not before b's lease (a second from its last renewal, at most 300 ms before the crash) ended.
      expect(settledAfter).toBeGreaterThanOrEqual(500);
      const histories = await c.histories();
      const report = checkHistory(histories, c.writers);
      expect(report.problems).toEqual([]);
      expect([...(report.consumed.get(actor) ?? [])].sort()).toEqual(['before', 'waiting']);
      const at = histories
        .find((x) => x.shard === shard)!
        .records.find((r) => {
          const rec = decodeJournalRecord(r.payload);
          return rec.kind !== 'snapshot' && rec.messageId === 'waiting';
        })!;
      expect(at.epoch).toBeGreaterThan(e1);
    });

    it('lost acknowledgement: retry; the receiver deduplicates by message id', async () => {
      c = await cluster(factory);
      await shardOfB(c);
      // Every frame arrives twice (as after an acknowledgement lost on the way back), and
      // a fifth of the attempts are lost and retried.
      let n = 0;
      c.network.faults = { drop: () => n++ % 5 === 0, duplicate: () => true };
      const acked = new Map<string, string>();
      await Promise.all(
        Array.from({ length: 48 }, async (_, i) => {
          const from = c!.nodes.get(NODES[i % 3]!)!;
          const target = `vt:counter/l${i % 16}`;
          expect(await from.node.send(target, 'inc', { id: `l-${i}` })).toBe('processed');
          acked.set(`l-${i}`, target);
        }),
      );
      c.network.faults = {};
      // The caller's own retries of an acknowledged message, after its acknowledgement was
      // lost: through every node (over the wire the retry is acknowledged again; on the
      // owner it is answered `duplicate`), and the journal still holds it once (below).
      const owner = c.owner(c.shardOf('vt:counter/l0'))!.owner;
      for (const id of NODES) {
        const r = await c.nodes.get(id)!.node.send('vt:counter/l0', 'inc', { id: 'l-0' });
        if (id === owner) expect(r).toBe('duplicate');
        else expect(['processed', 'duplicate']).toContain(r);
      }
      const report = checkHistory(await c.histories(), c.writers);
      expect(report.problems).toEqual([]);
      for (const [id, target] of acked) expect(report.consumed.get(target)?.has(id), id).toBe(true);
      expect(report.macrosteps).toBe(acked.size);
    });

    it('stale routing table: redirect and forward, within the hop limit', async () => {
      c = await cluster(factory);
      const shard = await shardOfB(c);
      const [a, cc] = [c.nodes.get('a')!, c.nodes.get('c')!];
      const e = c.owner(shard)!.epoch;
      // a's table says c owns b's shard: c forwards the message to b, and a learns b.
      expect(a.placement.redirect(shard, 'c', e)).toBe(true);
      const target = iriIn(c, 'vt:counter/r', shard);
      expect(await a.node.send(target, 'inc', { id: 'r-1' })).toBe('processed');
      expect(cc.processor.stats.forwarded).toBeGreaterThanOrEqual(1);
      await until(() => a.placement.redirectTable().get(shard)?.owner === 'b', { what: 'the redirect to b at a' });
      const report = checkHistory(await c.histories(), c.writers);
      expect(report.problems).toEqual([]);
      expect(report.consumed.get(target)?.has('r-1')).toBe(true);
      // The owner wrote it: one writer under the shard's epoch.
      expect(c.writers.get(`${shard}/${e}`)).toEqual(new Set(['b']));
    });
  });
}
