/**
 * The runtime's side of the pipelined receive path: `taken` tells a transport when a message
 * holds its place in a mailbox (so the transport may read its stream's next frame), the
 * macrosteps of many actors of one shard then share the shard's appends (group commit on
 * real files), no send leaves before its macrostep is durable, and a crash between the
 * durable append and the send loses nothing: the next activation sends it again.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { shardOf } from '../../ts/core/index.js';
import { memoryJournal, Node, openJournal } from '../../ts/runtime/index.js';
import type { FileLog } from '../../ts/storage/index.js';
import { until } from '../helpers/until.js';
import { cleanup, counterChart, GatedJournal, probe, tempDir } from './helpers.js';

afterAll(cleanup);

describe('taken: a message holds its place in a mailbox', () => {
  it('is told on entry to the mailbox; a message parked behind a full mailbox is told when it moves in', async () => {
    const journal = new GatedJournal(memoryJournal(4));
    journal.closedGate = true;
    const node = Node.builder(journal).chart('vt:c/', counterChart()).config({ mailboxBound: 2, idleAfter: 0 }).build();
    const taken: number[] = [];
    const done: number[] = [];
    const sends = [1, 2, 3, 4].map((i) =>
      node
        .send('vt:c/1', 'inc', { id: `m${i}`, whenFull: 'wait', taken: () => taken.push(i) })
        .then(() => done.push(i)),
    );
    // m1 runs its macrostep (its append held), m2 and m3 fill the mailbox, m4 is parked.
    await until(() => journal.inFlight === 1, { timeoutMs: 2000, what: 'the first append', intervalMs: 2 });
    expect(taken).toEqual([1, 2, 3]);
    expect(done).toEqual([]);
    journal.release();
    await until(() => taken.length === 4, { timeoutMs: 2000, what: 'm4 to enter', intervalMs: 2 });
    expect(taken).toEqual([1, 2, 3, 4]);
    await until(
      () => {
        journal.release();
        return done.length === 4;
      },
      { timeoutMs: 5_000, what: 'the four macrosteps done', intervalMs: 2 },
    );
    await Promise.all(sends);
    expect(done).toEqual([1, 2, 3, 4]);
    await node.stop();
  });
});

describe('the macrosteps of one shard share appends (real files)', () => {
  it('group-commits concurrent macrosteps, sends nothing before durable, and resends after a crash between append and send', async () => {
    const dir = await tempDir();
    const SHARDS = 4;
    const actors: string[] = [];
    for (let i = 0; actors.length < 12; i++) if (shardOf(`vt:c/${i}`, SHARDS) === 1) actors.push(`vt:c/${i}`);
    const inner = await openJournal(dir, { shardCount: SHARDS, log: { fsync: 'batch' } });
    const journal = new GatedJournal(inner);
    const out = probe('out');
    const node = Node.builder(journal)
      .chart('vt:c/', counterChart())
      .processor(out)
      .config({ idleAfter: 0, snapshotEvery: 0 })
      .build();
    const relay = (iri: string, n: number) =>
      node.send(iri, 'relay', { id: `${iri}/relay${n}`, data: { to: [`x:sink/${n}`], type: 'out' } });

    // Phase 1: every append is durable and then held; nothing has been sent.
    journal.closedGate = true;
    const first = actors.map((iri) => relay(iri, 1));
    await until(() => journal.inFlight === actors.length, {
      timeoutMs: 5000,
      what: 'every append of phase 1',
      intervalMs: 2,
    });
    expect(out.sent).toEqual([]);
    const log = (await inner.openShards()).get(1) as FileLog;
    const stats = log.stats;
    expect(stats.appends).toBe(actors.length);
    expect(stats.writes).toBeLessThan(actors.length);
    journal.closedGate = false;
    journal.release();
    expect(await Promise.all(first)).toEqual(actors.map(() => 'processed'));
    await until(() => out.sent.length === actors.length, { timeoutMs: 2000, what: 'phase 1 sends', intervalMs: 2 });
    expect(new Set(out.sent.map((o) => o.envelope.id))).toEqual(new Set(actors.map((iri) => `${iri}#1.0`)));

    // Phase 2: durable, then the process "crashes" before any send leaves.
    journal.closedGate = true;
    const second = actors.map((iri) => relay(iri, 2));
    let acknowledged = 0;
    for (const p of second) void p.then(() => acknowledged++);
    await until(() => journal.inFlight === actors.length, {
      timeoutMs: 5000,
      what: 'every append of phase 2',
      intervalMs: 2,
    });
    expect(out.sent.length).toBe(actors.length);
    expect(acknowledged).toBe(0);
    await inner.close();

    // Recovery: the journal shows the phase-2 sends as not completed; activations send them again.
    const again = await openJournal(dir);
    const out2 = probe('out');
    const node2 = Node.builder(again)
      .chart('vt:c/', counterChart())
      .processor(out2)
      .config({ idleAfter: 0, snapshotEvery: 0 })
      .build();
    for (const iri of actors) expect(await node2.send(iri, 'inc', { id: `${iri}/wake` })).toBe('processed');
    await until(() => out2.sent.length >= actors.length, { timeoutMs: 2000, what: 'the resent sends', intervalMs: 2 });
    expect(new Set(out2.sent.map((o) => o.envelope.id))).toEqual(new Set(actors.map((iri) => `${iri}#2.0`)));
    for (const iri of actors) {
      const h = await again.history(iri);
      expect(h.records.map((r) => r.messageId)).toEqual([`${iri}/relay1`, `${iri}/relay2`, `${iri}/wake`]);
    }
    await node2.stop();
    await again.close();
  });
});
