/**
 * Macrosteps on real files (fsync on): one atomic journal record each, the input and
 * output gates, deduplication by message id, error.communication, the mailbox bound,
 * chart failures, and group commit across the actors of one shard.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { decodeJournalRecord, type MacrostepRecord } from '../../ts/codec/journal-record.js';
import { isPlexusError } from '../../ts/core/errors.js';
import { Node, openJournal, shardDir } from '../../ts/runtime/index.js';
import { openLog } from '../../ts/storage/index.js';
import { loopTurns } from '../helpers/clock.js';
import { until } from '../helpers/until.js';
import { cleanup, counterChart, GatedJournal, probe, stateOf, tempDir } from './helpers.js';

afterAll(cleanup);

async function rejection(p: Promise<unknown>): Promise<{ code: string; details: Record<string, unknown> }> {
  try {
    await p;
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  throw new Error('expected a rejection');
}

describe('one macrostep', () => {
  it('is one atomic record: message id, consumed event, new state and sends, one batch of one record', async () => {
    const dir = await tempDir();
    const storage = await openJournal(dir, { shardCount: 1, log: { fsync: 'always' } });
    const billing = probe('billing');
    const node = Node.builder(storage).chart('vt:c/', counterChart()).processor(billing).build();
    await node.send('vt:c/1', 'inc', { id: 'm1', data: { by: 5 } });
    await node.send('vt:c/1', 'relay', { id: 'm2', data: { to: ['vt:b/1', 'vt:b/2'], type: 'billing' } });
    await until(() => billing.sent.length === 2, {
      timeoutMs: 5_000,
      what: 'billing.sent.length === 2',
      intervalMs: 2,
    });
    await node.stop();
    await storage.close();

    const log = await openLog(shardDir(dir, 0));
    const recs = await log.read(1n);
    await log.close();
    const macro = recs.map((r) => ({ r, d: decodeJournalRecord(r.payload) })).filter((x) => x.d.kind === 'macrostep');
    expect(macro.map((x) => (x.d as MacrostepRecord).messageId)).toEqual(['m1', 'm2']);
    // each record its own batch: distinct batch ids
    expect(new Set(recs.map((r) => Buffer.from(r.batchId).toString('hex'))).size).toBe(recs.length);
    const first = macro[0]?.d as MacrostepRecord;
    expect(first.seq).toBe(1);
    expect(first.event).toEqual({ name: 'inc', data: { by: 5 } });
    expect(first.state).toEqual({ count: 5, seen: ['m1'], errors: [] });
    expect(first.sends).toEqual([]);
    const second = macro[1]?.d as MacrostepRecord;
    expect(second.seq).toBe(2);
    expect(second.sends).toEqual([
      { id: 'r0', target: 'vt:b/1', event: 'inc', type: 'billing' },
      { id: 'r1', target: 'vt:b/2', event: 'inc', type: 'billing' },
    ]);
    // what left through the processor carries the deterministic message ids
    expect(billing.sent.map((o) => o.envelope.id)).toEqual(['vt:c/1#2.0', 'vt:c/1#2.1']);
    expect(billing.sent[0]?.envelope.event).toMatchObject({ name: 'inc', sendid: 'r0', origin: 'vt:c/1' });
  });

  it('output gate: sends leave only after the append is durable; input gate: no message while it is in flight', async () => {
    const dir = await tempDir();
    const order: string[] = [];
    const storage = new GatedJournal(await openJournal(dir, { shardCount: 2 }), order);
    const chart = counterChart();
    const out = probe('out', order);
    const node = Node.builder(storage).chart('vt:c/', chart).processor(out).build();
    storage.closedGate = true;
    const p1 = node.send('vt:c/1', 'relay', { id: 'a', data: { to: ['vt:x/1'], type: 'out' } });
    const p2 = node.send('vt:c/1', 'inc', { id: 'b' });
    await until(() => storage.inFlight === 1, { timeoutMs: 5_000, what: 'storage.inFlight === 1', intervalMs: 2 });
    // The record is durable and its append held at the gate. The node learns of the write only
    // when the append resolves: sends or a next message that (wrongly) did not wait for it went
    // on microtasks right after the append began, long before the real write ended; a few more
    // turns of the loop let anything left of them run.
    await loopTurns();
    // the record is on disk, but nothing was sent and the second message did not start
    expect(out.sent).toHaveLength(0);
    expect(chart.calls).toBe(1);
    expect((await storage.inner.history('vt:c/1')).lastSeq).toBe(1);
    storage.closedGate = false;
    storage.release();
    expect(await p1).toBe('processed');
    expect(await p2).toBe('processed');
    await node.stop();
    await storage.close();
    expect(order).toEqual([
      'append-start vt:c/1 a',
      'append-done vt:c/1 a',
      'send vt:c/1#1.0',
      'append-start vt:c/1 b',
      'append-done vt:c/1 b',
    ]);
  });
});

describe('deduplication by message id', () => {
  it('processes an id once, also when delivered concurrently and after a restart', async () => {
    const dir = await tempDir();
    const chart = counterChart();
    let storage = await openJournal(dir, { shardCount: 4 });
    let node = Node.builder(storage).chart('vt:c/', chart).build();
    const results = await Promise.all([
      node.send('vt:c/1', 'inc', { id: 'x' }),
      node.send('vt:c/1', 'inc', { id: 'x' }),
    ]);
    expect(results.sort()).toEqual(['duplicate', 'processed']);
    expect(await node.send('vt:c/1', 'inc', { id: 'x' })).toBe('duplicate');
    await node.stop();
    await storage.close();
    storage = await openJournal(dir);
    node = Node.builder(storage).chart('vt:c/', chart).config({ snapshotEvery: 0 }).build();
    expect(await node.send('vt:c/1', 'inc', { id: 'x' })).toBe('duplicate');
    expect(await node.send('vt:c/1', 'inc', { id: 'y' })).toBe('processed');
    expect(stateOf<{ count: number }>(node, 'vt:c/1').count).toBe(2);
    await node.stop();
    await storage.close();
  });

  it('remembers the newest dedupWindow ids (a bounded set rebuilt from the journal)', async () => {
    const dir = await tempDir();
    const storage = await openJournal(dir, { shardCount: 1 });
    const node = Node.builder(storage).chart('vt:c/', counterChart()).config({ dedupWindow: 3 }).build();
    for (const id of ['a', 'b', 'c', 'd']) await node.send('vt:c/1', 'inc', { id });
    expect(await node.send('vt:c/1', 'inc', { id: 'b' })).toBe('duplicate');
    // 'a' fell out of the window: delivering it again counts again
    expect(await node.send('vt:c/1', 'inc', { id: 'a' })).toBe('processed');
    await node.stop();
    await storage.close();
  });
});

describe('error.communication', () => {
  it('reaches the sender as an ordinary journaled event with the send id and the reason', async () => {
    const dir = await tempDir();
    const storage = await openJournal(dir, { shardCount: 2 });
    const failing = probe('flaky', [], async (o) => {
      throw Object.assign(new Error(`peer of ${o.envelope.target} unreachable`), {});
    });
    const node = Node.builder(storage).chart('vt:c/', counterChart()).processor(failing).build();
    await node.send('vt:c/1', 'relay', { id: 'm1', data: { to: ['vt:far/1'], type: 'flaky' } });
    await node.send('vt:c/1', 'relay', { id: 'm2', data: { to: ['vt:far/2'], type: 'nowhere' } });
    await node.send('vt:c/1', 'relay', { id: 'm3', data: { to: ['vt:nochart/1'] } });
    await until(() => (stateOf<{ errors: unknown[] }>(node, 'vt:c/1').errors?.length ?? 0) === 3, {
      timeoutMs: 5_000,
      what: "(stateOf<{ errors: unknown[] }>(node, 'vt:c/1').errors?.length ?? 0...",
      intervalMs: 2,
    });
    const errors = stateOf<{ errors: Record<string, unknown>[] }>(node, 'vt:c/1').errors ?? [];
    expect(errors[0]).toEqual({
      reason: 'peer of vt:far/1 unreachable',
      target: 'vt:far/1',
      event: 'inc',
      sendid: 'r0',
    });
    expect(errors[1]).toMatchObject({ sendid: 'r0', code: 'PLX_RUNTIME_NO_PROCESSOR', target: 'vt:far/2' });
    expect(errors[2]).toMatchObject({ sendid: 'r0', code: 'PLX_RUNTIME_NO_CHART', target: 'vt:nochart/1' });
    expect(node.stats.communicationErrors).toBe(3);
    const h = await storage.history('vt:c/1');
    const errs = h.records.filter((r) => r.event.name === 'error.communication');
    // the error event's message id is the failed send's id (`<sender>#<seq>.<index>`) plus `!error`
    expect(errs).toHaveLength(3);
    for (const r of errs) expect(r.messageId).toMatch(/^vt:c\/1#\d+\.0!error$/);
    const relays = h.records.filter((r) => r.event.name === 'relay').map((r) => `vt:c/1#${r.seq}.0!error`);
    expect(errs.map((r) => r.messageId)).toEqual(relays);
    expect(errs[0]?.event).toMatchObject({ sendid: 'r0', origintype: 'flaky' });
    await node.stop();
    await storage.close();
  });
});

describe('mailbox bound', () => {
  it('refuses past mailboxBound with PLX_RUNTIME_MAILBOX_FULL, or waits with whenFull: wait', async () => {
    const dir = await tempDir();
    const storage = new GatedJournal(await openJournal(dir, { shardCount: 1 }));
    const node = Node.builder(storage).chart('vt:c/', counterChart()).config({ mailboxBound: 3 }).build();
    storage.closedGate = true;
    const first = node.send('vt:c/1', 'inc', { id: 'm0' });
    await until(() => storage.inFlight === 1, { timeoutMs: 5_000, what: 'storage.inFlight === 1', intervalMs: 2 });
    const queued = [1, 2, 3].map((i) => node.send('vt:c/1', 'inc', { id: `m${i}` }));
    const refused = await rejection(node.send('vt:c/1', 'inc', { id: 'm4' }));
    expect(refused.code).toBe('PLX_RUNTIME_MAILBOX_FULL');
    expect(refused.details).toMatchObject({ target: 'vt:c/1', bound: 3 });
    let waited = false;
    const waiting = node.send('vt:c/1', 'inc', { id: 'm5', whenFull: 'wait' }).then((r) => {
      waited = true;
      return r;
    });
    // A send that (wrongly) did not wait would be taken or refused on the microtasks of this
    // call; the mailbox's first macrostep is held at the gate, so nothing frees room meanwhile.
    await loopTurns();
    expect(waited).toBe(false);
    storage.closedGate = false;
    storage.release();
    expect(await first).toBe('processed');
    expect(await Promise.all(queued)).toEqual(['processed', 'processed', 'processed']);
    expect(await waiting).toBe('processed');
    expect(stateOf<{ count: number; seen: string[] }>(node, 'vt:c/1')).toMatchObject({
      count: 5,
      seen: ['m0', 'm1', 'm2', 'm3', 'm5'],
    });
    await node.stop();
    await storage.close();
  });
});

describe('a chart that throws', () => {
  it('consumes the event without a state change and rejects with PLX_RUNTIME_CHART_FAILED', async () => {
    const dir = await tempDir();
    const storage = await openJournal(dir, { shardCount: 1 });
    const node = Node.builder(storage).chart('vt:c/', counterChart()).build();
    await node.send('vt:c/1', 'inc', { id: 'a' });
    const e = await rejection(node.send('vt:c/1', 'boom', { id: 'b' }));
    expect(e.code).toBe('PLX_RUNTIME_CHART_FAILED');
    expect(await node.send('vt:c/1', 'boom', { id: 'b' })).toBe('duplicate');
    expect(node.activation('vt:c/1')?.currentState).toEqual({ count: 1, seen: ['a'], errors: [] });
    await node.stop();
    await storage.close();
  });

  it('refuses bad input before it reaches an actor', async () => {
    const storage = await openJournal(await tempDir(), { shardCount: 1 });
    const node = Node.builder(storage).chart('vt:c/', counterChart()).build();
    expect((await rejection(node.send('', 'inc'))).code).toBe('PLX_RUNTIME_BAD_INPUT');
    expect((await rejection(node.send('vt:c/1', 'inc', { id: '' }))).code).toBe('PLX_RUNTIME_BAD_INPUT');
    expect((await rejection(node.send('vt:c/1', 'inc', { data: 1n as never }))).code).toBe('PLX_RUNTIME_BAD_INPUT');
    expect((await rejection(node.send('vt:none/1', 'inc'))).code).toBe('PLX_RUNTIME_NO_CHART');
    expect(node.activeCount).toBe(0);
    await node.stop();
    expect((await rejection(node.send('vt:c/1', 'inc'))).code).toBe('PLX_RUNTIME_STOPPED');
    await storage.close();
  });
});

describe('group commit across the actors of one shard', () => {
  it('lets 16 actors of one shard share fsyncs', async () => {
    const dir = await tempDir();
    let syncs = 0;
    const storage = await openJournal(dir, { shardCount: 1, log: { fsync: 'batch', onSync: () => syncs++ } });
    const node = Node.builder(storage).chart('vt:c/', counterChart()).build();
    const rounds = 20;
    await Promise.all(
      Array.from({ length: 16 }, async (_, a) => {
        for (let i = 0; i < rounds; i++) await node.send(`vt:c/${a}`, 'inc', { id: `${a}-${i}` });
      }),
    );
    const macrosteps = 16 * rounds;
    await node.stop();
    await storage.close();
    // one fsync per append would be 320; shared fsyncs make far fewer
    expect(syncs).toBeGreaterThan(0);
    expect(syncs).toBeLessThan(macrosteps / 4);
  });
});

describe('ask', () => {
  it('waits for the reply a chart sends to the origin', async () => {
    const storage = await openJournal(await tempDir(), { shardCount: 1 });
    const node = Node.builder(storage).chart('vt:c/', counterChart()).build();
    await node.send('vt:c/1', 'inc', { data: { by: 41 } });
    const reply = await node.ask('vt:c/1', 'reply');
    expect(reply).toMatchObject({ name: 'answer', data: 41, origin: 'vt:c/1' });
    await node.stop();
    await storage.close();
  });
});
