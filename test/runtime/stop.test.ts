/** node.stop(): drain (finish macrosteps, flush outboxes), then deactivate; held sends stay journaled. */
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../ts/core/clock.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { Node, openJournal, type PlacementDecision } from '../../ts/runtime/index.js';
import { loopTurns } from '../helpers/clock.js';
import { until } from '../helpers/until.js';
import { cleanup, counterChart, GatedJournal, probe, tempDir } from './helpers.js';

afterAll(cleanup);

describe('node.stop', () => {
  it('finishes queued macrosteps and flushes local sends before it resolves, refusing new messages meanwhile', async () => {
    const dir = await tempDir();
    const storage = new GatedJournal(await openJournal(dir, { shardCount: 2 }));
    const clock = new ManualClock(1_000);
    const node = Node.builder(storage).chart('vt:c/', counterChart()).clock(clock).build();
    storage.closedGate = true;
    const queued = [
      node.send('vt:c/1', 'relay', { id: 'a', data: { to: ['vt:c/2', 'vt:c/3'] } }),
      node.send('vt:c/1', 'inc', { id: 'b' }),
      node.send('vt:c/1', 'inc', { id: 'c' }),
    ];
    await until(() => storage.inFlight === 1, { timeoutMs: 5_000, what: 'storage.inFlight === 1', intervalMs: 2 });
    let stopped = false;
    const stopping = node.stop().then(() => {
      stopped = true;
    });
    let refused: unknown;
    try {
      await node.send('vt:c/1', 'inc', { id: 'late' });
    } catch (e) {
      refused = e;
    }
    expect(isPlexusError(refused, 'PLX_RUNTIME_STOPPED')).toBe(true);
    clock.advance(29_999); // just before the default 30 s deadline of stop()
    // A deadline that (wrongly) fired would end the drain wait within these turns.
    await loopTurns();
    expect(node.draining).toBe(true);
    expect(stopped).toBe(false);
    storage.closedGate = false;
    storage.release();
    await stopping;
    expect(await Promise.all(queued)).toEqual(['processed', 'processed', 'processed']);
    expect(node.activeCount).toBe(0);
    for (const iri of ['vt:c/2', 'vt:c/3']) {
      const h = await storage.history(iri);
      expect(h.snapshot?.state, iri).toMatchObject({ count: 1, seen: [`vt:c/1#1.${iri === 'vt:c/2' ? 0 : 1}`] });
    }
    const h1 = await storage.history('vt:c/1');
    expect(h1.snapshot).toMatchObject({ seq: 3, dispatchedThrough: 3, pending: [] });
    await storage.close();
  });

  it('does not wait for a send whose target has no owner: it stays in the snapshot outbox', async () => {
    const dir = await tempDir();
    const storage = await openJournal(dir, { shardCount: 2 });
    const decide = (iri: string): PlacementDecision => (iri.startsWith('vt:h/') ? { kind: 'hold' } : { kind: 'local' });
    const node = Node.builder(storage).chart('vt:', counterChart()).placement({ decide }).build();
    await node.send('vt:c/1', 'relay', { id: 'a', data: { to: ['vt:h/1'] } });
    const t0 = Date.now();
    await node.stop({ timeoutMs: 10_000 });
    expect(Date.now() - t0).toBeLessThan(2000);
    const h = await storage.history('vt:c/1');
    expect(h.snapshot?.pending).toEqual([{ seq: 1, index: 0, send: { id: 'r0', target: 'vt:h/1', event: 'inc' } }]);
    expect(h.snapshot?.dispatchedThrough).toBe(0);
    await storage.close();
  });

  it('on a manual clock, resolves when the last macrostep ends, and gives up at the deadline of that clock', async () => {
    const dir = await tempDir();
    const storage = new GatedJournal(await openJournal(dir, { shardCount: 2 }));
    const clock = new ManualClock(1_000);
    const node = Node.builder(storage).chart('vt:c/', counterChart()).clock(clock).build();
    storage.closedGate = true;
    const sent = node.send('vt:c/1', 'inc', { id: 'a' });
    await until(() => storage.inFlight === 1, { timeoutMs: 5_000, what: 'storage.inFlight === 1', intervalMs: 2 });
    let stopped = false;
    const stopping = node.stop({ timeoutMs: 60_000 }).then(() => {
      stopped = true;
    });
    clock.advance(59_999);
    await loopTurns();
    expect(node.draining).toBe(true);
    expect(stopped).toBe(false);
    storage.closedGate = false;
    storage.release();
    await stopping; // the deadline never came: the drain woke on the macrostep's end
    expect(await sent).toBe('processed');
    expect(clock.pending()).toBe(0);

    // A send that never completes keeps the drain busy until the deadline of the node's clock.
    const storage2 = await openJournal(await tempDir(), { shardCount: 2 });
    const clock2 = new ManualClock(1_000);
    const never = probe('never', [], () => new Promise<void>(() => {}));
    const stuck = Node.builder(storage2).chart('vt:c/', counterChart()).processor(never).clock(clock2).build();
    await stuck.send('vt:c/1', 'relay', { id: 'b', data: { to: ['vt:x/1'], type: 'never' } });
    await until(() => never.sent.length === 1, { timeoutMs: 5_000, what: 'the send is out', intervalMs: 2 });
    let stopped2 = false;
    const stopping2 = stuck.stop({ timeoutMs: 500 }).then(() => {
      stopped2 = true;
    });
    await until(() => clock2.pending() > 0, { what: "the drain's deadline on the node's clock" });
    clock2.advance(499);
    await loopTurns();
    expect(stuck.draining).toBe(true);
    expect(stopped2).toBe(false);
    clock2.advance(1);
    await loopTurns();
    expect(stuck.draining).toBe(false);
    await stopping2;
    const h = await storage2.history('vt:c/1');
    expect(h.snapshot?.pending).toEqual([
      { seq: 1, index: 0, send: { id: 'r0', target: 'vt:x/1', event: 'inc', type: 'never' } },
    ]);
    await storage.close();
    await storage2.close();
  });
});
