/** The receiver's id table against a deliberately simple model (a Set and an array). */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ID_DONE, ID_PENDING, IdTable } from '../../ts/net/id-table.js';
import { ADMIT_DUPLICATE, ADMIT_WAIT, Receiver } from '../../ts/net/receiver.js';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

describe('IdTable', () => {
  it('fuzz: finds exactly what a model remembers (pending always, the newest `capacity` done ids)', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('add' as const), id: fc.nat({ max: 300 }) }),
      fc.record({ kind: fc.constant('done' as const), pick: fc.nat() }),
      fc.record({ kind: fc.constant('refuse' as const), pick: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 40 }), fc.array(op, { maxLength: 400 }), (capacity, ops) => {
        const t = new IdTable(capacity);
        // Ids from a small space so that repeats happen; spread over all 16 bytes.
        const idOf = (n: number) => {
          const b = new Uint8Array(20);
          for (let i = 0; i < 16; i++) b[2 + i] = (n * (i + 7) * 2654435761) >>> (i % 24);
          return b;
        };
        const pending = new Map<string, number>();
        const done: string[] = [];
        for (const o of ops) {
          if (o.kind === 'add') {
            const b = idOf(o.id);
            const k = hex(b.subarray(2, 18));
            const slot = t.find(b, 2);
            if (pending.has(k)) expect(t.state(slot)).toBe(ID_PENDING);
            else if (done.includes(k)) expect(t.state(slot)).toBe(ID_DONE);
            else {
              expect(slot).toBe(-1);
              pending.set(k, t.addPending(b, 2));
            }
          } else if (pending.size > 0) {
            const keys = [...pending.keys()];
            const k = keys[o.pick % keys.length]!;
            const slot = pending.get(k)!;
            pending.delete(k);
            if (o.kind === 'refuse') t.remove(slot);
            else {
              t.markDone(slot);
              done.push(k);
              if (done.length > capacity) done.shift();
            }
          }
        }
        expect(t.size).toBe(done.length);
        for (let n = 0; n <= 300; n++) {
          const b = idOf(n);
          const k = hex(b.subarray(2, 18));
          const slot = t.find(b, 2);
          if (pending.has(k)) expect(slot).toBe(pending.get(k));
          else if (done.includes(k)) expect(t.state(slot)).toBe(ID_DONE);
          else expect(slot).toBe(-1);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('holds 65 536 done ids and forgets the oldest first', () => {
    const t = new IdTable(65_536);
    const id = new Uint8Array(16);
    const dv = new DataView(id.buffer);
    for (let i = 0; i < 70_000; i++) {
      dv.setUint32(4, i, true);
      t.markDone(t.addPending(id, 0));
    }
    expect(t.size).toBe(65_536);
    dv.setUint32(4, 70_000 - 65_536 - 1, true);
    expect(t.find(id, 0)).toBe(-1);
    dv.setUint32(4, 70_000 - 65_536, true);
    expect(t.state(t.find(id, 0))).toBe(ID_DONE);
  });
});

describe('Receiver', () => {
  it('lets one copy of an id in; a second copy waits for it; a refused id may come again', async () => {
    const r = new Receiver(8);
    const id = new Uint8Array(16).fill(3);
    const slot = r.admit(id, 0);
    expect(slot).toBeGreaterThanOrEqual(0);
    expect(r.admit(id, 0)).toBe(ADMIT_WAIT);
    const second = r.outcomeOf(id, 0);
    expect(r.finish(slot, 'stored')).toBe(0);
    expect(await second).toBe(1); // duplicate
    expect(r.admit(id, 0)).toBe(ADMIT_DUPLICATE);
    const other = new Uint8Array(16).fill(4);
    const s2 = r.admit(other, 0);
    const waiting = r.outcomeOf(other, 0);
    expect(r.finish(s2, 'refused')).toBe(3);
    expect(await waiting).toBe(3);
    expect(r.admit(other, 0)).toBeGreaterThanOrEqual(0);
  });
});
