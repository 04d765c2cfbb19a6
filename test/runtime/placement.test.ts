/**
 * The Placement seam as a cluster uses it: Hold (the message waits, the actor is not
 * activated), Remote (through the `cluster` processor), a lease moving away from an
 * active actor, and the lease epoch stamped on appends (a stale owner is fenced).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { Node, openJournal, type Placement, type PlacementDecision } from '../../ts/runtime/index.js';
import { until } from '../helpers/until.js';
import { cleanup, counterChart, probe, tempDir } from './helpers.js';

afterAll(cleanup);

/** A placement whose answers the test sets; `changed()` tells the subscribers. */
class TestPlacement implements Placement {
  decision: PlacementDecision = { kind: 'local' };
  epoch: bigint | undefined;
  private listeners: (() => void)[] = [];
  decide(): PlacementDecision {
    return this.decision;
  }
  epochOf(): bigint | undefined {
    return this.epoch;
  }
  subscribe(l: () => void): () => void {
    this.listeners.push(l);
    return () => {
      this.listeners = this.listeners.filter((x) => x !== l);
    };
  }
  changed(): void {
    for (const l of this.listeners) l();
  }
}

describe('placement', () => {
  it('holds a message while no owner lives, without activating the actor, and delivers it once local', async () => {
    const storage = await openJournal(await tempDir(), { shardCount: 2 });
    const placement = new TestPlacement();
    placement.decision = { kind: 'hold' };
    const node = Node.builder(storage).chart('vt:c/', counterChart()).placement(placement).build();
    let done = false;
    const p = node.send('vt:c/1', 'inc', { id: 'h1' }).then((r) => {
      done = true;
      return r;
    });
    // Held: from now on only a placement change lets it run.
    await until(() => node.heldCount === 1, { what: 'the message held by placement' });
    expect(done).toBe(false);
    expect(node.activeCount).toBe(0);
    expect((await storage.history('vt:c/1')).lastSeq).toBe(0);
    placement.decision = { kind: 'local' };
    placement.changed();
    expect(await p).toBe('processed');
    expect(node.activeCount).toBe(1);
    await node.stop();
    await storage.close();
  });

  it('forwards messages of a remote actor through the cluster processor, and sends of charts too', async () => {
    const storage = await openJournal(await tempDir(), { shardCount: 2 });
    const placement: Placement = {
      decide: (iri) => (iri.startsWith('vt:far/') ? { kind: 'remote', node: 'n2' } : { kind: 'local' }),
    };
    const cluster = probe('cluster');
    const node = Node.builder(storage).chart('vt:', counterChart()).placement(placement).transport(cluster).build();
    expect(await node.send('vt:far/1', 'inc', { id: 'x1' })).toBe('processed');
    expect(cluster.sent[0]).toMatchObject({ node: 'n2', envelope: { id: 'x1', target: 'vt:far/1' } });
    await node.send('vt:c/1', 'relay', { id: 'x2', data: { to: ['vt:far/2'] } });
    await until(() => cluster.sent.length === 2, {
      timeoutMs: 5_000,
      what: 'cluster.sent.length === 2',
      intervalMs: 2,
    });
    expect(cluster.sent[1]).toMatchObject({
      node: 'n2',
      from: 'vt:c/1',
      envelope: { id: 'vt:c/1#1.0', target: 'vt:far/2' },
    });
    expect(node.activation('vt:far/1')).toBeUndefined();
    await node.stop();
    await storage.close();
  });

  it('deactivates an active actor whose shard moved away and forwards what it had queued', async () => {
    const storage = await openJournal(await tempDir(), { shardCount: 2 });
    const placement = new TestPlacement();
    const cluster = probe('cluster');
    const node = Node.builder(storage).chart('vt:c/', counterChart()).placement(placement).transport(cluster).build();
    await node.send('vt:c/1', 'inc', { id: 'a' });
    const act = node.activation('vt:c/1');
    placement.decision = { kind: 'remote', node: 'n9' };
    placement.changed();
    await act?.closed;
    expect(node.activeCount).toBe(0);
    expect(await node.send('vt:c/1', 'inc', { id: 'b' })).toBe('processed');
    expect(cluster.sent.map((o) => o.envelope.id)).toEqual(['b']);
    await node.stop();
    await storage.close();
  });

  it('stamps the lease epoch on appends; a stale owner is fenced and its actor deactivated', async () => {
    const storage = await openJournal(await tempDir(), { shardCount: 1 });
    const newer = new TestPlacement();
    newer.epoch = 5n;
    const older = new TestPlacement();
    older.epoch = 4n;
    const a = Node.builder(storage).chart('vt:c/', counterChart()).placement(newer).build();
    const b = Node.builder(storage).chart('vt:c/', counterChart()).placement(older).build();
    await a.send('vt:c/1', 'inc', { id: 'a1' });
    let err: unknown;
    try {
      await b.send('vt:c/2', 'inc', { id: 'b1' });
    } catch (e) {
      err = e;
    }
    expect(isPlexusError(err, 'PLX_RUNTIME_JOURNAL_FAILED')).toBe(true);
    expect((err as { details: { code?: string } }).details.code).toBe('PLX_JOURNAL_FENCED');
    expect(b.activeCount).toBe(0);
    // the stale owner's activation of the same actor also cannot commit (position CAS or epoch)
    await expect(b.send('vt:c/1', 'inc', { id: 'b2' })).rejects.toMatchObject({ code: 'PLX_RUNTIME_JOURNAL_FAILED' });
    expect((await storage.history('vt:c/1')).records.map((r) => r.messageId)).toEqual(['a1']);
    await a.stop();
    await b.stop();
    await storage.close();
  });
});
