/**
 * `ClusterNode.leave()` in process (MemoryWire, the static authority): the runtime hooks of
 * leaving (ts/cluster/leave.ts) under a stream of messages, a message for an actor not yet
 * active held and then delivered by the shard's next owner, and the refusal of a leave with
 * per-node stores and replication factor 1 that changes nothing. The same with real node
 * processes: test/cluster/leave-processes.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  CONTROL_TAG,
  decodeControl,
  decodeControlReply,
  encodeControl,
  serveControl,
} from '../../ts/cluster/control.js';
import { checkHistory } from '../../ts/cluster/history.js';
import type { LeaveStep } from '../../ts/cluster/leave.js';
import { ownerOf } from '../../ts/cluster/types.js';
import { expectRefusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';
import { iriInShard, type MemoryActorCluster, memoryActorCluster } from './actor-helpers.js';

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
          if (o === undefined || (o.owner === id && m.leaseFor(s) === undefined)) return false;
        }
      }
      return true;
    },
    { what: 'every shard leased' },
  );
}

describe('ClusterNode.leave() (MemoryWire)', () => {
  it('shared store: drains under a stream, holds a new activation, hands the shards over; every message once', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b', 'c'] });
    cluster = c;
    await allLeased(c);
    const [a, b, cc] = ['a', 'b', 'c'].map((id) => c.nodes.get(id)!);
    const view = c.memberships.get('a')!.view();
    const bShards = view.leases.filter((l) => l.owner === 'b');
    expect(bShards.length).toBeGreaterThan(0);
    const shard = bShards[0]!.shard;
    const shardOf = (iri: string) => a!.placement.shardOf(iri);

    // A steady stream through a and c to counters on every node.
    const acked = new Map<string, string>();
    let n = 0;
    let running = true;
    const failures: unknown[] = [];
    let retried = 0;
    const senders = [a!, cc!].flatMap((node) =>
      Array.from({ length: 3 }, async () => {
        while (running) {
          const k = n++;
          const target = `vt:counter/s${k % 24}`;
          // A send refused while a lease changes hands is retried with its id (the caller's
          // at-least-once; the journal's dedup makes it once).
          for (let attempt = 0; ; attempt++) {
            try {
              const r = await node.node.send(target, 'inc', { id: `m-${k}` });
              expect(['processed', 'duplicate']).toContain(r);
              acked.set(`m-${k}`, target);
              break;
            } catch (e) {
              retried++;
              if (attempt < 10) continue;
              failures.push(e);
              running = false;
              break;
            }
          }
          await new Promise((r) => setImmediate(r));
        }
      }),
    );
    const stopStream = async () => {
      running = false;
      await Promise.all(senders);
    };
    cluster.close = ((close) => async () => {
      await stopStream();
      await close();
    })(cluster.close.bind(cluster));
    await until(() => acked.size >= 50, { what: 'the stream to run' });

    // Sent on b to one of its own actors never activated: held while b leaves, then delivered by the next owner.
    const fresh = iriInShard('vt:counter/fresh', shard, shardOf);
    const steps: LeaveStep[] = [];
    const leaving = b!.leave({
      onStep: (s) => {
        steps.push(s);
        if (s.step === 'finish-macrosteps' && s.done === undefined) {
          expect(b!.node.refusesActivations).toBe(true);
          heldSend = b!.node.send(fresh, 'inc', { id: 'fresh-1' });
        }
      },
    });
    let heldSend: Promise<string> | undefined;
    expect(await leaving).toBe(true);
    expect(b!.left).toBe(true);
    expect(steps.map((s) => s.step)).toEqual([
      'drain',
      'refuse-activations',
      'finish-macrosteps',
      'flush-outboxes',
      ...bShards.map(() => 'hand-over'),
      'forward-held',
      'leave',
      'left',
    ]);
    expect(await heldSend).toBe('processed');
    expect(b!.node.activation(fresh)).toBeUndefined();
    expect(b!.node.activeCount).toBe(0);

    await until(
      () => {
        const v = c.memberships.get('a')!.view();
        return (
          !v.members.some((m) => m.id === 'b') &&
          bShards.every((l) => {
            const o = ownerOf(v, l.shard);
            return o !== undefined && o.owner !== 'b' && o.epoch > l.epoch;
          })
        );
      },
      { what: 'b gone from the members, its shards at a and c with greater epochs' },
    );
    const atLeave = acked.size;
    await until(() => acked.size >= atLeave + 50 || failures.length > 0, { what: 'the stream to go on' });
    expect(failures).toEqual([]);
    await stopStream();
    expect(failures).toEqual([]);
    expect(retried).toBeLessThan(acked.size / 10);

    const report = checkHistory(await c.histories(), c.writers);
    expect(report.problems).toEqual([]);
    for (const [id, target] of acked) expect(report.consumed.get(target)?.has(id), id).toBe(true);
    expect(report.consumed.get(fresh)?.has('fresh-1')).toBe(true);
    expect(report.macrosteps).toBe(acked.size + 1);
    // b wrote under its epoch of `shard` before leaving; nobody else did under that epoch.
    expect(c.writers.get(`${shard}/${bShards[0]!.epoch}`) ?? new Set(['b'])).toEqual(new Set(['b']));
  });

  it('per-node stores, replication factor 1: the leave is refused and nothing changes', async () => {
    const c = await memoryActorCluster({ nodes: ['a', 'b'], layout: 'per-node' });
    cluster = c;
    await allLeased(c);
    const b = c.nodes.get('b')!;
    const held = c.memberships.get('b')!.held().length;
    expect(held).toBeGreaterThan(0);
    const e = await expectRefusal(b.leave(), 'PLX_CLUSTER_REPLICATION_UNSUPPORTED');
    expect(e.details).toMatchObject({ reason: 'leave', supported: 1 });
    expect(b.left).toBe(false);
    expect(b.node.refusesActivations).toBe(false);
    expect(c.memberships.get('b')!.held().length).toBe(held);
    expect(
      c.memberships
        .get('a')!
        .view()
        .members.find((m) => m.id === 'b')?.status,
    ).toBe('alive');
    // b still serves its shards.
    const s = c.memberships.get('b')!.held()[0]!.shard;
    const target = iriInShard('vt:counter/stay', s, (iri) => b.placement.shardOf(iri));
    expect(await c.nodes.get('a')!.node.send(target, 'inc', { id: 'stay-1' })).toBe('processed');
    expect(b.node.activation(target)).toBeDefined();
  });
});

describe('operator requests (ts/cluster/control.ts)', () => {
  it('obeys only the node itself and refuses requests of a bad shape', async () => {
    let leaves = 0;
    const serve = serveControl('b', {
      leave: async () => {
        leaves++;
        return { left: true };
      },
    });
    const body = encodeControl({ op: 'leave' });
    expect(body[0]).toBe(CONTROL_TAG);
    expect(decodeControl(body)).toEqual({ op: 'leave' });
    const e = await expectRefusal(serve('a', body), 'PLX_CLUSTER_BAD_REQUEST');
    expect(e.details).toMatchObject({ reason: 'control', from: 'a' });
    expect(leaves).toBe(0);
    expect(decodeControlReply(await serve('b', body))).toEqual({ ok: true, left: true });
    expect(leaves).toBe(1);
    const enc = (text: string) => new Uint8Array([CONTROL_TAG, ...new TextEncoder().encode(text)]);
    for (const bad of [
      enc('{"op":"stop"}'),
      enc('not json'),
      enc('null'),
      new Uint8Array([0x7b]),
      new Uint8Array([CONTROL_TAG, 0xff, 0xfe]),
      enc(`{"op":"leave","x":"${'y'.repeat(5000)}"}`),
    ]) {
      await expectRefusal(serve('b', bad), 'PLX_CLUSTER_BAD_REQUEST');
    }
    expect(leaves).toBe(1);
  });
});
