/**
 * EtcdAuthority against a real 3-member etcd cluster on loopback (test/helpers/etcd.ts), one
 * cluster for the file, each test under its own key prefix: the LeaseAuthority compliance
 * suite (with restarts: a new authority object on the same etcd), the cluster meta check, the
 * member watch, racing authorities, renewals while the etcd leader is SIGKILLed, and leases
 * ending on the authority's clock whatever etcd does to its own lease TTLs on a leader change.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EtcdAuthority, type EtcdAuthorityOptions } from '../../ts/cluster/etcd-authority.js';
import { EtcdGateway } from '../../ts/cluster/etcd-gateway.js';
import type { AuthorityReply } from '../../ts/cluster/lease-authority.js';
import type { View } from '../../ts/cluster/types.js';
import { PlexusError } from '../../ts/core/errors.js';
import { RetryPolicy } from '../../ts/core/retry.js';
import {
  LEASE_AUTHORITY_SUITE,
  type LeaseAuthorityHarness,
  leaseAuthoritySuite,
} from '../compliance/lease-authority.suite.js';
import { type EtcdCluster, etcdAvailable, etcdHttp, startEtcd } from '../helpers/etcd.js';
import { FaultProxy } from '../helpers/fault-proxy.js';
import { until } from '../helpers/until.js';

let etcd: EtcdCluster | undefined;
let nextPrefix = 0;
const prefix = () => `/plexus-test/${process.pid}-${Date.now()}-${nextPrefix++}/`;
const endpoints = () => (etcd as EtcdCluster).clientUrls;

const options = (clock: { now: number }, p: string): EtcdAuthorityOptions => ({
  etcd: { endpoints: endpoints() },
  prefix: p,
  meta: LEASE_AUTHORITY_SUITE.meta,
  members: LEASE_AUTHORITY_SUITE.members,
  lease: LEASE_AUTHORITY_SUITE.lease,
  detector: LEASE_AUTHORITY_SUITE.detector,
  clock: { now: () => clock.now },
  // The suite's clock runs ahead of or behind real time; the clean-up backstop must not fire within a test.
  gcTtlSeconds: 120,
});

const ok = (r: AuthorityReply) => {
  if (!r.ok) throw new Error(`refused: ${r.code} ${r.message}`);
  return r;
};

describe.skipIf(!etcdAvailable)('EtcdAuthority on a real etcd cluster (skipped: no etcd binary on PATH)', () => {
  beforeAll(async () => {
    etcd = await startEtcd();
  }, 60_000);
  afterAll(async () => {
    await etcd?.stop();
  });

  interface Harness extends LeaseAuthorityHarness {
    readonly prefix: string;
  }

  leaseAuthoritySuite('EtcdAuthority', {
    setup: async (): Promise<Harness> => {
      const clock = { now: 0 };
      const p = prefix();
      const h: Harness = {
        prefix: p,
        clock,
        authority: await EtcdAuthority.open(options(clock, p)),
        restart: async () => {
          h.authority.close();
          h.authority = await EtcdAuthority.open(options(clock, p));
        },
      };
      return h;
    },
    teardown: async (h) => h.authority.close(),
  });

  it('refuses to open on a prefix that holds another cluster meta, naming the field', async () => {
    const clock = { now: 0 };
    const p = prefix();
    const a = await EtcdAuthority.open(options(clock, p));
    a.close();
    // The same meta opens again.
    (await EtcdAuthority.open(options(clock, p))).close();
    const other = { ...options(clock, p), meta: { ...LEASE_AUTHORITY_SUITE.meta, shardCount: 16 } };
    const e = await EtcdAuthority.open(other).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(PlexusError);
    expect((e as PlexusError).code).toBe('PLX_CLUSTER_META_MISMATCH');
    expect((e as PlexusError).details.field).toBe('shardCount');
    // A join with another hash version is refused the same way.
    const b = await EtcdAuthority.open(options(clock, p));
    try {
      const r = await b.call({
        type: 'join',
        node: 'a',
        address: '',
        meta: { ...LEASE_AUTHORITY_SUITE.meta, hashVersion: 2 },
      });
      expect(r.ok).toBe(false);
      if (!r.ok) {
        expect(r.code).toBe('PLX_CLUSTER_META_MISMATCH');
        expect(r.details.field).toBe('hashVersion');
      }
    } finally {
      b.close();
    }
  });

  it('refuses to act on a lease key of a bad shape (PLX_CLUSTER_AUTHORITY_STATE)', async () => {
    const clock = { now: 0 };
    const p = prefix();
    const a = await EtcdAuthority.open(options(clock, p));
    try {
      const gw = new EtcdGateway({ endpoints: endpoints() });
      await gw.txn([], [{ put: `${p}leases/2`, value: 'not json' }]);
      const e = await a.call({ type: 'view' }).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect((e as PlexusError).code).toBe('PLX_CLUSTER_AUTHORITY_STATE');
      expect((e as PlexusError).message).toContain(`${p}leases/2`);
    } finally {
      a.close();
    }
  });

  it('sees members another authority admits and removes through its watch', async () => {
    const clock = { now: 1000 };
    const p = prefix();
    const a = await EtcdAuthority.open(options(clock, p));
    const b = await EtcdAuthority.open(options(clock, p));
    try {
      expect(a.isMember('c')).toBe(false);
      ok(await b.call({ type: 'join', node: 'c', address: 'c:1', meta: LEASE_AUTHORITY_SUITE.meta }));
      await until(() => a.isMember('c'), 'a to see c join through its watch');
      ok(await b.call({ type: 'remove', node: 'c' }));
      await until(() => !a.isMember('c') && !a.isAdmitted('c'), 'a to see c removed through its watch');
      expect(a.isAdmitted('b')).toBe(true);
    } finally {
      a.close();
      b.close();
    }
  });

  it('gives racing authorities on the same etcd distinct, increasing epochs for one shard', async () => {
    const clock = { now: 1000 };
    const p = prefix();
    const auths = await Promise.all([0, 1, 2].map(() => EtcdAuthority.open(options(clock, p))));
    try {
      for (const [i, a] of auths.entries()) {
        ok(
          await a.call({
            type: 'join',
            node: ['a', 'b', 'c'][i] as string,
            address: '',
            meta: LEASE_AUTHORITY_SUITE.meta,
          }),
        );
      }
      const granted: bigint[] = [];
      for (let round = 0; round < 6; round++) {
        // All three ask at once for shard 7; etcd's compare-and-set lets exactly one win.
        const replies = await Promise.all(
          auths.map((a, i) => a.call({ type: 'grant', node: ['a', 'b', 'c'][i] as string, shard: 7 })),
        );
        const won = replies.filter((r) => r.ok);
        expect(won.length).toBe(1);
        for (const r of replies) if (!r.ok) expect(r.code).toBe('PLX_CLUSTER_LEASE_HELD');
        const w = won[0] as AuthorityReply & { ok: true };
        const epoch = w.lease?.epoch as bigint;
        if (granted.length > 0) expect(epoch).toBeGreaterThan(granted[granted.length - 1] as bigint);
        granted.push(epoch);
        const i = replies.indexOf(w);
        ok(
          await (auths[i] as EtcdAuthority).call({
            type: 'release',
            node: ['a', 'b', 'c'][i] as string,
            shard: 7,
            epoch,
          }),
        );
      }
      expect(new Set(granted).size).toBe(granted.length);
    } finally {
      for (const a of auths) a.close();
    }
  });

  it('answers every concurrent request of racing authorities once, and one version names one view across them', async () => {
    const clock = { now: 1000 };
    const p = prefix();
    const nodes = ['a', 'b', 'c'];
    const auths = await Promise.all(nodes.map(() => EtcdAuthority.open(options(clock, p))));
    const views: View[] = [];
    try {
      for (const [i, a] of auths.entries()) {
        ok(await a.call({ type: 'join', node: nodes[i] as string, address: '', meta: LEASE_AUTHORITY_SUITE.meta }));
      }
      // Each authority grants and releases its own shards while the others do the same: the
      // writes never conflict on a shard, but every one of them races for the view key.
      await Promise.all(
        auths.map(async (a, i) => {
          const node = nodes[i] as string;
          for (let round = 0; round < 4; round++) {
            for (const shard of [i, i + 3]) {
              const g = ok(await a.call({ type: 'grant', node, shard }));
              views.push(g.view);
              // A release applied once is answered ok, even when its view lost a race first.
              const r = ok(await a.call({ type: 'release', node, shard, epoch: g.lease?.epoch as bigint }));
              views.push(r.view);
              expect(g.lease?.epoch).toBe(BigInt(round + 1));
            }
          }
        }),
      );
      const byVersion = new Map<number, string>();
      for (const v of views) {
        const text = JSON.stringify(v.leases, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x));
        const seen = byVersion.get(v.version);
        if (seen !== undefined) expect(text).toBe(seen);
        byVersion.set(v.version, text);
      }
      expect(byVersion.size).toBeGreaterThan(10);
    } finally {
      for (const a of auths) a.close();
    }
  });

  it('lets another node take a shard from a node cut off from etcd only after the cut-off holder stopped using it', async () => {
    const cluster = etcd as EtcdCluster;
    const p = prefix();
    const lease = { ttlMs: 3000, safetyMarginMs: 600, renewEveryMs: 300 };
    const detector = { suspectAfterMs: 5000, failedAfterMs: 10_000 };
    // Node a reaches etcd only through fault proxies, one per etcd member.
    const proxies = await Promise.all(
      cluster.clientUrls.map((u) => FaultProxy.start({ host: '127.0.0.1', port: Number(new URL(u).port) })),
    );
    const base = {
      prefix: p,
      meta: LEASE_AUTHORITY_SUITE.meta,
      members: LEASE_AUTHORITY_SUITE.members,
      lease,
      detector,
    };
    const a = await EtcdAuthority.open({
      ...base,
      etcd: {
        endpoints: proxies.map((x) => `http://127.0.0.1:${x.port}`),
        timeoutMs: 500,
        retry: new RetryPolicy({ baseMs: 10, capMs: 50, maxAttempts: 3 }),
      },
    });
    // Node b's authority reads the monotonic clock; its last reading is when it decided.
    let bDecidedAt = 0;
    const b = await EtcdAuthority.open({
      ...base,
      etcd: { endpoints: endpoints() },
      clock: {
        now: () => {
          bDecidedAt = performance.now();
          return bDecidedAt;
        },
      },
    });
    try {
      ok(await a.call({ type: 'join', node: 'a', address: '', meta: LEASE_AUTHORITY_SUITE.meta }));
      ok(await b.call({ type: 'join', node: 'b', address: '', meta: LEASE_AUTHORITY_SUITE.meta }));
      const ea = ok(await a.call({ type: 'grant', node: 'a', shard: 2 })).lease?.epoch as bigint;
      // a renews a few times; the holder's lease runs ttl - margin from when it sent its last renewal.
      let lastSent = 0;
      for (let i = 0; i < 3; i++) {
        const sent = performance.now();
        ok(await a.call({ type: 'renew', node: 'a', shard: 2, epoch: ea }));
        lastSent = sent;
        expect((await b.call({ type: 'grant', node: 'b', shard: 2 })).ok).toBe(false);
        await new Promise((r) => setTimeout(r, lease.renewEveryMs));
      }
      for (const x of proxies) x.partition();
      const cut = await a.call({ type: 'renew', node: 'a', shard: 2, epoch: ea }).then(
        () => 'answered',
        (e: unknown) => (e as PlexusError).code,
      );
      expect(cut).toBe('PLX_CLUSTER_UNAVAILABLE');
      const holderStops = lastSent + lease.ttlMs - lease.safetyMarginMs;
      let refusals = 0;
      const eb = await until(
        async () => {
          const r = await b.call({ type: 'grant', node: 'b', shard: 2 });
          if (r.ok) return r.lease?.epoch as bigint;
          expect(r.code).toBe('PLX_CLUSTER_LEASE_HELD');
          refusals++;
          return undefined;
        },
        { what: 'b to be granted shard 2', timeoutMs: 20_000, intervalMs: 100 },
      );
      expect(refusals).toBeGreaterThan(0);
      expect(eb).toBeGreaterThan(ea);
      // b got the shard only once a, by its own clock, had stopped using it.
      expect(bDecidedAt).toBeGreaterThanOrEqual(holderStops);
      // Healed, a learns it lost the lease.
      for (const x of proxies) x.heal();
      const back = await a.call({ type: 'renew', node: 'a', shard: 2, epoch: ea });
      expect(back.ok).toBe(false);
      if (!back.ok) expect(back.code).toBe('PLX_CLUSTER_LEASE_LOST');
    } finally {
      a.close();
      b.close();
      for (const x of proxies) await x.close();
    }
  });

  it('keeps renewing through a SIGKILL of the etcd leader, with epochs unique across the failover', async () => {
    const cluster = etcd as EtcdCluster;
    const p = prefix();
    // Real time: a lease long enough to ride out an etcd election on a loaded machine.
    const ttlMs = 8000;
    const a = await EtcdAuthority.open({
      etcd: { endpoints: endpoints(), timeoutMs: 1500 },
      prefix: p,
      meta: LEASE_AUTHORITY_SUITE.meta,
      members: LEASE_AUTHORITY_SUITE.members,
      lease: { ttlMs, safetyMarginMs: 1000, renewEveryMs: 500 },
      detector: { suspectAfterMs: 5000, failedAfterMs: 10_000 },
    });
    const killed: { name?: string } = {};
    try {
      ok(await a.call({ type: 'join', node: 'a', address: '', meta: LEASE_AUTHORITY_SUITE.meta }));
      const epochs = new Map<number, bigint>();
      for (const s of [0, 1, 2, 3])
        epochs.set(s, ok(await a.call({ type: 'grant', node: 'a', shard: s })).lease?.epoch as bigint);
      const leader = await cluster.leader();
      const leaderPid = leader.pid;
      let renewals = 0;
      let lastRenewed = performance.now();
      let maxGap = 0;
      const startedAt = performance.now();
      while (performance.now() - startedAt < 6000) {
        if (killed.name === undefined && renewals >= 4) {
          killed.name = leader.name;
          await cluster.kill(leader);
          expect(leader.pid).toBeUndefined();
        }
        const held = [...epochs].map(([shard, epoch]) => ({ shard, epoch }));
        const hb = ok(await a.call({ type: 'heartbeat', node: 'a', held }));
        expect(hb.renewed).toEqual([0, 1, 2, 3]);
        const t = performance.now();
        maxGap = Math.max(maxGap, t - lastRenewed);
        lastRenewed = t;
        renewals++;
        await new Promise((r) => setTimeout(r, 300));
      }
      expect(killed.name).toBeDefined();
      expect(leaderPid).toBeGreaterThan(0);
      // Every renewal landed within the lease: the failover never let a lease lapse.
      expect(maxGap).toBeLessThan(ttlMs);
      expect(renewals).toBeGreaterThan(6);
      const newLeader = await cluster.leader();
      expect(newLeader.name).not.toBe(killed.name);
      // A release and a new grant after the failover: strictly above the epoch before it.
      for (const [s, e] of epochs) {
        ok(await a.call({ type: 'release', node: 'a', shard: s, epoch: e }));
        const again = ok(await a.call({ type: 'grant', node: 'a', shard: s })).lease?.epoch as bigint;
        expect(again).toBe(e + 1n);
      }
    } finally {
      a.close();
      const m = cluster.members.find((x) => x.name === killed.name);
      if (m !== undefined && m.pid === undefined) await cluster.restart(m);
    }
  });

  it('ends a lease on the authority clock, not on the etcd lease TTL that a leader change resets to full', async () => {
    const cluster = etcd as EtcdCluster;
    const clock = { now: 1000 };
    const p = prefix();
    const a = await EtcdAuthority.open({ ...options(clock, p), gcTtlSeconds: 30 });
    let killed: string | undefined;
    try {
      ok(await a.call({ type: 'join', node: 'a', address: '', meta: LEASE_AUTHORITY_SUITE.meta }));
      ok(await a.call({ type: 'join', node: 'b', address: '', meta: LEASE_AUTHORITY_SUITE.meta }));
      const ea = ok(await a.call({ type: 'grant', node: 'a', shard: 1 })).lease?.epoch as bigint;
      const gw = new EtcdGateway({ endpoints: endpoints() });
      const kv = (await gw.range(`${p}leases/1`)).kvs[0];
      expect(kv?.lease).toBeGreaterThan(0n);
      const ttl = async () => {
        for (const url of endpoints()) {
          try {
            const r = await etcdHttp(url, '/v3/lease/timetolive', { ID: String(kv?.lease) });
            return Number((r.json as { TTL: string }).TTL);
          } catch {
            // a killed member: ask the next
          }
        }
        throw new Error('no etcd member answered timetolive');
      };
      // Let the etcd lease run down a little, then change the etcd leader.
      await until(async () => (await ttl()) <= 27, {
        what: 'the etcd lease TTL to run down',
        timeoutMs: 20_000,
        intervalMs: 200,
      });
      const leader = await cluster.leader();
      killed = leader.name;
      await cluster.kill(leader);
      await cluster.leader();
      // The new leader gives the etcd lease its full TTL again.
      await until(async () => (await ttl()) >= 28, {
        what: 'etcd to reset the lease TTL on its leader change',
        timeoutMs: 20_000,
        intervalMs: 100,
      });
      // The plexus lease still ends one lease length after its grant, on the authority's clock.
      clock.now = 1000 + LEASE_AUTHORITY_SUITE.lease.ttlMs - 1;
      const held = await a.call({ type: 'grant', node: 'b', shard: 1 });
      expect(held.ok).toBe(false);
      if (!held.ok) expect(held.code).toBe('PLX_CLUSTER_LEASE_HELD');
      clock.now = 1000 + LEASE_AUTHORITY_SUITE.lease.ttlMs;
      const eb = ok(await a.call({ type: 'grant', node: 'b', shard: 1 })).lease?.epoch as bigint;
      expect(eb).toBeGreaterThan(ea);
    } finally {
      a.close();
      const m = cluster.members.find((x) => x.name === killed);
      if (m !== undefined && m.pid === undefined) await cluster.restart(m);
    }
  });
});
