/**
 * The compliance suite of the JournalStorage seam (ts/runtime/types.ts). Every
 * implementation (the log-engine one on files and in memory, and a cluster's) runs it
 * with a factory that makes fresh, empty storage; `open` opens the journal on it (again
 * after a `close`, as a restarted process would) and `teardown` removes it.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { shardOf } from '../../ts/core/index.js';
import type { JournalStorage, MacrostepEntry, SnapshotEntry } from '../../ts/runtime/types.js';
import { refusal } from '../helpers/refusal.js';

export interface JournalStorageHarness {
  open(): Promise<JournalStorage>;
  teardown(): Promise<void>;
}

export type JournalStorageFactory = () => Promise<JournalStorageHarness>;

function step(seq: number, extra: Partial<MacrostepEntry> = {}): MacrostepEntry {
  return {
    seq,
    time: 1_700_000_000_000 + seq,
    dispatchedThrough: seq - 1,
    messageId: `m${seq}`,
    event: { name: 'inc', data: { n: seq }, origin: 'vt:x/1' },
    state: { count: seq },
    sends: [{ id: `s${seq}`, target: 'vt:other/1', event: 'ping', data: [seq] }],
    ...extra,
  };
}

/** Two IRIs of the same shard and one of another shard (when there is more than one shard). */
function irisFor(shardCount: number): { a: string; b: string; other: string } {
  const a = 'vt:orders/1';
  const s = shardOf(a, shardCount);
  let b = '';
  let other = '';
  for (let i = 2; b === '' || (other === '' && shardCount > 1); i++) {
    const iri = `vt:orders/${i}`;
    if (shardOf(iri, shardCount) === s) {
      if (b === '') b = iri;
    } else if (other === '') other = iri;
  }
  return { a, b, other };
}

export function journalStorageSuite(name: string, factory: JournalStorageFactory): void {
  describe(`JournalStorage compliance: ${name}`, () => {
    let harness: JournalStorageHarness;
    let j: JournalStorage | undefined;
    const open = async () => {
      j = await harness.open();
      return j;
    };
    const reopen = async () => {
      await j?.close();
      return open();
    };

    beforeEach(async () => {
      harness = await factory();
    });
    afterEach(async () => {
      await j?.close();
      j = undefined;
      await harness.teardown();
    });

    it('has a power-of-two shard count and an empty history for an actor never written', async () => {
      const s = await open();
      expect(Number.isInteger(s.shardCount) && s.shardCount >= 1).toBe(true);
      expect(s.shardCount & (s.shardCount - 1)).toBe(0);
      expect(await s.history('vt:never/1')).toEqual({ records: [], lastSeq: 0 });
    });

    it('returns appended macrosteps in order with every field, also after reopen', async () => {
      const s = await open();
      for (let i = 1; i <= 3; i++) await s.append('vt:orders/1', step(i), { expectedSeq: i - 1 });
      await s.append('vt:orders/1', step(4, { state: undefined, sends: [] }), { expectedSeq: 3 });
      const want = [step(1), step(2), step(3), step(4, { state: undefined, sends: [] })].map((e) => {
        const { state, ...rest } = e;
        return state === undefined ? rest : e;
      });
      const h = await s.history('vt:orders/1');
      expect(h.lastSeq).toBe(4);
      expect(h.snapshot).toBeUndefined();
      expect(h.records).toEqual(want);
      const again = await (await reopen()).history('vt:orders/1');
      expect(again.records).toEqual(want);
      expect(again.lastSeq).toBe(4);
    });

    it('refuses an append whose expected actor position is not the current one, writing nothing', async () => {
      const s = await open();
      await s.append('vt:orders/1', step(1), { expectedSeq: 0 });
      const e1 = await refusal(s.append('vt:orders/1', step(1), { expectedSeq: 0 }));
      expect(e1.code).toBe('PLX_JOURNAL_CONFLICT');
      expect(e1.details.actual).toBe(1);
      const e2 = await refusal(s.append('vt:orders/1', step(3), { expectedSeq: 1 }));
      expect(e2.code).toBe('PLX_JOURNAL_CONFLICT');
      expect((await s.history('vt:orders/1')).records.map((r) => r.seq)).toEqual([1]);
      expect((await (await reopen()).history('vt:orders/1')).lastSeq).toBe(1);
    });

    it('counts appends in flight in the compare-and-set, so a writer can pipeline', async () => {
      const s = await open();
      const p1 = s.append('vt:orders/1', step(1), { expectedSeq: 0 });
      const p2 = s.append('vt:orders/1', step(2), { expectedSeq: 1 });
      const p3 = refusal(s.append('vt:orders/1', step(2), { expectedSeq: 1 }));
      await Promise.all([p1, p2]);
      expect((await p3).code).toBe('PLX_JOURNAL_CONFLICT');
      expect((await s.history('vt:orders/1')).records.map((r) => r.messageId)).toEqual(['m1', 'm2']);
    });

    it('keeps the actors of one shard apart', async () => {
      const s = await open();
      const { a, b } = irisFor(s.shardCount);
      await Promise.all([
        s.append(a, step(1), { expectedSeq: 0 }),
        s.append(b, step(1, { messageId: 'b1' }), { expectedSeq: 0 }),
      ]);
      await s.append(b, step(2, { messageId: 'b2' }), { expectedSeq: 1 });
      expect((await s.history(a)).records.map((r) => r.messageId)).toEqual(['m1']);
      expect((await s.history(b)).records.map((r) => r.messageId)).toEqual(['b1', 'b2']);
    });

    it('starts history at the newest snapshot, also after reopen', async () => {
      const s = await open();
      for (let i = 1; i <= 3; i++) await s.append('vt:orders/1', step(i), { expectedSeq: i - 1 });
      const snap: SnapshotEntry = {
        seq: 3,
        time: 5,
        dispatchedThrough: 2,
        state: { count: 3 },
        dedup: ['m1', 'm2', 'm3'],
        pending: [{ seq: 3, index: 0, send: { target: 'vt:other/1', event: 'ping', data: [3] } }],
      };
      const wrong = await refusal(s.snapshot('vt:orders/1', { ...snap, seq: 2 }));
      expect(wrong.code).toBe('PLX_JOURNAL_CONFLICT');
      await s.snapshot('vt:orders/1', snap);
      await s.append('vt:orders/1', step(4), { expectedSeq: 3 });
      for (const again of [false, true]) {
        const store = again ? await reopen() : s;
        const h = await store.history('vt:orders/1');
        expect(h.snapshot).toEqual(snap);
        expect(h.records.map((r) => r.seq)).toEqual([4]);
        expect(h.lastSeq).toBe(4);
      }
    });

    it('fences an append whose epoch is below one its shard accepted, per shard', async () => {
      const s = await open();
      const { a, b, other } = irisFor(s.shardCount);
      await s.append(a, step(1), { expectedSeq: 0, epoch: 7n });
      const e = await refusal(s.append(b, step(1), { expectedSeq: 0, epoch: 6n }));
      expect(e.code).toBe('PLX_JOURNAL_FENCED');
      await s.append(b, step(1), { expectedSeq: 0, epoch: 7n });
      const e2 = await refusal(
        s.snapshot(a, { seq: 1, time: 0, dispatchedThrough: 1, state: 1, dedup: [], pending: [] }, { epoch: 3n }),
      );
      expect(e2.code).toBe('PLX_JOURNAL_FENCED');
      if (other !== '') await s.append(other, step(1), { expectedSeq: 0, epoch: 1n });
      const again = await reopen();
      expect((await refusal(again.append(a, step(2), { expectedSeq: 1, epoch: 6n }))).code).toBe('PLX_JOURNAL_FENCED');
      expect((await again.history(b)).lastSeq).toBe(1);
    });

    it('refuses calls after close with PLX_JOURNAL_CLOSED', async () => {
      const s = await open();
      await s.append('vt:orders/1', step(1), { expectedSeq: 0 });
      await s.close();
      j = undefined;
      expect((await refusal(s.history('vt:orders/1'))).code).toBe('PLX_JOURNAL_CLOSED');
      expect((await refusal(s.append('vt:orders/1', step(2), { expectedSeq: 1 }))).code).toBe('PLX_JOURNAL_CLOSED');
    });
  });
}
