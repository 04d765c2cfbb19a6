/**
 * KubeAuthority through `@kubernetes/client-node` against the Lease-API stand-in
 * (test/helpers/kube-lease-server.ts, HTTPS with a bearer token) that keeps the Lease objects in
 * a real 3-member etcd (test/helpers/etcd.ts): the LeaseAuthority compliance suite (restarts: a
 * new authority object on the same objects), the Membership compliance suite with one
 * authority per member, racing authorities (distinct, increasing epochs; a 409 on a stale
 * write read again and decided again), expiry by observation whatever the wall clocks say,
 * the Lease fields as written (MicroTime, leaseTransitions, the epoch annotation), and the
 * MicroTime format itself.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  formatMicroTime,
  KubeAuthority,
  type KubeAuthorityOptions,
  parseMicroTime,
} from '../../ts/cluster/kube-authority.js';
import type { AuthorityReply } from '../../ts/cluster/lease-authority.js';
import type { ClusterMeta } from '../../ts/cluster/meta.js';
import { startClaiming } from '../../ts/cluster/node.js';
import { StaticMembership } from '../../ts/cluster/static.js';
import { PlexusError } from '../../ts/core/errors.js';
import { type FailureCostsFactory, failureCostsSuite } from '../compliance/failure-costs.suite.js';
import {
  LEASE_AUTHORITY_SUITE,
  type LeaseAuthorityHarness,
  leaseAuthoritySuite,
} from '../compliance/lease-authority.suite.js';
import { membershipSuite } from '../compliance/membership.suite.js';
import { type EtcdCluster, etcdAvailable, startEtcd } from '../helpers/etcd.js';
import { FaultProxy } from '../helpers/fault-proxy.js';
import { KubeLeaseServer } from '../helpers/kube-lease-server.js';
import { until } from '../helpers/until.js';

// biome-ignore lint/suspicious/noExplicitAny: Kubernetes JSON
type Json = Record<string, any>;

const NS = 'plexus-test';
let etcd: EtcdCluster | undefined;
let server: KubeLeaseServer | undefined;
let kubeconfig = '';
let dir = '';
let nextPrefix = 0;
const prefix = () => `t${process.pid}-${nextPrefix++}`;

const options = (
  clock: { now: number },
  p: string,
  extra: Partial<KubeAuthorityOptions> = {},
): KubeAuthorityOptions => ({
  namespace: NS,
  prefix: p,
  kubeconfig,
  meta: LEASE_AUTHORITY_SUITE.meta,
  members: LEASE_AUTHORITY_SUITE.members,
  lease: LEASE_AUTHORITY_SUITE.lease,
  detector: LEASE_AUTHORITY_SUITE.detector,
  clock: { now: () => clock.now },
  ...extra,
});

const ok = (r: AuthorityReply) => {
  if (!r.ok) throw new Error(`refused: ${r.code} ${r.message}`);
  return r;
};

/** The Lease object `name` as the stand-in holds it now (read over HTTPS with the client). */
async function leaseObject(name: string): Promise<Json> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  const api = kc.makeApiClient(k8s.CoordinationV1Api);
  return JSON.parse(JSON.stringify(await api.readNamespacedLease({ namespace: NS, name }))) as Json;
}

describe('MicroTime', () => {
  it('formats with exactly six fractional digits in UTC and parses RFC 3339 back to the microsecond', () => {
    const t = Date.UTC(2026, 0, 2, 3, 4, 5, 678) + 0.901;
    expect(formatMicroTime(t)).toBe('2026-01-02T03:04:05.678901Z');
    expect(formatMicroTime(Date.UTC(2026, 0, 2, 3, 4, 5))).toBe('2026-01-02T03:04:05.000000Z');
    expect(formatMicroTime(0)).toBe('1970-01-01T00:00:00.000000Z');
    // 999.9996 µs rounds up into the next second.
    expect(formatMicroTime(Date.UTC(2026, 0, 2, 3, 4, 5) + 999.9996)).toBe('2026-01-02T03:04:06.000000Z');
    expect(parseMicroTime('2026-01-02T03:04:05.678901Z')).toBeCloseTo(t, 6);
    expect(parseMicroTime('2026-01-02T03:04:05Z')).toBe(Date.UTC(2026, 0, 2, 3, 4, 5));
    expect(parseMicroTime('2026-01-02T03:04:05.678Z')).toBe(Date.UTC(2026, 0, 2, 3, 4, 5, 678));
    // Nanoseconds are cut to microseconds; an offset is honoured.
    expect(parseMicroTime('2026-01-02T05:04:05.678901999+02:00')).toBeCloseTo(t, 6);
    for (const bad of ['2026-01-02 03:04:05Z', '2026-01-02T03:04:05', '2026-13-02T03:04:05Z', 'x', '']) {
      expect(() => parseMicroTime(bad), bad).toThrow(RangeError);
    }
    expect(() => formatMicroTime(Number.NaN)).toThrow(RangeError);
    let seed = 7;
    for (let i = 0; i < 500; i++) {
      seed = (seed * 48271) % 2147483647;
      const us = Math.floor((seed / 2147483647) * 4e15); // up to ~2096
      const s = formatMicroTime(us / 1000);
      expect(s).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
      expect(Math.round(parseMicroTime(s) * 1000)).toBe(us);
    }
  });
});

describe.skipIf(!etcdAvailable)(
  'KubeAuthority on the Lease-API stand-in over a real etcd (skipped: no etcd binary on PATH)',
  () => {
    beforeAll(async () => {
      etcd = await startEtcd();
      server = await KubeLeaseServer.start({ etcdEndpoints: etcd.clientUrls });
      dir = await mkdtemp(join(tmpdir(), 'plexus-kube-auth-'));
      kubeconfig = await server.writeKubeconfig(join(dir, 'kubeconfig'));
    }, 60_000);
    afterAll(async () => {
      await server?.close();
      await etcd?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    leaseAuthoritySuite('KubeAuthority', {
      setup: async (): Promise<LeaseAuthorityHarness> => {
        const clock = { now: 0 };
        const p = prefix();
        const h: LeaseAuthorityHarness = {
          clock,
          authority: await KubeAuthority.open(options(clock, p)),
          restart: async () => {
            h.authority.close();
            h.authority = await KubeAuthority.open(options(clock, p));
          },
        };
        return h;
      },
      teardown: async (h) => h.authority.close(),
    });

    const kubeMembership: FailureCostsFactory = async (nodes, opts = {}) => {
      const p = prefix();
      const meta: ClusterMeta = LEASE_AUTHORITY_SUITE.meta;
      const infos = nodes.map((id) => ({ id, address: '' }));
      const lease = { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 };
      const opened: Promise<KubeAuthority>[] = [];
      const stops: (() => void)[] = [];
      const all: StaticMembership[] = [];
      const make = (node: string, m: ClusterMeta = meta) => {
        // Each member opens its own authority on the cluster's Lease objects, as a node process does.
        const auth = KubeAuthority.open({
          namespace: NS,
          prefix: p,
          kubeconfig,
          meta,
          members: infos,
          lease,
          detector: { suspectAfterMs: 300, failedAfterMs: 1000 },
        });
        auth.catch(() => undefined);
        opened.push(auth);
        const rate = opts.leaseClockRate?.(node) ?? 1;
        const s = new StaticMembership({
          config: { meta: m, self: { id: node, address: `${node}:0` }, members: infos, authority: 'kubernetes' },
          call: async (req) => (await auth).call(req),
          lease,
          heartbeatEveryMs: 100,
          ...(rate === 1 ? {} : { clock: { now: () => performance.now() * rate } }),
        });
        all.push(s);
        if (nodes.includes(node)) stops.push(startClaiming(s, meta.shardCount, nodes, { graceMs: 1000 }));
        return s;
      };
      const members = new Map(nodes.map((n) => [n, make(n)]));
      return {
        members,
        make,
        meta,
        teardown: async () => {
          for (const stop of stops) stop();
          for (const m of all) await m.close();
          for (const a of opened) (await a.catch(() => undefined))?.close();
        },
      };
    };
    membershipSuite('StaticMembership + KubeAuthority', (nodes) => kubeMembership(nodes));
    failureCostsSuite('StaticMembership + KubeAuthority', kubeMembership);

    it('refuses to open on a prefix that holds another cluster meta, naming the field', async () => {
      const clock = { now: 0 };
      const p = prefix();
      (await KubeAuthority.open(options(clock, p))).close();
      (await KubeAuthority.open(options(clock, p))).close();
      const e = await KubeAuthority.open({
        ...options(clock, p),
        meta: { ...LEASE_AUTHORITY_SUITE.meta, shardCount: 16 },
      }).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(e).toBeInstanceOf(PlexusError);
      expect((e as PlexusError).code).toBe('PLX_CLUSTER_META_MISMATCH');
      expect((e as PlexusError).details.field).toBe('shardCount');
    });

    it('writes the Lease fields: holder, duration, 6-digit MicroTimes, transitions and the epoch annotation', async () => {
      const clock = { now: 1000 };
      const p = prefix();
      const a = await KubeAuthority.open(options(clock, p));
      try {
        for (const n of ['a', 'b'])
          ok(await a.call({ type: 'join', node: n, address: `${n}:1`, meta: LEASE_AUTHORITY_SUITE.meta }));
        const e1 = ok(await a.call({ type: 'grant', node: 'a', shard: 5 })).lease?.epoch as bigint;
        const o1 = await leaseObject(`${p}-shard-5`);
        expect(o1.spec.holderIdentity).toBe('a');
        expect(o1.spec.leaseDurationSeconds).toBe(1);
        expect(o1.spec.acquireTime).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
        expect(o1.spec.renewTime).toBe(o1.spec.acquireTime);
        expect(Math.abs(parseMicroTime(o1.spec.renewTime) - Date.now())).toBeLessThan(60_000);
        expect(o1.spec.leaseTransitions).toBe(0);
        expect(o1.metadata.annotations['plexus.dev/epoch']).toBe(String(e1));
        // A renewal keeps the epoch and the transitions, moves renewTime.
        ok(await a.call({ type: 'renew', node: 'a', shard: 5, epoch: e1 }));
        const o2 = await leaseObject(`${p}-shard-5`);
        expect(o2.metadata.annotations['plexus.dev/epoch']).toBe(String(e1));
        expect(o2.spec.acquireTime).toBe(o1.spec.acquireTime);
        expect(parseMicroTime(o2.spec.renewTime)).toBeGreaterThanOrEqual(parseMicroTime(o1.spec.renewTime));
        expect(BigInt(o2.metadata.resourceVersion)).toBeGreaterThan(BigInt(o1.metadata.resourceVersion));
        // Released: no holder, the epoch kept on the object, which is never deleted.
        ok(await a.call({ type: 'release', node: 'a', shard: 5, epoch: e1 }));
        const o3 = await leaseObject(`${p}-shard-5`);
        expect(o3.spec.holderIdentity).toBeUndefined();
        expect(o3.metadata.annotations['plexus.dev/epoch']).toBe(String(e1));
        // Granted to another holder: the epoch raised by one, one transition more.
        const e2 = ok(await a.call({ type: 'grant', node: 'b', shard: 5 })).lease?.epoch as bigint;
        expect(e2).toBe(e1 + 1n);
        const o4 = await leaseObject(`${p}-shard-5`);
        expect(o4.spec.holderIdentity).toBe('b');
        expect(o4.spec.leaseTransitions).toBe(1);
        expect(o4.metadata.annotations['plexus.dev/epoch']).toBe(String(e2));
        // Members are Leases too, and the view is on the cluster Lease.
        const m = await leaseObject(`${p}-member-a`);
        expect(m.spec.holderIdentity).toBe('a');
        expect(m.metadata.annotations).toMatchObject({ 'plexus.dev/address': 'a:1', 'plexus.dev/state': 'member' });
        const c = await leaseObject(`${p}-cluster`);
        expect(JSON.parse(c.metadata.annotations['plexus.dev/meta'])).toEqual(LEASE_AUTHORITY_SUITE.meta);
        expect(Number(c.metadata.annotations['plexus.dev/view-version'])).toBeGreaterThan(0);
        expect(c.metadata.annotations['plexus.dev/view-digest']).toMatch(/^[0-9a-f]{64}$/);
        // Every time the authority sent is a 6-digit MicroTime.
        const times = (server as KubeLeaseServer).requests
          .filter((r) => r.body?.includes(`"${p}-`))
          .flatMap((r) => {
            const body = JSON.parse(r.body as string) as Json;
            // Every write names its kind, though listed objects come without it.
            expect([body.apiVersion, body.kind]).toEqual(['coordination.k8s.io/v1', 'Lease']);
            const spec = body.spec ?? {};
            return [spec.acquireTime, spec.renewTime].filter((x) => x !== undefined);
          });
        expect(times.length).toBeGreaterThan(5);
        for (const t of times) expect(t).toMatch(/\.\d{6}Z$/);
      } finally {
        a.close();
      }
    });

    it('gives racing authorities on one namespace distinct, increasing epochs, re-reading after a 409', async () => {
      const clock = { now: 1000 };
      const p = prefix();
      const s = server as KubeLeaseServer;
      const nodes = ['a', 'b'];
      const auths = await Promise.all(nodes.map(() => KubeAuthority.open(options(clock, p))));
      const shardConflicts = () =>
        s.requests.filter((r) => r.method === 'PUT' && r.status === 409 && r.path.endsWith(`/${p}-shard-7`)).length;
      try {
        for (const [i, a] of auths.entries()) {
          ok(await a.call({ type: 'join', node: nodes[i] as string, address: '', meta: LEASE_AUTHORITY_SUITE.meta }));
        }
        // The first grant creates the object; every later one replaces it.
        const first = ok(await (auths[0] as KubeAuthority).call({ type: 'grant', node: 'a', shard: 7 }));
        ok(
          await (auths[0] as KubeAuthority).call({
            type: 'release',
            node: 'a',
            shard: 7,
            epoch: first.lease?.epoch as bigint,
          }),
        );
        const granted: bigint[] = [first.lease?.epoch as bigint];
        const before = shardConflicts();
        for (let round = 0; round < 8; round++) {
          // Both ask at once for shard 7: both read it free, both replace it with the
          // resourceVersion they read; the API server lets one through and answers the other 409.
          const replies = await Promise.all(
            auths.map((a, i) => a.call({ type: 'grant', node: nodes[i] as string, shard: 7 })),
          );
          const won = replies.filter((r) => r.ok);
          expect(won.length).toBe(1);
          // The loser read again and found the shard held.
          for (const r of replies) if (!r.ok) expect(r.code).toBe('PLX_CLUSTER_LEASE_HELD');
          const w = won[0] as AuthorityReply & { ok: true };
          const epoch = w.lease?.epoch as bigint;
          expect(epoch).toBe((granted.at(-1) as bigint) + 1n);
          granted.push(epoch);
          const i = replies.indexOf(w);
          ok(await (auths[i] as KubeAuthority).call({ type: 'release', node: nodes[i] as string, shard: 7, epoch }));
        }
        expect(new Set(granted).size).toBe(granted.length);
        // The races did reach the API server as stale replaces.
        expect(shardConflicts() - before).toBeGreaterThan(0);
        const o = await leaseObject(`${p}-shard-7`);
        expect(o.metadata.annotations['plexus.dev/epoch']).toBe(String(granted.at(-1)));
      } finally {
        for (const a of auths) a.close();
      }
    });

    it('frees another writer’s lease only once this node saw it unchanged for its duration, whatever renewTime says', async () => {
      const p = prefix();
      const ttl = LEASE_AUTHORITY_SUITE.lease.ttlMs;
      const ca = { now: 1000 };
      // b's wall clock runs a day ahead: by renewTime, a's lease looks long expired to b.
      const dayAhead = { now: () => Date.now() + 86_400_000 };
      const cb = { now: 50_000 };
      const a = await KubeAuthority.open(options(ca, p));
      const b = await KubeAuthority.open(options(cb, p, { wallClock: dayAhead }));
      try {
        for (const n of ['a', 'b'])
          ok(await a.call({ type: 'join', node: n, address: '', meta: LEASE_AUTHORITY_SUITE.meta }));
        const ea = ok(await a.call({ type: 'grant', node: 'a', shard: 3 })).lease?.epoch as bigint;
        const o = await leaseObject(`${p}-shard-3`);
        const age = dayAhead.now() - parseMicroTime(o.spec.renewTime);
        expect(age).toBeGreaterThan(o.spec.leaseDurationSeconds * 1000 * 1000);
        // b first sees a's lease now; it is held for one lease length on b's own clock.
        const r1 = await b.call({ type: 'grant', node: 'b', shard: 3 });
        expect(r1.ok).toBe(false);
        if (!r1.ok) {
          expect(r1.code).toBe('PLX_CLUSTER_LEASE_HELD');
          expect(r1.details.retryAfterMs).toBe(ttl);
        }
        cb.now += ttl / 2;
        // a renews (its own clock): a new resourceVersion, which b has not seen yet.
        ca.now += ttl / 2;
        ok(await a.call({ type: 'renew', node: 'a', shard: 3, epoch: ea }));
        cb.now += ttl / 2 - 1;
        // b now sees the renewed object for the first time: its observation starts again.
        expect((await b.call({ type: 'grant', node: 'b', shard: 3 })).ok).toBe(false);
        cb.now += ttl - 1;
        expect((await b.call({ type: 'grant', node: 'b', shard: 3 })).ok).toBe(false);
        cb.now += 1;
        const eb = ok(await b.call({ type: 'grant', node: 'b', shard: 3 })).lease?.epoch as bigint;
        expect(eb).toBe(ea + 1n);
        // a, told by its own clock that its lease ran out, cannot renew it any more.
        ca.now += ttl;
        const lost = await a.call({ type: 'renew', node: 'a', shard: 3, epoch: ea });
        expect(lost.ok).toBe(false);
        if (!lost.ok) expect(lost.code).toBe('PLX_CLUSTER_LEASE_LOST');
        const after = await leaseObject(`${p}-shard-3`);
        expect(after.spec.holderIdentity).toBe('b');
        expect(after.spec.leaseTransitions).toBe(1);
      } finally {
        a.close();
        b.close();
      }
    });

    it('lets another node take a shard from a node cut off from the API server only after the cut-off holder stopped using it', async () => {
      const p = prefix();
      const lease = { ttlMs: 3000, safetyMarginMs: 600, renewEveryMs: 300 };
      const base = {
        namespace: NS,
        prefix: p,
        meta: LEASE_AUTHORITY_SUITE.meta,
        members: LEASE_AUTHORITY_SUITE.members,
        lease,
        detector: { suspectAfterMs: 5000, failedAfterMs: 10_000 },
      };
      // Node a reaches the API server only through a fault proxy (TLS passes through it).
      const proxy = await FaultProxy.start({ host: '127.0.0.1', port: (server as KubeLeaseServer).port });
      const viaProxy = await (server as KubeLeaseServer).writeKubeconfig(
        join(dir, `proxy-${p}`),
        undefined,
        `https://127.0.0.1:${proxy.port}`,
      );
      const a = await KubeAuthority.open({ ...base, kubeconfig: viaProxy, timeoutMs: 500 });
      // Node b's authority reads the monotonic clock; its last reading is when it decided.
      let bDecidedAt = 0;
      const b = await KubeAuthority.open({
        ...base,
        kubeconfig,
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
        // The holder's lease runs ttl - margin from when it sent its last renewal.
        let lastSent = 0;
        for (let i = 0; i < 3; i++) {
          const sent = performance.now();
          ok(await a.call({ type: 'renew', node: 'a', shard: 2, epoch: ea }));
          lastSent = sent;
          expect((await b.call({ type: 'grant', node: 'b', shard: 2 })).ok).toBe(false);
          await new Promise((r) => setTimeout(r, lease.renewEveryMs));
        }
        proxy.partition();
        const cut = await a.call({ type: 'renew', node: 'a', shard: 2, epoch: ea }).then(
          () => 'answered',
          (e: unknown) => (e as PlexusError).code,
        );
        expect(cut).toBe('PLX_CLUSTER_UNAVAILABLE');
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
        expect(eb).toBe(ea + 1n);
        // b got the shard only once a, by its own clock, had stopped using it.
        expect(bDecidedAt).toBeGreaterThanOrEqual(lastSent + lease.ttlMs - lease.safetyMarginMs);
        // Healed, a learns it lost the lease.
        proxy.heal();
        const back = await a.call({ type: 'renew', node: 'a', shard: 2, epoch: ea });
        expect(back.ok).toBe(false);
        if (!back.ok) expect(back.code).toBe('PLX_CLUSTER_LEASE_LOST');
      } finally {
        a.close();
        b.close();
        await proxy.close();
      }
    });

    it('refuses to act on a shard Lease it cannot read (PLX_CLUSTER_AUTHORITY_STATE)', async () => {
      const clock = { now: 0 };
      const p = prefix();
      const a = await KubeAuthority.open(options(clock, p));
      try {
        const k8s = await import('@kubernetes/client-node');
        const kc = new k8s.KubeConfig();
        kc.loadFromFile(kubeconfig);
        const api = kc.makeApiClient(k8s.CoordinationV1Api);
        await api.createNamespacedLease({
          namespace: NS,
          body: { metadata: { name: `${p}-shard-2`, annotations: { 'plexus.dev/epoch': 'seven' } }, spec: {} },
        });
        const e = await a.call({ type: 'view' }).then(
          () => undefined,
          (err: unknown) => err as PlexusError,
        );
        expect(e?.code).toBe('PLX_CLUSTER_AUTHORITY_STATE');
        expect(e?.message).toContain(`${p}-shard-2`);
      } finally {
        a.close();
      }
    });
  },
);
