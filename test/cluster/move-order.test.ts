/**
 * A pair's messages reach the target actor in send order across a move of the target's shard
 * (MemoryWire, in process, made deterministic by holding one journal append or one link):
 * - messages waiting in the mailbox of an actor whose shard moved away go to the new owner
 *   before any message of the pair sent after the move, also when the new owner's first
 *   append fenced the macrostep that was in flight (that one fails, the sender is told),
 *   and when no node owns the shard for a while (they are held in order);
 * - after a redirect, a sender's next message waits until those still travelling through
 *   the former owner are settled.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { checkHistory } from '../../ts/cluster/history.js';
import { ownerOf } from '../../ts/cluster/types.js';
import { MemoryLog, type MemoryLogState } from '../../ts/storage/index.js';
import { until } from '../helpers/until.js';
import { iriInShard, type MemoryActorCluster, memoryActorCluster } from './actor-helpers.js';

let cluster: MemoryActorCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

const realAppend = MemoryLog.prototype.append;
afterEach(() => {
  MemoryLog.prototype.append = realAppend;
});

/**
 * Holds the appends to `state` stamped with `epoch` while `held()` says so: an append that
 * passed the lease check and is in flight (a slow write), as the store sees it.
 */
function holdAppends(state: () => MemoryLogState | undefined, epoch: bigint, held: () => boolean): void {
  MemoryLog.prototype.append = async function (this: MemoryLog, payloads, opts) {
    if (opts?.epoch === epoch && (this as unknown as { state: MemoryLogState }).state === state()) {
      await until(() => !held(), { timeoutMs: 20_000, what: 'the append to be released' });
    }
    return realAppend.call(this, payloads, opts);
  };
}

async function leaseOn(c: MemoryActorCluster, node: string, shard: number): Promise<void> {
  await c.memberships.get(node)!.grant(shard);
  await until(
    () => {
      for (const m of c.memberships.values()) if (ownerOf(m.view(), shard)?.owner !== node) return false;
      return c.memberships.get(node)!.leaseFor(shard) !== undefined;
    },
    { what: `${node} to own shard ${shard}` },
  );
}

describe('message order across a move of the target shard (MemoryWire)', () => {
  /**
   * The relay on b sends 1, 2, 3 to the counter on b: 1 is in its macrostep (its append held
   * in the store until `go()`), 2 and 3 wait in the mailbox.
   */
  async function queued() {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'], autoAssign: false });
    cluster = c;
    const a = c.nodes.get('a')!;
    const b = c.nodes.get('b')!;
    const shardOf = (iri: string) => b.placement.shardOf(iri);
    const relay = iriInShard('vt:relay/o', 1, shardOf);
    const target = iriInShard('vt:counter/o', 2, shardOf);
    await leaseOn(c, 'b', 1);
    await leaseOn(c, 'b', 2);
    let held = true;
    holdAppends(
      () => c.stores.get('shared')!.get(2),
      b.membership.leaseFor(2)!.epoch,
      () => held,
    );
    const relayTo = async (i: number) =>
      expect(await a.node.send(relay, 'relay', { id: `r-${i}`, data: { to: target, event: 'inc' } })).toBe('processed');
    for (let i = 1; i <= 3; i++) await relayTo(i);
    await until(() => b.node.activation(target)?.mailbox.length === 2, { what: 'two messages in the mailbox' });
    /** Waits until the relay's sends are done; the relay's errors and the checked histories. */
    const outcome = async (n: number) => {
      let errors: unknown[] = [];
      await until(
        async () => {
          const got = checkHistory(await c.histories()).consumed.get(target)?.size ?? 0;
          const rep = await a.node.ask(relay, 'report');
          errors = (rep.data as { errors: unknown[] }).errors;
          return got >= n || errors.length > 0;
        },
        { what: `${n} messages consumed` },
      );
      await until(async () => b.node.activation(relay)?.sendsInFlight === 0, {
        what: 'every send of the relay completed',
      });
      return { errors, report: checkHistory(await c.histories()) };
    };
    const go = () => {
      held = false;
    };
    return { c, a, b, relay, target, relayTo, go, outcome };
  }

  /**
   * After `queued`, the counter's shard moves to c and the relay sends 4; `between` runs
   * after the move, before the held append goes on.
   */
  async function moveWhileQueued(between: (c: MemoryActorCluster, target: string) => Promise<void>) {
    const { c, b, relay, target, relayTo, go, outcome } = await queued();
    await b.membership.release(2, b.membership.leaseFor(2)!.epoch);
    await leaseOn(c, 'c', 2);
    await until(() => b.placement.decide(target).kind === 'remote', { what: 'b to route the counter to c' });
    // 4 must wait behind 2 and 3 (b does not hand it to its processor yet), where a direct
    // send would reach c first.
    const sent = b.processor.stats.sent;
    await relayTo(4);
    await until(
      () =>
        (b.node.activation(relay)?.sendsInFlight === 4 && b.processor.stats.sent === sent) ||
        c.nodes.get('c')!.node.activation(target)?.position === 1,
      { what: 'the fourth message placed' },
    );
    await between(c, target);
    go();
    return { ...(await outcome(4)), relay, target };
  }

  it('sends what waits in the mailbox of a moved actor to the new owner before what the sender sent after the move', async () => {
    const { errors, report, relay, target } = await moveWhileQueued(async () => {});
    expect(errors).toEqual([]);
    expect(report.problems).toEqual([]);
    expect([...(report.consumed.get(target) ?? [])]).toEqual([1, 2, 3, 4].map((seq) => `${relay}#${seq}.0`));
  });

  it('routes the mailbox of an actor fenced by the new owner there, in order', async () => {
    // Another sender reaches the counter at c first: c's append fences b's held one, whose
    // macrostep fails (the relay is told); 2, 3 and 4 were never tried and go to c in order.
    const { errors, report, relay, target } = await moveWhileQueued(async (c, target) => {
      expect(await c.nodes.get('a')!.node.send(target, 'inc', { id: 'other' })).toBe('processed');
    });
    expect(errors).toEqual([{ code: 'PLX_RUNTIME_JOURNAL_FAILED', target }]);
    expect(report.problems).toEqual([]);
    expect([...(report.consumed.get(target) ?? [])]).toEqual(['other', ...[2, 3, 4].map((seq) => `${relay}#${seq}.0`)]);
  });

  it('holds what the moved actor had queued while no node owns its shard, and a later message behind it', async () => {
    const { c, b, relay, target, relayTo, go, outcome } = await queued();
    await b.membership.release(2, b.membership.leaseFor(2)!.epoch);
    await until(() => b.placement.decide(target).kind === 'hold', { what: 'no owner of the counter' });
    await relayTo(4);
    go();
    // 1 is journaled by b; 2, 3 and 4 wait in b, held, until an owner appears.
    await until(() => b.node.activation(target) === undefined, { what: 'the counter to leave b' });
    await relayTo(5);
    await leaseOn(c, 'c', 2);
    const { errors, report } = await outcome(5);
    expect(errors).toEqual([]);
    expect(report.problems).toEqual([]);
    expect([...(report.consumed.get(target) ?? [])]).toEqual([1, 2, 3, 4, 5].map((seq) => `${relay}#${seq}.0`));
  });

  it('after a redirect, holds the next message until the ones still travelling through the former owner are settled', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'], autoAssign: false });
    cluster = c;
    const a = c.nodes.get('a')!;
    const target = iriInShard('vt:counter/d', 3, (i) => a.placement.shardOf(i));
    await leaseOn(c, 'c', 3);
    // a's table names b, a former owner: b forwards and tells a the owner.
    expect(a.placement.redirect(3, 'b', ownerOf(a.membership.view(), 3)!.epoch)).toBe(true);
    let cut = true;
    c.network.faults.drop = (from, to) => cut && from === 'b' && to === 'c';
    const first = a.node.send(target, 'inc', { id: 'd-1' });
    await until(() => a.placement.decide(target).kind === 'remote' && a.processor.stats.redirectsTaken === 1, {
      what: 'redirect',
    });
    expect(a.placement.decide(target)).toEqual({ kind: 'remote', node: 'c' });
    const second = a.node.send(target, 'inc', { id: 'd-2' });
    await until(
      () => a.placement.order.waiting(target) === 1 || c.nodes.get('c')!.node.activation(target)?.position === 1,
      { what: 'the second message waiting, or consumed' },
    );
    cut = false;
    expect(await first).toBe('processed');
    expect(await second).toBe('processed');
    const report = checkHistory(await c.histories());
    expect(report.problems).toEqual([]);
    expect([...(report.consumed.get(target) ?? [])]).toEqual(['d-1', 'd-2']);
    expect(c.nodes.get('b')!.processor.stats.forwarded).toBe(1);
  });
});
