/**
 * Replay, snapshots, idle deactivation and delayed sends, on real files. A node that is
 * abandoned without `stop()` (its storage closed under it) stands for a crash between
 * macrosteps; test/runtime/crash.test.ts kills real processes.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { type LogJournalStorage, Node, openJournal } from '../../ts/runtime/index.js';
import { until } from '../helpers/until.js';
import { type CounterState, cleanup, counterChart, ManualClock, probe, tempDir } from './helpers.js';

afterAll(cleanup);

const state = (node: Node, iri: string) => node.activation(iri)?.currentState as CounterState;

/** Abandons a node as a crash would: no drain, no snapshot; the storage is closed under it. */
async function crash(storage: LogJournalStorage): Promise<void> {
  await storage.close();
}

describe('replay', () => {
  it('rebuilds state from the journal without running transitions or completed sends again', async () => {
    const dir = await tempDir();
    const chart = counterChart();
    let storage = await openJournal(dir, { shardCount: 4 });
    const out1 = probe('out');
    const node1 = Node.builder(storage).chart('vt:c/', chart).processor(out1).config({ snapshotEvery: 0 }).build();
    for (let i = 0; i < 5; i++)
      await node1.send('vt:c/1', 'relay', { id: `m${i}`, data: { to: ['vt:x/1'], type: 'out' } });
    await node1.send('vt:c/1', 'inc', { id: 'last' });
    await until(() => out1.sent.length === 5, { timeoutMs: 5_000, what: 'out1.sent.length === 5', intervalMs: 2 });
    const before = state(node1, 'vt:c/1');
    await crash(storage);

    storage = await openJournal(dir);
    const out2 = probe('out');
    const callsBefore = chart.calls;
    const node2 = Node.builder(storage).chart('vt:c/', chart).processor(out2).config({ snapshotEvery: 0 }).build();
    expect(await node2.send('vt:c/1', 'inc', { id: 'm0' })).toBe('duplicate');
    expect(state(node2, 'vt:c/1')).toEqual(before);
    expect(chart.calls).toBe(callsBefore); // replay ran no transition
    // every relay's send completed before the next macrostep was journaled, so none is sent again
    expect(out2.sent).toEqual([]);
    await node2.stop();
    await storage.close();
  });

  it('sends again, with the same message id, a send journaled but not known to be completed at the crash', async () => {
    const dir = await tempDir();
    let storage = await openJournal(dir, { shardCount: 2 });
    const hang = probe('out', [], () => new Promise<void>(() => {}));
    const node1 = Node.builder(storage).chart('vt:c/', counterChart()).processor(hang).build();
    await node1.send('vt:c/1', 'relay', { id: 'm1', data: { to: ['vt:x/1', 'vt:x/2'], type: 'out' } });
    await until(() => hang.sent.length === 2, { timeoutMs: 5_000, what: 'hang.sent.length === 2', intervalMs: 2 });
    await crash(storage);

    storage = await openJournal(dir);
    const out = probe('out');
    const node2 = Node.builder(storage).chart('vt:c/', counterChart()).processor(out).build();
    await node2.send('vt:c/1', 'inc', { id: 'm2' });
    await until(() => out.sent.length === 2, { timeoutMs: 5_000, what: 'out.sent.length === 2', intervalMs: 2 });
    expect(out.sent.map((o) => o.envelope.id)).toEqual(hang.sent.map((o) => o.envelope.id));
    expect(out.sent.map((o) => o.envelope.id)).toEqual(['vt:c/1#1.0', 'vt:c/1#1.1']);
    await node2.stop();
    // the completion is journaled now (stop writes a snapshot): a third start sends nothing
    await storage.close();
    storage = await openJournal(dir);
    const out3 = probe('out');
    const node3 = Node.builder(storage).chart('vt:c/', counterChart()).processor(out3).build();
    await node3.send('vt:c/1', 'inc', { id: 'm3' });
    await node3.stop();
    expect(out3.sent).toEqual([]);
    await storage.close();
  });

  it('delivers local sends exactly once across a crash: the receiver deduplicates the resend', async () => {
    const dir = await tempDir();
    let storage = await openJournal(dir, { shardCount: 4 });
    const node1 = Node.builder(storage).chart('vt:c/', counterChart()).config({ snapshotEvery: 0 }).build();
    await node1.send('vt:c/a', 'relay', { id: 'm1', data: { to: ['vt:c/b'] } });
    await until(() => state(node1, 'vt:c/b')?.count === 1, {
      timeoutMs: 5_000,
      what: "state(node1, 'vt:c/b')?.count === 1",
      intervalMs: 2,
    });
    await crash(storage);
    storage = await openJournal(dir);
    const node2 = Node.builder(storage).chart('vt:c/', counterChart()).build();
    await node2.send('vt:c/a', 'inc', { id: 'm2' }); // activates a: its outbox resends to b
    await node2.send('vt:c/b', 'inc', { id: 'm3' });
    await node2.stop();
    const h = await storage.history('vt:c/b');
    expect(h.snapshot?.state).toMatchObject({ count: 2, seen: ['vt:c/a#1.0', 'm3'] });
    await storage.close();
  });

  it('runs transitions again (dropping their sends) for a chart that journals events only', async () => {
    const dir = await tempDir();
    const chart = Object.assign(counterChart(), { journal: 'events' as const });
    let storage = await openJournal(dir, { shardCount: 1 });
    const out = probe('out');
    const node1 = Node.builder(storage).chart('vt:c/', chart).processor(out).config({ snapshotEvery: 0 }).build();
    await node1.send('vt:c/1', 'inc', { id: 'a', data: { by: 3 } });
    await node1.send('vt:c/1', 'relay', { id: 'b', data: { to: ['vt:x/1'], type: 'out' } });
    await node1.send('vt:c/1', 'inc', { id: 'c' });
    expect((await storage.history('vt:c/1')).records.every((r) => r.state === undefined)).toBe(true);
    await crash(storage);
    storage = await openJournal(dir);
    const out2 = probe('out');
    const calls = chart.calls;
    const node2 = Node.builder(storage).chart('vt:c/', chart).processor(out2).build();
    await node2.send('vt:c/1', 'inc', { id: 'd' });
    expect(state(node2, 'vt:c/1')).toEqual({ count: 5, seen: ['a', 'b', 'c', 'd'], errors: [] });
    expect(chart.calls - calls).toBe(4); // three replayed, one new
    expect(out2.sent).toEqual([]);
    await node2.stop();
    await storage.close();
  });
});

describe('snapshots', () => {
  it('bound replay to the macrosteps since the newest snapshot', async () => {
    const dir = await tempDir();
    let storage = await openJournal(dir, { shardCount: 1 });
    const node1 = Node.builder(storage).chart('vt:c/', counterChart()).config({ snapshotEvery: 10 }).build();
    for (let i = 0; i < 35; i++) await node1.send('vt:c/1', 'inc', { id: `m${i}` });
    const h = await storage.history('vt:c/1');
    expect(h.snapshot?.seq).toBe(30);
    expect(h.records.map((r) => r.seq)).toEqual([31, 32, 33, 34, 35]);
    expect(h.snapshot?.dedup).toHaveLength(30);
    await crash(storage);
    storage = await openJournal(dir);
    const chart = counterChart();
    const node2 = Node.builder(storage).chart('vt:c/', chart).config({ snapshotEvery: 10 }).build();
    expect(await node2.send('vt:c/1', 'inc', { id: 'm3' })).toBe('duplicate'); // from the snapshot's window
    expect(await node2.send('vt:c/1', 'inc', { id: 'm33' })).toBe('duplicate'); // from a record after it
    expect(state(node2, 'vt:c/1').count).toBe(35);
    expect(chart.calls).toBe(0);
    await node2.stop();
    await storage.close();
  });
});

describe('activation and idle deactivation', () => {
  it('activates on the first message, deactivates when idle (with a snapshot), and reactivates', async () => {
    const dir = await tempDir();
    const storage = await openJournal(dir, { shardCount: 2 });
    const clock = new ManualClock();
    const chart = counterChart();
    const node = Node.builder(storage).chart('vt:c/', chart).clock(clock).config({ idleAfter: 1000 }).build();
    expect(node.activeCount).toBe(0);
    await node.send('vt:c/1', 'inc', { id: 'a' });
    expect(node.activeCount).toBe(1);
    await until(() => clock.pending === 1, { timeoutMs: 2000, what: 'the idle timer', intervalMs: 2 });
    clock.advance(999);
    expect(node.activeCount).toBe(1);
    const act = node.activation('vt:c/1');
    clock.advance(1);
    await act?.closed;
    expect(node.activeCount).toBe(0);
    expect((await storage.history('vt:c/1')).snapshot?.seq).toBe(1);
    await node.send('vt:c/1', 'inc', { id: 'b' });
    expect(node.stats.activations).toBe(2);
    expect(state(node, 'vt:c/1').count).toBe(2);
    expect(chart.calls).toBe(2);
    // a message before the timer fires keeps the actor active
    await until(() => clock.pending === 1, { timeoutMs: 2000, what: 'the idle timer', intervalMs: 2 });
    clock.advance(500);
    await node.send('vt:c/1', 'inc', { id: 'c' });
    await until(() => clock.pending === 1, { timeoutMs: 2000, what: 'the idle timer', intervalMs: 2 });
    clock.advance(700);
    expect(node.activeCount).toBe(1);
    const again = node.activation('vt:c/1');
    clock.advance(300);
    await again?.closed;
    expect(node.activeCount).toBe(0);
    await node.stop();
    await storage.close();
  });
});

describe('delayed sends', () => {
  it('leave when due by the injected clock, and survive a restart', async () => {
    const dir = await tempDir();
    let storage = await openJournal(dir, { shardCount: 1 });
    const clock = new ManualClock();
    const out = probe('out');
    const node1 = Node.builder(storage).chart('vt:c/', counterChart()).processor(out).clock(clock).build();
    await node1.send('vt:c/1', 'relay', { id: 'a', data: { to: ['vt:x/1'], type: 'out', delay: 500 } });
    clock.advance(499);
    expect(out.sent).toHaveLength(0);
    clock.advance(1);
    expect(out.sent.map((o) => o.envelope.id)).toEqual(['vt:c/1#1.0']);
    await node1.send('vt:c/1', 'relay', { id: 'b', data: { to: ['vt:x/2'], type: 'out', delay: 500 } });
    await node1.stop(); // not due: stays in the journal (the snapshot's outbox)
    await storage.close();
    storage = await openJournal(dir);
    const clock2 = new ManualClock();
    clock2.time = clock.time + 200;
    const out2 = probe('out');
    const node2 = Node.builder(storage).chart('vt:c/', counterChart()).processor(out2).clock(clock2).build();
    await node2.send('vt:c/1', 'inc', { id: 'c' });
    expect(out2.sent).toHaveLength(0);
    clock2.advance(300);
    expect(out2.sent.map((o) => o.envelope.id)).toEqual(['vt:c/1#2.0']);
    await node2.stop();
    await storage.close();
  });
});
