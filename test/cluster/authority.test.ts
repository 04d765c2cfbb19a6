import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MemoryAuthority, rankedOwner } from '../../ts/cluster/authority.js';
import {
  DEFAULT_CLUSTER_CONFIG,
  DEFAULT_DETECTOR_CONFIG,
  DEFAULT_LEASE_CONFIG,
  leaseConfig,
} from '../../ts/cluster/config.js';
import { FailureDetector } from '../../ts/cluster/detector.js';
import { canStart, unexpired } from '../../ts/cluster/static.js';
import { isNewer } from '../../ts/cluster/types.js';
import { META } from './helpers.js';

const members = ['a', 'b', 'c'].map((id) => ({ id, address: `${id}:1` }));

function joined(opts: { autoAssign?: boolean; epochBase?: bigint } = {}) {
  const auth = new MemoryAuthority({ meta: META, members, ...opts });
  auth.tick(0);
  for (const m of members)
    expect(auth.step({ type: 'join', node: m.id, address: m.address, meta: META }).ok).toBe(true);
  return auth;
}

describe('the seed’s defaults', () => {
  it('ClusterConfig, LeaseConfig and DetectorConfig', () => {
    expect(DEFAULT_CLUSTER_CONFIG).toMatchObject({
      hopLimit: 4,
      mailboxBound: 1024,
      dedupCapacity: 65_536,
      deliveryDeadlineMs: 30_000,
      retryBackoffMs: 50,
      maxFrameBytes: 1_048_576,
    });
    // "By default a lease lasts 10 s, and the owner stops starting macrosteps 2 s before it ends"
    expect(DEFAULT_LEASE_CONFIG).toMatchObject({ ttlMs: 10_000, safetyMarginMs: 2_000 });
    expect(leaseConfig()).toMatchObject({ ttlMs: 10_000, safetyMarginMs: 2_000 });
    // "marks a silent member suspect after 3 s and failed after 10 s by default"
    expect(DEFAULT_DETECTOR_CONFIG).toEqual({ suspectAfterMs: 3_000, failedAfterMs: 10_000 });
  });

  it('the owner stops starting macrosteps 2 s before expiry by its own clock', () => {
    const l = { shard: 0, epoch: 1n, ttlMs: 10_000, from: 1_000 };
    expect(canStart(l, 8_999, 2_000)).toBe(true);
    expect(canStart(l, 9_000, 2_000)).toBe(false);
    expect(unexpired(l, 10_999)).toBe(true);
    expect(unexpired(l, 11_000)).toBe(false);
  });
});

describe('FailureDetector', () => {
  it('suspect after 3 s of silence, failed after 10 s, alive again when heard', () => {
    const d = new FailureDetector();
    d.heard('a', 0);
    d.tick(2_999);
    expect(d.status('a')).toBe('alive');
    d.tick(3_000);
    expect(d.status('a')).toBe('suspect');
    d.tick(9_999);
    expect(d.status('a')).toBe('suspect');
    d.tick(10_000);
    expect(d.status('a')).toBe('failed');
    expect(d.ready().map((c) => c.to)).toEqual(['suspect', 'failed']);
    d.advance();
    d.heard('a', 12_000);
    expect(d.ready()).toEqual([{ node: 'a', from: 'failed', to: 'alive', at: 12_000 }]);
  });
});

describe('MemoryAuthority (pure, on simulated time)', () => {
  it('assigns shards deterministically by rendezvous rank among alive members', () => {
    const x = joined();
    const y = joined();
    expect(x.view().leases).toEqual(y.view().leases);
    expect(x.view().leases).toHaveLength(8);
    expect(rankedOwner(['a', 'b', 'c'], 5)).toBe(rankedOwner(['c', 'b', 'a'], 5));
    const owners = Array.from({ length: 64 }, (_, s) => rankedOwner(['a', 'b', 'c'], s));
    for (const m of ['a', 'b', 'c']) expect(owners.filter((o) => o === m).length).toBeGreaterThan(8);
  });

  it('refuses a join with another ClusterMeta naming the field, and unknown or removed nodes', () => {
    const auth = new MemoryAuthority({ meta: META, members });
    for (const [field, value] of [
      ['id', 'other'],
      ['shardCount', 16],
      ['hashVersion', 2],
      ['replicationFactor', 2],
    ] as const) {
      const r = auth.step({ type: 'join', node: 'a', address: '', meta: { ...META, [field]: value } });
      expect(r).toMatchObject({ ok: false, code: 'PLX_CLUSTER_META_MISMATCH', details: { field } });
      expect(r.ok === false && r.message).toContain(field);
    }
    expect(auth.step({ type: 'join', node: 'x', address: '', meta: META })).toMatchObject({
      ok: false,
      code: 'PLX_CLUSTER_UNKNOWN_NODE',
      details: { field: 'node' },
    });
    auth.step({ type: 'join', node: 'b', address: '', meta: META });
    expect(auth.isMember('b')).toBe(true);
    auth.step({ type: 'remove', node: 'b' });
    expect(auth.isMember('b')).toBe(false);
    expect(auth.step({ type: 'join', node: 'b', address: '', meta: META })).toMatchObject({ ok: false });
  });

  it('gives every new grant a greater epoch and keeps it on renewal', () => {
    const auth = joined({ autoAssign: false, epochBase: 1000n });
    const g1 = auth.step({ type: 'grant', node: 'a', shard: 3 });
    expect(g1).toMatchObject({ ok: true, lease: { shard: 3, epoch: 1001n, ttlMs: 10_000 } });
    auth.tick(5_000);
    expect(auth.step({ type: 'renew', node: 'a', shard: 3, epoch: 1001n })).toMatchObject({ lease: { epoch: 1001n } });
    expect(auth.step({ type: 'grant', node: 'b', shard: 3 })).toMatchObject({
      ok: false,
      code: 'PLX_CLUSTER_LEASE_HELD',
    });
    auth.step({ type: 'release', node: 'a', shard: 3, epoch: 1001n });
    expect(auth.step({ type: 'grant', node: 'b', shard: 3 })).toMatchObject({ lease: { epoch: 1002n } });
    auth.step({ type: 'revoke', shard: 3 });
    expect(auth.step({ type: 'grant', node: 'c', shard: 3 })).toMatchObject({ lease: { epoch: 1003n } });
    expect(auth.step({ type: 'renew', node: 'b', shard: 3, epoch: 1002n })).toMatchObject({
      ok: false,
      code: 'PLX_CLUSTER_LEASE_LOST',
    });
    expect(auth.step({ type: 'grant', node: 'c', shard: 8 })).toMatchObject({
      ok: false,
      code: 'PLX_CLUSTER_BAD_SHARD',
    });
  });

  it('frees a failed member’s leases only when they expire, then regrants with a greater epoch', () => {
    const auth = joined({ autoAssign: false });
    auth.step({ type: 'grant', node: 'b', shard: 1 });
    auth.tick(4_000);
    for (const n of ['a', 'c']) auth.step({ type: 'heartbeat', node: n });
    // b renewed at 4 s and then fell silent.
    auth.step({ type: 'heartbeat', node: 'b', held: [{ shard: 1, epoch: 1n }] });
    for (let t = 4_000; t <= 16_000; t += 500) {
      auth.tick(t);
      for (const n of ['a', 'c']) auth.step({ type: 'heartbeat', node: n });
      const owner = auth.view().leases.find((l) => l.shard === 1);
      if (t < 14_000) expect(owner).toEqual({ shard: 1, owner: 'b', epoch: 1n });
      else expect(owner).toBeUndefined();
      if (t >= 14_000) expect(auth.view().members.find((m) => m.id === 'b')?.status).toBe('failed');
    }
    expect(auth.step({ type: 'grant', node: 'a', shard: 1 })).toMatchObject({ lease: { epoch: 2n } });
    // b wakes up: its renewal is refused.
    expect(auth.step({ type: 'renew', node: 'b', shard: 1, epoch: 1n })).toMatchObject({
      code: 'PLX_CLUSTER_LEASE_LOST',
    });
  });

  it('per-node journals, factor 1: a failed owner’s shard stays free until it returns, never taken empty', () => {
    const auth = new MemoryAuthority({ meta: META, members, journals: 'per-node' });
    auth.tick(0);
    auth.step({ type: 'join', node: 'b', address: '', meta: META });
    for (const n of ['a', 'c']) auth.step({ type: 'join', node: n, address: '', meta: META });
    expect(auth.view().leases.every((l) => l.owner === 'b')).toBe(true);
    // b falls silent; a and c keep beating.
    for (let t = 500; t <= 30_000; t += 500) {
      auth.tick(t);
      for (const n of ['a', 'c']) auth.step({ type: 'heartbeat', node: n });
    }
    expect(auth.view().leases).toEqual([]);
    expect(auth.step({ type: 'grant', node: 'a', shard: 2 })).toMatchObject({
      ok: false,
      code: 'PLX_CLUSTER_LEASE_HELD',
      details: { home: 'b' },
    });
    // b returns and gets its shards back at greater epochs.
    auth.step({ type: 'heartbeat', node: 'b' });
    expect(auth.view().leases.map((l) => [l.owner, l.epoch])).toEqual(Array.from({ length: 8 }, () => ['b', 2n]));
    // A hand-over (release after shipping) lets the shard go to any member.
    auth.step({ type: 'release', node: 'b', shard: 2, epoch: 2n });
    auth.step({ type: 'drain', node: 'b' });
    auth.tick(30_500);
    expect(auth.view().leases.find((l) => l.shard === 2)?.owner).not.toBe('b');
  });

  it('shared journals: the failed owner’s shards go to live members after expiry', () => {
    const auth = new MemoryAuthority({ meta: META, members, journals: 'shared' });
    auth.tick(0);
    auth.step({ type: 'join', node: 'b', address: '', meta: META });
    auth.step({ type: 'join', node: 'a', address: '', meta: META });
    for (let t = 500; t <= 12_000; t += 500) {
      auth.tick(t);
      auth.step({ type: 'heartbeat', node: 'a' });
    }
    expect(auth.view().leases.map((l) => [l.owner, l.epoch])).toEqual(Array.from({ length: 8 }, () => ['a', 2n]));
  });

  it('views have strictly increasing versions and holders ignore older or equal ones', () => {
    const auth = joined();
    const v1 = auth.view();
    auth.step({ type: 'revoke', shard: 0 });
    const v2 = auth.view();
    expect(v2.version).toBeGreaterThan(v1.version);
    expect(isNewer(v2, v1)).toBe(false);
    expect(isNewer(v2, v2)).toBe(false);
    expect(isNewer(v1, v2)).toBe(true);
    expect(auth.ready().view?.version).toBe(v2.version);
    auth.advance();
    expect(auth.ready().view).toBeUndefined();
  });

  it('property: under random requests and time, one owner per shard and epochs only grow per grant', () => {
    const op = fc.oneof(
      fc.record({ k: fc.constant('tick'), dt: fc.integer({ min: 0, max: 4_000 }) }),
      fc.record({ k: fc.constant('grant'), n: fc.constantFrom('a', 'b', 'c'), s: fc.nat({ max: 7 }) }),
      fc.record({ k: fc.constant('beat'), n: fc.constantFrom('a', 'b', 'c') }),
      fc.record({ k: fc.constant('release'), n: fc.constantFrom('a', 'b', 'c'), s: fc.nat({ max: 7 }) }),
      fc.record({ k: fc.constant('revoke'), s: fc.nat({ max: 7 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 120 }), fc.boolean(), (ops, autoAssign) => {
        const auth = joined({ autoAssign });
        let now = 0;
        const last = new Map<number, { owner: string; epoch: bigint; granted: number }>();
        const expiry = new Map<number, number>();
        for (const o of ops) {
          if (o.k === 'tick') auth.tick((now += o.dt));
          else if (o.k === 'grant') auth.step({ type: 'grant', node: o.n, shard: o.s });
          else if (o.k === 'beat') {
            const held = auth.view().leases.filter((l) => l.owner === o.n);
            auth.step({ type: 'heartbeat', node: o.n, held });
          } else if (o.k === 'release') {
            const l = auth.view().leases.find((x) => x.shard === o.s && x.owner === o.n);
            if (l) auth.step({ type: 'release', node: o.n, shard: o.s, epoch: l.epoch });
          } else auth.step({ type: 'revoke', shard: o.s });
          const v = auth.view();
          expect(new Set(v.leases.map((l) => l.shard)).size).toBe(v.leases.length);
          for (const l of v.leases) {
            const prev = last.get(l.shard);
            if (prev && prev.epoch === l.epoch) expect(prev.owner).toBe(l.owner);
            if (prev) expect(l.epoch).toBeGreaterThanOrEqual(prev.epoch);
            if (prev && l.epoch > prev.epoch) {
              // A new grant never overlaps the previous lease unless it was released or revoked.
              const end = expiry.get(l.shard) ?? 0;
              if (ops.some((x) => x.k === 'release' || x.k === 'revoke') === false) {
                expect(now).toBeGreaterThanOrEqual(end);
              }
            }
            last.set(l.shard, { owner: l.owner, epoch: l.epoch, granted: now });
            expiry.set(l.shard, auth.expiresAt(l.shard) ?? 0);
          }
        }
      }),
      { numRuns: 150 },
    );
  });
});
