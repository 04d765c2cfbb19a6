/**
 * The compliance suite of the Membership seam (ts/cluster/types.ts). An implementation runs
 * it with a factory that builds a cluster of the given nodes (not yet joined), with shard
 * count 8, leases of about one second and automatic assignment of free shards.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { drainAndLeave } from '../../ts/cluster/drain.js';
import type { ClusterMeta } from '../../ts/cluster/meta.js';
import type { Membership, View } from '../../ts/cluster/types.js';
import { refusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';

export interface MembershipHarness {
  readonly members: ReadonlyMap<string, Membership>;
  /** A membership for `node` built with `meta` (not joined). */
  make(node: string, meta?: ClusterMeta): Membership;
  readonly meta: ClusterMeta;
  teardown(): Promise<void>;
}

export type MembershipFactory = (nodes: readonly string[]) => Promise<MembershipHarness>;

export interface MembershipSuiteOptions {
  /**
   * Cases that cannot apply to an implementation, each with the reason (the case is skipped,
   * and counted as skipped). `unlisted`: the implementation has no list of node ids to refuse
   * an unlisted one by (gossip admits by certificate).
   */
  readonly skip?: { readonly unlisted?: string };
}

export function membershipSuite(name: string, factory: MembershipFactory, opts: MembershipSuiteOptions = {}): void {
  describe(`Membership compliance: ${name}`, () => {
    let h: MembershipHarness | undefined;
    afterEach(async () => {
      await h?.teardown();
      h = undefined;
    });
    const m = (id: string) => h?.members.get(id) as Membership;

    it('joins every member and reports views with strictly increasing versions', async () => {
      h = await factory(['a', 'b', 'c']);
      const seen: View[] = [];
      m('c').subscribe((v) => seen.push(v));
      for (const id of ['a', 'b', 'c']) await m(id).join();
      await until(() => m('c').view().members.length === 3, 'three members in c’s view');
      expect(
        m('c')
          .view()
          .members.map((x) => x.id),
      ).toEqual(['a', 'b', 'c']);
      for (let i = 1; i < seen.length; i++) expect(seen[i]!.version).toBeGreaterThan(seen[i - 1]!.version);
    });

    it('assigns every shard to exactly one member, deterministically', async () => {
      h = await factory(['a', 'b', 'c']);
      for (const id of ['a', 'b', 'c']) await m(id).join();
      await until(() => m('a').view().leases.length === h!.meta.shardCount, 'all shards leased');
      const v = m('a').view();
      expect(new Set(v.leases.map((l) => l.shard)).size).toBe(h.meta.shardCount);
      await until(
        () => ['a', 'b', 'c'].every((id) => m(id).view().version >= v.version),
        'every member to see the view',
      );
      expect(v.leases.every((l) => ['a', 'b', 'c'].includes(l.owner))).toBe(true);
      // Each owner holds its leases at the view's epochs; nobody else may use them.
      await until(
        () => v.leases.every((l) => m(l.owner).leaseFor(l.shard)?.epoch === l.epoch),
        'owners to hold their leases',
      );
      for (const l of v.leases) {
        for (const id of ['a', 'b', 'c'].filter((x) => x !== l.owner)) expect(m(id).leaseFor(l.shard)).toBeUndefined();
      }
      expect(m('a').held().length + m('b').held().length + m('c').held().length).toBe(h.meta.shardCount);
    });

    it('refuses a node built with another ClusterMeta, naming the field', async () => {
      h = await factory(['a', 'b']);
      await m('a').join();
      for (const [field, value] of [
        ['id', 'c2'],
        ['shardCount', 16],
      ] as const) {
        const other = h.make('b', { ...h.meta, [field]: value });
        const e = await refusal(other.join());
        expect(e.code).toBe('PLX_CLUSTER_META_MISMATCH');
        expect(e.details.field).toBe(field);
        await other.close();
      }
      // Nothing replicates yet: a node built with a replication factor above 1 is refused
      // before it can join.
      const e = await refusal(Promise.resolve().then(() => h!.make('b', { ...h!.meta, replicationFactor: 3 })));
      expect(e.code).toBe('PLX_CLUSTER_REPLICATION_UNSUPPORTED');
      expect(e.details.field).toBe('replicationFactor');
    });

    const unlisted = opts.skip?.unlisted;
    (unlisted === undefined ? it : it.skip)(
      `refuses a node id the cluster does not list${unlisted === undefined ? '' : ` (does not apply: ${unlisted})`}`,
      async () => {
        h = await factory(['a', 'b']);
        const e = await refusal(h.make('zz').join());
        expect(e.code).toBe('PLX_CLUSTER_UNKNOWN_NODE');
      },
    );

    it('renews keep the epoch; grants after release and revoke get a greater one; a held shard is refused', async () => {
      h = await factory(['a', 'b']);
      await m('a').join();
      await m('b').join();
      await until(() => m('a').view().leases.length === h!.meta.shardCount, 'all shards leased');
      const l = m('a').view().leases[0]!;
      const owner = m(l.owner);
      const other = m(l.owner === 'a' ? 'b' : 'a');
      const g = await owner.grant(l.shard);
      expect(g.epoch).toBe(l.epoch);
      const r = await owner.renew(l.shard, l.epoch);
      expect(r.epoch).toBe(l.epoch);
      expect((await refusal(other.grant(l.shard))).code).toBe('PLX_CLUSTER_LEASE_HELD');
      expect((await refusal(other.renew(l.shard, l.epoch))).code).toBe('PLX_CLUSTER_LEASE_LOST');
      await owner.release(l.shard, l.epoch);
      await until(
        () =>
          (m('a')
            .view()
            .leases.find((x) => x.shard === l.shard)?.epoch ?? 0n) > l.epoch,
        'a regrant',
      );
      const e2 = m('a')
        .view()
        .leases.find((x) => x.shard === l.shard)!;
      await m('a').revoke(l.shard);
      await until(
        () =>
          (m('a')
            .view()
            .leases.find((x) => x.shard === l.shard)?.epoch ?? 0n) > e2.epoch,
        'a regrant',
      );
      expect((await refusal(owner.renew(l.shard, l.epoch))).code).toBe('PLX_CLUSTER_LEASE_LOST');
    });

    it('drains before leaving: no new lease while draining, every held shard handed over at a greater epoch', async () => {
      h = await factory(['a', 'b']);
      await m('a').join();
      await until(() => m('a').held().length === h!.meta.shardCount, 'a to hold every shard');
      await m('b').join();
      const before = new Map(
        m('a')
          .held()
          .map((l) => [l.shard, l.epoch]),
      );
      const steps: string[] = [];
      await drainAndLeave(m('a'), {
        refuseActivations: () => {
          steps.push('refuse');
        },
        finishMacrosteps: async () => {
          steps.push('finish');
        },
        flushOutboxes: async () => {
          steps.push('flush');
        },
        handOver: async (shard, epoch) => {
          expect(epoch).toBe(before.get(shard));
          if (steps.length === 3) {
            // Draining: the member is leaving and takes no new lease.
            expect((await refusal(m('a').grant(shard))).code).toBe('PLX_CLUSTER_LEAVING');
            expect(
              m('a')
                .view()
                .members.find((x) => x.id === 'a')?.status,
            ).toBe('leaving');
          }
          steps.push(`hand-over ${shard}`);
        },
      });
      expect(steps.slice(0, 3)).toEqual(['refuse', 'finish', 'flush']);
      expect(steps.slice(3).sort()).toEqual([...before.keys()].map((s) => `hand-over ${s}`).sort());
      expect(m('a').held()).toHaveLength(0);
      await until(
        () =>
          m('b').view().leases.length === h!.meta.shardCount &&
          m('b')
            .view()
            .leases.every((l) => l.owner === 'b'),
        'b to own every shard',
      );
      for (const l of m('b').view().leases) expect(l.epoch).toBeGreaterThan(before.get(l.shard) as bigint);
      await until(
        () =>
          m('b')
            .view()
            .members.every((x) => x.id !== 'a'),
        'a to be gone from b’s view',
      );
    });

    it('gives a silent member’s shards to others only after its leases expire, with greater epochs', async () => {
      h = await factory(['a', 'b']);
      await m('a').join();
      await m('b').join();
      // a joined first and took every shard; revoking spreads them over both members.
      await until(() => m('a').view().leases.length === h!.meta.shardCount, 'all shards leased');
      for (let s = 0; s < h.meta.shardCount; s++) await m('a').revoke(s);
      await until(
        () =>
          new Set(
            m('a')
              .view()
              .leases.map((l) => l.owner),
          ).size === 2,
        'both members to own shards',
      );
      const before = m('a')
        .view()
        .leases.filter((l) => l.owner === 'b');
      const stoppedAt = Date.now();
      await m('b').close(); // b stops heartbeating and renewing
      // Every shard leased again, all to a (where shards are claimed after they expire, a
      // view may briefly list none for a shard of b's).
      await until(() => {
        const v = m('a').view();
        return v.leases.length === h!.meta.shardCount && v.leases.every((l) => l.owner === 'a');
      }, 'a to own every shard');
      // The lease lasts about a second after b's last renewal.
      expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(500);
      for (const l of before) {
        const now = m('a')
          .view()
          .leases.find((x) => x.shard === l.shard)!;
        expect(now.epoch).toBeGreaterThan(l.epoch);
      }
      expect(
        m('a')
          .view()
          .members.find((x) => x.id === 'b')?.status,
      ).toBe('failed');
    });
  });
}
