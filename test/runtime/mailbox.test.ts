/** The bounded mailbox and the dedup window, by themselves. */
import { describe, expect, it } from 'vitest';
import { DedupWindow, Mailbox } from '../../ts/runtime/index.js';

describe('Mailbox', () => {
  it('refuses past its bound, and parked items enter in order before anything offered later', () => {
    const m = new Mailbox<number>(2);
    expect(m.offer(1)).toBe(true);
    expect(m.offer(2)).toBe(true);
    expect(m.offer(3)).toBe(false);
    m.park(3);
    m.park(4);
    expect(m.waiting).toBe(2);
    expect(m.shift()).toBe(1);
    // a slot freed and went to the first parked item; a new offer must not overtake item 4
    expect(m.offer(5)).toBe(false);
    m.park(5);
    const out: number[] = [];
    for (let x = m.shift(); x !== undefined; x = m.shift()) out.push(x);
    expect(out).toEqual([2, 3, 4, 5]);
    expect(m.length + m.waiting).toBe(0);
    expect(m.offer(6)).toBe(true);
    m.park(7);
    m.park(8);
    expect(m.drain()).toEqual([6, 7, 8]);
  });

  it('keeps order over many items (compaction of its array)', () => {
    const m = new Mailbox<number>(5000);
    for (let i = 0; i < 5000; i++) m.offer(i);
    for (let i = 0; i < 3000; i++) expect(m.shift()).toBe(i);
    for (let i = 5000; i < 8000; i++) m.offer(i);
    for (let i = 3000; i < 8000; i++) expect(m.shift()).toBe(i);
  });
});

describe('DedupWindow', () => {
  it('remembers the newest ids up to its capacity, oldest forgotten first', () => {
    const d = new DedupWindow(3, ['a', 'b']);
    d.add('c');
    d.add('d');
    expect(d.has('a')).toBe(false);
    expect(d.list()).toEqual(['b', 'c', 'd']);
    d.add('b'); // seen again: becomes the newest
    d.add('e');
    expect(d.list()).toEqual(['d', 'b', 'e']);
    expect(new DedupWindow(0, ['x']).size).toBe(0);
  });
});
