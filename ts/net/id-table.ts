/**
 * IdTable: the receiver's memory of 16-byte message ids, without a string or an object per id.
 *
 * An id is `pending` while its frame is being stored and `done` once it was stored or
 * dead-lettered; the newest `capacity` done ids are remembered (oldest forgotten first), pending
 * ids always. Ids live in typed arrays (four u32 words per slot) found through an
 * open-addressing index with linear probing and backward-shift deletion. Ids are chosen by
 * senders, so the index hash mixes all 128 bits with per-table random seeds: a sender cannot
 * aim its ids at one probe chain.
 */
import { randomFillSync } from 'node:crypto';

export const ID_PENDING = 1;
export const ID_DONE = 2;

const EMPTY_SLOT = -1;

export class IdTable {
  /** Ids, four little-endian u32 words per slot. */
  private words: Uint32Array;
  /** 0 free, ID_PENDING, ID_DONE per slot. */
  private states: Uint8Array;
  /** Per slot: the index bucket that holds it (kept when entries move). */
  private buckets: Int32Array;
  /** Free slots, as a stack. */
  private free: Int32Array;
  private freeTop: number;
  /** Index: two words per bucket, slot + 1 (0 empty) and the id's hash (so probes and moves rarely read ids). */
  private index: Int32Array;
  private mask: number;
  /** Done slots in the order they became done (a ring of `capacity`). */
  private readonly order: Int32Array;
  private orderHead = 0;
  private orderSize = 0;
  private readonly seeds = new Uint32Array(4);
  private doneCount = 0;

  constructor(readonly capacity: number) {
    randomFillSync(this.seeds);
    this.order = new Int32Array(Math.max(1, capacity));
    const slots = Math.max(16, Math.min(capacity, 1024) + 16);
    this.words = new Uint32Array(slots * 4);
    this.states = new Uint8Array(slots);
    this.buckets = new Int32Array(slots);
    this.free = new Int32Array(slots);
    for (let i = 0; i < slots; i++) this.free[i] = slots - 1 - i;
    this.freeTop = slots;
    this.index = new Int32Array(2 * bucketsFor(slots));
    this.mask = this.index.length / 2 - 1;
  }

  /** Done ids remembered. */
  get size(): number {
    return this.doneCount;
  }

  private hash(w0: number, w1: number, w2: number, w3: number): number {
    const s = this.seeds;
    let h = Math.imul(w0 ^ s[0]!, 0x9e3779b1);
    h = Math.imul(h ^ (h >>> 15) ^ w1 ^ s[1]!, 0x85ebca77);
    h = Math.imul(h ^ (h >>> 13) ^ w2 ^ s[2]!, 0xc2b2ae3d);
    h = Math.imul(h ^ (h >>> 16) ^ w3 ^ s[3]!, 0x27d4eb2f);
    return (h ^ (h >>> 15)) | 0;
  }

  /** The slot holding the id at bytes[at, at + 16), or -1. */
  find(bytes: Uint8Array, at: number): number {
    const w0 = word(bytes, at);
    const w1 = word(bytes, at + 4);
    const w2 = word(bytes, at + 8);
    const w3 = word(bytes, at + 12);
    const words = this.words;
    const index = this.index;
    const mask = this.mask;
    const h = this.hash(w0, w1, w2, w3);
    for (let b = h & mask; ; b = (b + 1) & mask) {
      const e = index[2 * b]!;
      if (e === 0) return EMPTY_SLOT;
      if (index[2 * b + 1] !== h) continue;
      const k = (e - 1) * 4;
      if (words[k] === w0 && words[k + 1] === w1 && words[k + 2] === w2 && words[k + 3] === w3) return e - 1;
    }
  }

  /** ID_PENDING or ID_DONE. */
  state(slot: number): number {
    return this.states[slot]!;
  }

  /** Adds the id at bytes[at, at + 16) as pending (the caller checked it is absent); its slot. */
  addPending(bytes: Uint8Array, at: number): number {
    if (this.freeTop === 0) this.grow();
    const slot = this.free[--this.freeTop]!;
    const k = slot * 4;
    this.words[k] = word(bytes, at);
    this.words[k + 1] = word(bytes, at + 4);
    this.words[k + 2] = word(bytes, at + 8);
    this.words[k + 3] = word(bytes, at + 12);
    this.states[slot] = ID_PENDING;
    this.link(slot);
    return slot;
  }

  /** Marks a pending slot done: remembered until `capacity` newer ids push it out. */
  markDone(slot: number): void {
    if (this.capacity === 0) {
      this.remove(slot);
      return;
    }
    this.states[slot] = ID_DONE;
    this.doneCount++;
    if (this.orderSize === this.capacity) {
      const oldest = this.order[this.orderHead]!;
      this.order[this.orderHead] = slot;
      this.orderHead = (this.orderHead + 1) % this.capacity;
      this.doneCount--;
      this.remove(oldest);
    } else {
      this.order[(this.orderHead + this.orderSize) % this.capacity] = slot;
      this.orderSize++;
    }
  }

  /** Forgets a pending slot (its frame was refused, so a resend must be handled again). */
  remove(slot: number): void {
    this.unlink(slot);
    this.states[slot] = 0;
    this.free[this.freeTop++] = slot;
  }

  private link(slot: number): void {
    const k = slot * 4;
    const w = this.words;
    const h = this.hash(w[k]!, w[k + 1]!, w[k + 2]!, w[k + 3]!);
    const index = this.index;
    let b = h & this.mask;
    while (index[2 * b] !== 0) b = (b + 1) & this.mask;
    index[2 * b] = slot + 1;
    index[2 * b + 1] = h;
    this.buckets[slot] = b;
  }

  private unlink(slot: number): void {
    const index = this.index;
    const mask = this.mask;
    const buckets = this.buckets;
    // Backward-shift deletion: move later entries of the chain into the gap.
    let gap = buckets[slot]!;
    for (let j = (gap + 1) & mask; index[2 * j] !== 0; j = (j + 1) & mask) {
      const home = index[2 * j + 1]! & mask;
      // Move the entry into the gap unless its home lies in the cyclic range (gap, j].
      const inRange = gap <= j ? home > gap && home <= j : home > gap || home <= j;
      if (!inRange) {
        const e = index[2 * j]!;
        index[2 * gap] = e;
        index[2 * gap + 1] = index[2 * j + 1]!;
        buckets[e - 1] = gap;
        gap = j;
      }
    }
    index[2 * gap] = 0;
  }

  private grow(): void {
    const old = this.states.length;
    const slots = old * 2;
    const words = new Uint32Array(slots * 4);
    words.set(this.words);
    const states = new Uint8Array(slots);
    states.set(this.states);
    this.buckets = new Int32Array(slots);
    const free = new Int32Array(slots);
    let top = 0;
    for (let i = slots - 1; i >= old; i--) free[top++] = i;
    this.words = words;
    this.states = states;
    this.free = free;
    this.freeTop = top;
    this.index = new Int32Array(2 * bucketsFor(slots));
    this.mask = this.index.length / 2 - 1;
    for (let s = 0; s < old; s++) if (states[s] !== 0) this.link(s);
  }
}

/** Buckets for `slots` entries: a power of two at least twice as many. */
function bucketsFor(slots: number): number {
  let n = 16;
  while (n < slots * 2) n *= 2;
  return n;
}

function word(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}
