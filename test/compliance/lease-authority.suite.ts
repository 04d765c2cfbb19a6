/**
 * The compliance suite of the LeaseAuthority seam (ts/cluster/lease-authority.ts): the rules
 * every authority keeps, whatever holds its state (memory and a state file, gossip, etcd,
 * Kubernetes). An implementation runs it from its own test file with a factory whose `setup`
 * builds an authority from LEASE_AUTHORITY_SUITE (cluster, members, lease and detector
 * timings, no automatic assignment) reading the harness's injected clock, and whose
 * `teardown` closes it:
 *
 * ```ts
 * leaseAuthoritySuite('MemoryAuthority', {
 *   setup: async () => { const clock = { now: 1000 }; return { clock, authority: new AuthorityHost({ ... }) }; },
 *   teardown: async (h) => h.authority.close(),
 * });
 * ```
 *
 * An implementation that keeps state across a restart of its host gives `restart`; the
 * restart cases run only then.
 */
import { describe, expect, it } from 'vitest';
import type { AuthorityReply, AuthorityRequest, LeaseAuthority } from '../../ts/cluster/lease-authority.js';
import type { ClusterMeta } from '../../ts/cluster/meta.js';
import { isNewer, ownerOf, type View } from '../../ts/cluster/types.js';
import { eachTest, type SuiteFactory } from './_kit.js';

/** What the authority under test is built with. */
export const LEASE_AUTHORITY_SUITE = Object.freeze({
  meta: Object.freeze({ id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 }) as ClusterMeta,
  members: Object.freeze(['a', 'b', 'c'].map((id) => Object.freeze({ id, address: '' }))),
  lease: Object.freeze({ ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 }),
  /** A silent member is failed well before its leases end: the suite tells the two apart. */
  detector: Object.freeze({ suspectAfterMs: 100, failedAfterMs: 300 }),
  /** The authority grants only on request (no automatic assignment of free shards). */
  autoAssign: false,
});

export interface LeaseAuthorityHarness {
  /** The authority under test (replaced by `restart`). */
  authority: LeaseAuthority;
  /** The clock (ms) the authority reads; only the suite moves it. */
  readonly clock: { now: number };
  /**
   * Stops the authority's host and starts it again on what it persisted, replacing
   * `authority`. The clock is what the new host reads (a new process's clock may be lower).
   */
  restart?(): Promise<void>;
}

const { meta, lease, detector } = LEASE_AUTHORITY_SUITE;
const shards = () => [...Array(meta.shardCount).keys()];

type Ok = AuthorityReply & { ok: true };
type Refused = AuthorityReply & { ok: false };

export function leaseAuthoritySuite(name: string, factory: SuiteFactory<LeaseAuthorityHarness>): void {
  describe(`LeaseAuthority compliance: ${name}`, () => {
    const h = eachTest(factory);
    /** Every reply the test saw, in order. */
    let replies: AuthorityReply[] = [];
    const call = async (req: AuthorityRequest): Promise<AuthorityReply> => {
      const r = await h().authority.call(req);
      replies.push(r);
      return r;
    };
    const ok = async (req: AuthorityRequest): Promise<Ok> => {
      const r = await call(req);
      if (!r.ok) throw new Error(`${req.type} refused: ${r.code} ${r.message}`);
      return r;
    };
    const refused = async (req: AuthorityRequest): Promise<Refused> => {
      const r = await call(req);
      if (r.ok) throw new Error(`${req.type} was answered ok; a refusal was expected`);
      return r;
    };
    const join = async (...nodes: string[]) => {
      for (const node of nodes) await ok({ type: 'join', node, address: '', meta });
    };
    const grant = async (node: string, shard: number): Promise<bigint> => {
      const r = await ok({ type: 'grant', node, shard });
      expect(r.lease?.shard).toBe(shard);
      return r.lease?.epoch as bigint;
    };
    const at = (ms: number) => {
      h().clock.now = ms;
    };

    it('answers views with strictly increasing versions; a holder keeps the newest whatever the order', async () => {
      replies = [];
      at(1000);
      await join('a', 'b', 'c');
      const e = await grant('a', 0);
      await ok({ type: 'renew', node: 'a', shard: 0, epoch: e });
      await grant('b', 1);
      await ok({ type: 'heartbeat', node: 'c' });
      await ok({ type: 'release', node: 'a', shard: 0, epoch: e });
      await grant('c', 0);
      await ok({ type: 'drain', node: 'b' });
      await ok({ type: 'view' });
      await ok({ type: 'leave', node: 'b' });
      // Time passes (health changes) within c's lease.
      at(1000 + lease.ttlMs / 2);
      await ok({ type: 'view' });
      const views = replies.map((r) => r.view);
      const distinct = new Set(views.map((v) => JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x))));
      expect(distinct.size).toBeGreaterThan(5);
      // Versions never go down, and a change of content is a new version: a version names one view.
      const byVersion = new Map<number, string>();
      for (let i = 0; i < views.length; i++) {
        const v = views[i] as View;
        const text = JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x));
        if (i > 0) expect(v.version).toBeGreaterThanOrEqual((views[i - 1] as View).version);
        const seen = byVersion.get(v.version);
        if (seen !== undefined) expect(text).toBe(seen);
        byVersion.set(v.version, text);
      }
      // A holder that gets the views in reverse order keeps the newest (isNewer refuses the rest).
      let held: View | undefined;
      for (const v of [...views].reverse()) if (isNewer(held, v)) held = v;
      expect(held).toBe(views[views.length - 1]);
      expect(ownerOf(held as View, 0)?.owner).toBe('c');
      expect(held?.members.map((m) => m.id)).toEqual(['a', 'c']);
    });

    it('keeps the epoch on renewal; every new grant of a shard carries a strictly greater epoch', async () => {
      at(1000);
      await join('a', 'b');
      const e1 = await grant('a', 3);
      const other = await grant('b', 4);
      // Renewal, a repeated grant and a heartbeat keep the epoch.
      expect((await ok({ type: 'renew', node: 'a', shard: 3, epoch: e1 })).lease?.epoch).toBe(e1);
      expect(await grant('a', 3)).toBe(e1);
      at(1500);
      const hb = await ok({ type: 'heartbeat', node: 'a', held: [{ shard: 3, epoch: e1 }] });
      expect(hb.renewed).toEqual([3]);
      expect(ownerOf(hb.view, 3)).toEqual({ shard: 3, owner: 'a', epoch: e1 });
      // A held shard is refused to others; a renewal at a wrong epoch or by another member is refused.
      expect((await refused({ type: 'grant', node: 'b', shard: 3 })).code).toBe('PLX_CLUSTER_LEASE_HELD');
      expect((await refused({ type: 'renew', node: 'b', shard: 3, epoch: e1 })).code).toBe('PLX_CLUSTER_LEASE_LOST');
      expect((await refused({ type: 'renew', node: 'a', shard: 3, epoch: e1 + 1n })).code).toBe(
        'PLX_CLUSTER_LEASE_LOST',
      );
      // After a release, a revocation and an expiry, each grant is above the one before.
      await ok({ type: 'release', node: 'a', shard: 3, epoch: e1 });
      const e2 = await grant('b', 3);
      expect(e2).toBeGreaterThan(e1);
      await ok({ type: 'revoke', shard: 3 });
      expect((await refused({ type: 'renew', node: 'b', shard: 3, epoch: e2 })).code).toBe('PLX_CLUSTER_LEASE_LOST');
      const e3 = await grant('a', 3);
      expect(e3).toBeGreaterThan(e2);
      at(1500 + lease.ttlMs * 3);
      await ok({ type: 'view' });
      const e4 = await grant('b', 3);
      expect(e4).toBeGreaterThan(e3);
      expect((await refused({ type: 'renew', node: 'a', shard: 3, epoch: e3 })).code).toBe('PLX_CLUSTER_LEASE_LOST');
      // The same owner taking a shard again after losing it gets a greater epoch too.
      await ok({ type: 'release', node: 'b', shard: 3, epoch: e4 });
      expect(await grant('b', 3)).toBeGreaterThan(e4);
      // Another shard's epochs are its own: shard 4's lease was never regranted.
      const v = (await ok({ type: 'view' })).view;
      expect(ownerOf(v, 4)).toBeUndefined(); // it expired with the clock moves above
      expect(await grant('a', 4)).toBeGreaterThan(other);
    });

    it('frees a failed member’s leases only when they expire, not on suspicion, failure or removal', async () => {
      at(1000);
      await join('a', 'b', 'c');
      const eb = await grant('b', 5);
      const ec = await grant('c', 6);
      // From now on only a is heard from; b and c fall silent at 1000.
      let sawSuspect = false;
      let sawFailed = false;
      for (let t = 1000 + 50; t < 1000 + lease.ttlMs; t += 50) {
        at(t);
        const hb = await ok({ type: 'heartbeat', node: 'a' });
        const status = hb.view.members.find((m) => m.id === 'b')?.status;
        if (status === 'suspect') sawSuspect = true;
        if (status === 'failed') sawFailed = true;
        if (t >= 1000 + detector.failedAfterMs) {
          expect(status).toBe('failed');
          // c is removed from the membership by an operator: its lease still runs out first.
          if (t === 1000 + detector.failedAfterMs) await ok({ type: 'remove', node: 'c' });
        }
        expect(ownerOf(hb.view, 5)).toEqual({ shard: 5, owner: 'b', epoch: eb });
        expect(ownerOf(hb.view, 6)).toEqual({ shard: 6, owner: 'c', epoch: ec });
        const r5 = await refused({ type: 'grant', node: 'a', shard: 5 });
        expect(r5.code).toBe('PLX_CLUSTER_LEASE_HELD');
        expect((await refused({ type: 'grant', node: 'a', shard: 6 })).code).toBe('PLX_CLUSTER_LEASE_HELD');
      }
      expect(sawSuspect && sawFailed).toBe(true);
      at(1000 + lease.ttlMs);
      const e5 = await grant('a', 5);
      const e6 = await grant('a', 6);
      expect(e5).toBeGreaterThan(eb);
      expect(e6).toBeGreaterThan(ec);
      // b, back, cannot renew what it lost.
      expect((await refused({ type: 'renew', node: 'b', shard: 5, epoch: eb })).code).toBe('PLX_CLUSTER_LEASE_LOST');
    });

    it('refuses grants to a draining member and to a member that has not joined', async () => {
      at(1000);
      await join('a');
      expect((await refused({ type: 'grant', node: 'b', shard: 0 })).code).toBe('PLX_CLUSTER_UNKNOWN_NODE');
      const e = await grant('a', 0);
      await ok({ type: 'drain', node: 'a' });
      expect((await refused({ type: 'grant', node: 'a', shard: 1 })).code).toBe('PLX_CLUSTER_LEAVING');
      // Draining keeps what it holds until it hands it over.
      expect((await ok({ type: 'renew', node: 'a', shard: 0, epoch: e })).lease?.epoch).toBe(e);
      expect(h().authority.isMember('a')).toBe(true);
      await ok({ type: 'leave', node: 'a' });
      expect(h().authority.isMember('a')).toBe(false);
      expect(h().authority.isAdmitted('a')).toBe(true);
      expect(h().authority.isAdmitted('zz')).toBe(false);
    });

    describe('across restarts of the authority’s host', () => {
      it('reuses no epoch and no view version, and grants nothing a lease of the previous run may still cover (skipped for a host held in memory only: it has nothing to restart from)', async (ctx) => {
        if (h().restart === undefined) return ctx.skip();
        at(1000);
        await join('a', 'b', 'c');
        const first = new Map<number, bigint>();
        for (const s of shards()) first.set(s, await grant(['a', 'b', 'c'][s % 3] as string, s));
        const lastVersion = (await ok({ type: 'view' })).view.version;

        // A new process: its monotonic clock starts low again.
        at(50);
        await h().restart?.();
        const v = (await ok({ type: 'view' })).view;
        expect(v.version).toBeGreaterThan(lastVersion);
        await join('a', 'c');
        // Leases the previous run granted may still run by their owners' clocks.
        for (const s of shards()) {
          expect((await refused({ type: 'grant', node: 'a', shard: s })).code).toBe('PLX_CLUSTER_LEASE_HELD');
        }
        at(50 + lease.ttlMs);
        const second = new Map<number, bigint>();
        for (const s of shards()) {
          const e = await grant(s % 2 === 0 ? 'a' : 'c', s);
          expect(e).toBeGreaterThan(first.get(s) as bigint);
          second.set(s, e);
        }
        // Renewals keep the epoch after a restart as before.
        expect((await ok({ type: 'renew', node: 'a', shard: 0, epoch: second.get(0) as bigint })).lease?.epoch).toBe(
          second.get(0),
        );
        const secondVersion = (await ok({ type: 'view' })).view.version;

        // Twice more, the second time with no grant in between.
        for (const round of [0, 1]) {
          at(10);
          await h().restart?.();
          expect((await ok({ type: 'view' })).view.version).toBeGreaterThan(secondVersion);
          if (round === 0) continue;
          await join('b');
          at(10 + lease.ttlMs);
          for (const s of shards()) expect(await grant('b', s)).toBeGreaterThan(second.get(s) as bigint);
        }
      });
    });
  });
}
