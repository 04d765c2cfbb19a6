/**
 * The receive side shared by every wire: drops repeats by message id (a bounded cache of
 * `dedupCapacity` ids, oldest forgotten first), lets one copy of an id in at a time, and turns
 * the frame handler's answer into an ACK status.
 */
import { AckStatus, type AckStatusCode, type ClusterFrame } from '../codec/cluster-frame.js';
import { ID_DONE, IdTable } from './id-table.js';
import type { FrameHandler } from './types.js';

/**
 * A bounded cache of string ids, oldest forgotten first. The wires remember ids in an
 * `IdTable` (typed arrays, no string per id); this stays for callers that key by string.
 */
export class DedupCache {
  private readonly ids = new Set<string>();
  /** The ids in insertion order, as a ring: the oldest is forgotten first. */
  private readonly ring: (string | undefined)[];
  private next = 0;

  constructor(readonly capacity: number) {
    this.ring = new Array(capacity);
  }

  has(id: string): boolean {
    return this.ids.has(id);
  }

  add(id: string): void {
    if (this.capacity === 0 || this.ids.has(id)) return;
    const oldest = this.ring[this.next];
    if (oldest !== undefined) this.ids.delete(oldest);
    this.ring[this.next] = id;
    this.next = (this.next + 1) % this.capacity;
    this.ids.add(id);
  }

  get size(): number {
    return this.ids.size;
  }
}

/** A message id as a map key (16 bytes as 16 latin-1 characters). */
export function idKey(id: Uint8Array): string {
  return String.fromCharCode(
    id[0]!,
    id[1]!,
    id[2]!,
    id[3]!,
    id[4]!,
    id[5]!,
    id[6]!,
    id[7]!,
    id[8]!,
    id[9]!,
    id[10]!,
    id[11]!,
    id[12]!,
    id[13]!,
    id[14]!,
    id[15]!,
  );
}

/** `Receiver.admit` verdicts that are not a slot. */
export const ADMIT_DUPLICATE = -1;
export const ADMIT_WAIT = -2;

export class Receiver {
  /** Stored ids, and ids being stored. */
  readonly ids: IdTable;
  private handler: FrameHandler = async () => 'refused';
  /** Per pending slot: the outcome a second copy of its id waits for (made on demand). */
  private readonly waiters = new Map<
    number,
    { promise: Promise<AckStatusCode>; resolve: (s: AckStatusCode) => void }
  >();

  constructor(dedupCapacity: number) {
    this.ids = new IdTable(dedupCapacity);
  }

  setHandler(h: FrameHandler): void {
    this.handler = h;
  }

  /** Second copies of an id waiting for the first copy's outcome (for tools and tests). */
  get copiesWaiting(): number {
    return this.waiters.size;
  }

  /** The frame handler (for wires that call it themselves after `admit`). */
  get frameHandler(): FrameHandler {
    return this.handler;
  }

  /**
   * Looks the id at bytes[at, at + 16) up: ADMIT_DUPLICATE when it was stored, ADMIT_WAIT when
   * a copy is being stored (`outcomeOf` gives the outcome), else a new pending slot that
   * `finish` must settle.
   */
  admit(bytes: Uint8Array, at: number): number {
    const slot = this.ids.find(bytes, at);
    if (slot < 0) return this.ids.addPending(bytes, at);
    return this.ids.state(slot) === ID_DONE ? ADMIT_DUPLICATE : ADMIT_WAIT;
  }

  /** For ADMIT_WAIT: the ACK status a second copy gets once the first is settled. */
  outcomeOf(bytes: Uint8Array, at: number): Promise<AckStatusCode> {
    const slot = this.ids.find(bytes, at);
    if (slot < 0) return Promise.resolve(AckStatus.refused);
    if (this.ids.state(slot) === ID_DONE) return Promise.resolve(AckStatus.duplicate);
    let w = this.waiters.get(slot);
    if (!w) {
      let resolve!: (s: AckStatusCode) => void;
      const promise = new Promise<AckStatusCode>((r) => {
        resolve = r;
      });
      w = { promise, resolve };
      this.waiters.set(slot, w);
    }
    return w.promise.then((s) => (s === AckStatus.stored ? AckStatus.duplicate : s));
  }

  /** Settles a slot from `admit` with the handler's verdict (or its failure); the ACK status. */
  finish(slot: number, verdict: 'stored' | 'stale' | 'refused' | undefined): AckStatusCode {
    const status = verdict === undefined ? AckStatus.refused : (AckStatus[verdict] ?? AckStatus.refused);
    if (status === AckStatus.refused) this.ids.remove(slot);
    else this.ids.markDone(slot);
    if (this.waiters.size > 0) {
      const w = this.waiters.get(slot);
      if (w) {
        this.waiters.delete(slot);
        w.resolve(status);
      }
    }
    return status;
  }

  /** Handles one inbound DATA frame; resolves with the ACK status once it is stored or refused. */
  handle(from: string, frame: ClusterFrame): Promise<AckStatusCode> {
    const slot = this.admit(frame.messageId, 0);
    if (slot === ADMIT_DUPLICATE) return Promise.resolve(AckStatus.duplicate);
    if (slot === ADMIT_WAIT) return this.outcomeOf(frame.messageId, 0);
    let stored: Promise<'stored' | 'stale' | 'refused'>;
    try {
      stored = this.handler(from, frame);
    } catch {
      stored = Promise.resolve('refused');
    }
    return stored.then(
      (verdict) => this.finish(slot, verdict),
      () => this.finish(slot, undefined),
    );
  }
}
