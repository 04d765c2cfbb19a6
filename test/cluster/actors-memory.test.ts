/**
 * Actors across nodes on MemoryWire: cross-node messages, forwarding with redirects, the hop
 * limit, holding while no owner, the delivery deadline, fencing of a paused owner on the
 * shared store, and seeded runs with lost and duplicated frames checked by the history checker.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { checkHistory } from '../../ts/cluster/history.js';
import { ownerOf } from '../../ts/cluster/types.js';
import { until } from '../helpers/until.js';
import { iriInShard, type MemoryActorCluster, memoryActorCluster, rng } from './actor-helpers.js';

let cluster: MemoryActorCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

async function allLeased(c: MemoryActorCluster): Promise<void> {
  await until(
    () => {
      for (const [id, m] of c.memberships) {
        const v = m.view();
        for (let s = 0; s < 8; s++) {
          const o = ownerOf(v, s);
          if (o === undefined) return false;
          if (o.owner === id && m.leaseFor(s) === undefined) return false;
        }
      }
      return true;
    },
    { what: 'every shard leased' },
  );
}

function ownerNode(c: MemoryActorCluster, shard: number): string {
  return ownerOf(c.memberships.get('a')!.view(), shard)!.owner;
}

function shardOf(c: MemoryActorCluster, iri: string): number {
  return c.nodes.get('a')!.placement.shardOf(iri);
}

describe('actors across nodes (MemoryWire)', () => {
  it('delivers messages between actors on different nodes exactly once, journaled by the owner', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'] });
    cluster = c;
    await allLeased(c);
    const a = c.nodes.get('a')!;
    const counters = Array.from({ length: 24 }, (_, i) => `vt:counter/k${i}`);
    const remote = counters.filter((k) => ownerNode(c, shardOf(c, k)) !== 'a');
    expect(remote.length).toBeGreaterThan(5);
    const ids: string[] = [];
    await Promise.all(
      counters.map((k, i) => {
        const id = `m-${i}`;
        ids.push(id);
        return a.node.send(k, 'inc', { id });
      }),
    );
    // actor to actor: a relay on each node asks a counter elsewhere to reply to it
    const relays = ['a', 'b', 'c'].map((n) => {
      for (let i = 0; ; i++) {
        const r = `vt:relay/r${i}`;
        if (ownerNode(c, shardOf(c, r)) === n) return r;
      }
    });
    for (const r of relays) {
      for (const k of remote.slice(0, 4)) {
        await a.node.send(r, 'relay', { data: { to: k, event: 'inc', data: { reply: true } } });
      }
    }
    await until(
      async () => {
        for (const r of relays) {
          const rep = await a.node.ask(r, 'report');
          if (((rep.data as { got: Record<string, number> }).got.counted ?? 0) < 4) return false;
        }
        return true;
      },
      { what: 'replies reached the relays' },
    );
    const report = checkHistory(await c.histories(), c.writers);
    expect(report.problems).toEqual([]);
    for (const [i, k] of counters.entries()) expect(report.consumed.get(k)?.has(ids[i]!)).toBe(true);
    // 1 direct inc each, plus one inc per relay on the first four remote counters
    for (const k of remote.slice(0, 4)) expect(report.consumed.get(k)?.size).toBe(1 + relays.length);
    const sent = [...c.nodes.values()].reduce((n, x) => n + x.processor.stats.delivered, 0);
    expect(sent).toBeGreaterThan(remote.length);
  });

  it('forwards a message sent to a former owner, and the redirect updates the sender table', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'] });
    cluster = c;
    await allLeased(c);
    const a = c.nodes.get('a')!;
    let shard = 0;
    while (ownerNode(c, shard) !== 'c') shard++;
    const target = iriInShard('vt:counter/f', shard, (i) => shardOf(c, i));
    const epoch = ownerOf(c.memberships.get('a')!.view(), shard)!.epoch;
    // a stale route on a: shard -> b (b is not the owner)
    expect(a.placement.redirect(shard, 'b', epoch)).toBe(true);
    expect(a.placement.decide(target)).toEqual({ kind: 'remote', node: 'b' });
    expect(await a.node.send(target, 'inc', { id: 'fwd-1' })).toBe('processed');
    expect(c.nodes.get('b')!.processor.stats.forwarded).toBe(1);
    await until(() => a.placement.decide(target).kind === 'remote' && ownerAt(a.placement.decide(target)) === 'c', {
      what: 'redirect',
    });
    expect(a.placement.redirectTable().get(shard)?.owner).toBe('c');
    expect(a.processor.stats.redirectsTaken).toBe(1);
    await a.node.send(target, 'inc', { id: 'fwd-2' });
    expect(c.nodes.get('b')!.processor.stats.forwarded).toBe(1);
    const report = checkHistory(await c.histories());
    expect(report.problems).toEqual([]);
    expect([...(report.consumed.get(target) ?? [])].sort()).toEqual(['fwd-1', 'fwd-2']);
  });

  it('refuses a message past the hop limit and the sending actor gets error.communication', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'], config: { hopLimit: 0 } });
    cluster = c;
    await allLeased(c);
    const a = c.nodes.get('a')!;
    let shard = 0;
    while (ownerNode(c, shard) !== 'c') shard++;
    const target = iriInShard('vt:counter/h', shard, (i) => shardOf(c, i));
    let relay = 'vt:relay/h0';
    for (let i = 0; ownerNode(c, shardOf(c, relay)) !== 'a'; i++) relay = `vt:relay/h${i}`;
    a.placement.redirect(shard, 'b', ownerOf(c.memberships.get('a')!.view(), shard)!.epoch);
    await a.node.send(relay, 'relay', { data: { to: target, event: 'inc', id: 'send-7' } });
    let errors: { code?: string; sendid?: string }[] = [];
    await until(
      async () => {
        const rep = await a.node.ask(relay, 'report');
        errors = (rep.data as { errors: typeof errors }).errors;
        return errors.length > 0;
      },
      { what: 'error.communication' },
    );
    expect(errors[0]).toMatchObject({ code: 'PLX_CLUSTER_HOP_LIMIT', sendid: 'send-7' });
    expect(c.nodes.get('b')!.processor.stats.hopRefusals).toBe(1);
    const dead = await c.nodes.get('b')!.deadLetters.list();
    expect(dead.map((d) => d.reason)).toEqual(['hop-limit']);
    expect(checkHistory(await c.histories()).consumed.get(target)).toBeUndefined();
  });

  it('holds a message while its shard has no owner and delivers it once one appears', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b'], autoAssign: false });
    cluster = c;
    const a = c.nodes.get('a')!;
    const target = 'vt:counter/held';
    const shard = shardOf(c, target);
    expect(a.placement.decide(target)).toEqual({ kind: 'hold' });
    let done: string | undefined;
    void a.node.send(target, 'inc', { id: 'h-1' }).then((v) => {
      done = v;
    });
    // Held by a's runtime: from now on only a view with an owner of the shard lets it go.
    await until(() => a.node.heldCount === 1, { what: 'the message held on a' });
    expect(done).toBeUndefined();
    await c.memberships.get('b')!.grant(shard);
    await until(() => done !== undefined, { what: 'delivery after the grant' });
    expect(done).toBe('processed');
    const report = checkHistory(await c.histories());
    expect(report.consumed.get(target)?.has('h-1')).toBe(true);
  });

  it('fails a send with error.communication after the delivery deadline', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'], config: { deliveryDeadlineMs: 300 } });
    cluster = c;
    await allLeased(c);
    const a = c.nodes.get('a')!;
    let shard = 0;
    while (ownerNode(c, shard) !== 'c') shard++;
    const target = iriInShard('vt:counter/d', shard, (i) => shardOf(c, i));
    let relay = 'vt:relay/d0';
    for (let i = 0; ownerNode(c, shardOf(c, relay)) !== 'a'; i++) relay = `vt:relay/d${i}`;
    c.network.faults = { drop: (_f, to) => to === 'c' };
    const t0 = Date.now();
    await a.node.send(relay, 'relay', { data: { to: target, event: 'inc', id: 'late' } });
    let errors: { code?: string; sendid?: string }[] = [];
    await until(
      async () => {
        errors = ((await a.node.ask(relay, 'report')).data as { errors: typeof errors }).errors;
        return errors.length > 0;
      },
      { timeoutMs: 5000, what: 'error.communication' },
    );
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
    expect(errors[0]).toMatchObject({ code: 'PLX_CLUSTER_DEADLINE', sendid: 'late' });
  });

  it('fences a paused owner on the shared store: its appends are refused and its frames dead-lettered', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'] });
    cluster = c;
    await allLeased(c);
    let shard = 0;
    while (ownerNode(c, shard) !== 'b') shard++;
    const b = c.nodes.get('b')!;
    const actor = iriInShard('vt:relay/p', shard, (i) => shardOf(c, i));
    const counter = iriInShard('vt:counter/p', [...Array(8).keys()].find((s) => ownerNode(c, s) === 'a')!, (i) =>
      shardOf(c, i),
    );
    await c.nodes.get('a')!.node.send(actor, 'ping', { id: 'before' });
    const e1 = b.placement.heldEpoch(shard);
    // Pause b: its lease clock stops and its heartbeats stop reaching the authority.
    const mb = c.memberships.get('b')!;
    const frozen = performance.now();
    (mb as unknown as { clock: { now(): number } }).clock = { now: () => frozen };
    (mb as unknown as { call: () => Promise<never> }).call = () => Promise.reject(new Error('paused'));
    await until(
      () => {
        const o = ownerOf(c.memberships.get('a')!.view(), shard);
        return o !== undefined && o.owner !== 'b' && o.epoch > e1;
      },
      { timeoutMs: 8000, what: 'the shard moved' },
    );
    const newOwner = ownerNode(c, shard);
    await until(() => c.nodes.get(newOwner)!.placement.leaseEpoch(shard) !== undefined, { what: 'new lease usable' });
    await c.nodes.get('a')!.node.send(actor, 'ping', { id: 'after' });
    // "Resume" b: it still believes it holds the shard at e1.
    expect(b.placement.decide(actor)).toEqual({ kind: 'local' });
    const err = await b.node.send(actor, 'ping', { id: 'stale-1' }).then(
      () => undefined,
      (e: unknown) => e as { code: string; message: string; cause?: { code?: string } },
    );
    expect(err?.code).toBe('PLX_RUNTIME_JOURNAL_FAILED');
    expect(err?.cause?.code).toBe('PLX_CLUSTER_FENCED');
    // Its actor's frames carry (shard, e1): the receiver drops them.
    const frameVerdict = await b.wire.send('a', {
      shard,
      epoch: e1,
      sender: actor,
      target: counter,
      payload: new TextEncoder().encode(JSON.stringify({ node: 'b', id: 'zombie', event: { name: 'inc' } })),
    });
    expect(frameVerdict).toBe('stale');
    const dead = await c.nodes.get('a')!.deadLetters.list();
    expect(dead.at(-1)).toMatchObject({ reason: 'stale-epoch', epoch: `${e1}`, target: counter });
    const report = checkHistory(await c.histories(), c.writers);
    expect(report.problems).toEqual([]);
    const ids = report.consumed.get(actor)!;
    expect(ids.has('before') && ids.has('after')).toBe(true);
    expect(ids.has('stale-1')).toBe(false);
    expect(report.consumed.get(counter)).toBeUndefined();
    expect(report.epochs.get(shard)!.length).toBeGreaterThanOrEqual(2);
  });

  it.each([1, 2, 3, 4, 5, 6])(
    'seed %i: lost and duplicated frames, a revoked shard: every acknowledged message once',
    async (seed) => {
      const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'], config: { retryBackoffMs: 5 } });
      cluster = c;
      await allLeased(c);
      const r = rng(seed);
      c.network.faults = { drop: () => r() < 0.15, duplicate: () => r() < 0.15 };
      const names = ['a', 'b', 'c'];
      const acked = new Map<string, string>();
      const sends: Promise<void>[] = [];
      for (let i = 0; i < 120; i++) {
        const from = c.nodes.get(names[Math.floor(r() * 3)]!)!;
        const target = `vt:counter/s${Math.floor(r() * 30)}`;
        const id = `seed${seed}-${i}`;
        sends.push(
          from.node.send(target, 'inc', { id }).then(
            () => void acked.set(id, target),
            () => {},
          ),
        );
        if (i === 60)
          void c.memberships
            .get('a')!
            .revoke(Math.floor(r() * 8))
            .catch(() => {});
        if (i % 10 === 0) await new Promise((res) => setTimeout(res, 5));
      }
      await Promise.all(sends);
      c.network.faults = {};
      expect(acked.size).toBe(120);
      const report = checkHistory(await c.histories(), c.writers);
      expect(report.problems).toEqual([]);
      let total = 0;
      for (const [id, target] of acked) {
        expect(report.consumed.get(target)?.has(id)).toBe(true);
        total++;
      }
      expect(report.macrosteps).toBe(total);
    },
  );
});

function ownerAt(d: { kind: string; node?: string }): string | undefined {
  return d.node;
}
