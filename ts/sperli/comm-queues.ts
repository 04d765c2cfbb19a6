/**
 * The receiving side of a communicator: a FIFO of frames per peer for one kind of frame
 * (COLLECTIVE, or the checkpoint types), and the mailbox that reassembles DATA messages
 * and matches them to receives by (source, tag). Both are plain state with promises; no
 * I/O. docs/sperli-comm.md states the rules.
 */

import { MAX_PAYLOAD } from '../codec/sperli-frame.js';
import type { PlexusError } from '../core/errors.js';
import type { Spinner } from './spin.js';

/** Matches a message from any rank in `recv` and `irecv`. */
export const ANY_SOURCE = -1;
/** Matches a message of any tag in `recv` and `irecv`. */
export const ANY_TAG = -1;

/** One DATA message as a receive returns it. */
export interface Message {
  readonly source: number;
  readonly tag: number;
  readonly data: Uint8Array;
}

interface Waiter<T> {
  resolve(value: T): void;
  reject(error: PlexusError): void;
}

/**
 * A consumer that takes the next item in the call that brings it (`FrameQueue.wait`):
 * no promise between the arrival and the consumer.
 */
export interface Taker<T> {
  /** The next item, handed over synchronously by `push`. */
  item(item: T): void;
  /** The queue failed (the job has failed or ended). */
  fail(error: PlexusError): void;
}

/**
 * Items of one peer in arrival order, taken by one consumer at a time (the callers keep
 * to that: collectives run one after another).
 */
export class FrameQueue<T> {
  private items: T[] = [];
  private head = 0;
  private waiter: Waiter<T> | undefined;
  private taker: Taker<T> | undefined;
  private readonly spinner: Spinner | undefined;

  /** A queue; with `spinner`, the event loop is kept polling while its consumer waits. */
  constructor(spinner?: Spinner) {
    this.spinner = spinner;
  }

  push(item: T): void {
    const t = this.taker;
    if (t !== undefined) {
      this.taker = undefined;
      this.spinner?.release();
      t.item(item);
      return;
    }
    const w = this.waiter;
    if (w !== undefined) {
      this.waiter = undefined;
      this.spinner?.release();
      w.resolve(item);
      return;
    }
    this.items.push(item);
  }

  /** The next item if one is queued (taken), else undefined. */
  poll(): T | undefined {
    if (this.head === this.items.length) return undefined;
    const item = this.items[this.head] as T;
    this.items[this.head] = undefined as T;
    this.head++;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    }
    return item;
  }

  /**
   * Hands the next item to `taker` when it arrives (call it only when `poll` found none);
   * with `stopped` (the job has failed or ended), fails it at once.
   */
  wait(taker: Taker<T>, stopped: PlexusError | undefined): void {
    if (stopped !== undefined) taker.fail(stopped);
    else {
      this.taker = taker;
      this.spinner?.hold();
    }
  }

  /** Puts back an item taken by `poll` or a taker, to be the next one again. */
  unshift(item: T): void {
    if (this.head > 0) this.items[--this.head] = item;
    else this.items.unshift(item);
  }

  /** The next item; rejects with `stopped` when given (the job has failed or ended). */
  next(stopped: PlexusError | undefined): Promise<T> {
    if (this.head < this.items.length) return Promise.resolve(this.poll() as T);
    if (stopped !== undefined) return Promise.reject(stopped);
    this.spinner?.hold();
    return new Promise<T>((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /** Whether a consumer waits for the next item (none is queued). */
  get waiting(): boolean {
    return this.waiter !== undefined || this.taker !== undefined;
  }

  /** Rejects the waiting consumer and drops what is queued. */
  fail(error: PlexusError): void {
    this.items = [];
    this.head = 0;
    const w = this.waiter;
    this.waiter = undefined;
    if (w !== undefined) this.spinner?.release();
    w?.reject(error);
    const t = this.taker;
    this.taker = undefined;
    if (t !== undefined) this.spinner?.release();
    t?.fail(error);
  }
}

interface Posted extends Waiter<Message> {
  readonly source: number;
  readonly tag: number;
  /** The receive holds the spinner (it waits for a peer, not for this rank itself). */
  readonly held: boolean;
}

function matches(source: number, tag: number, m: Message): boolean {
  return (source === ANY_SOURCE || source === m.source) && (tag === ANY_TAG || tag === m.tag);
}

/**
 * DATA messages of every peer. A message becomes available when its last frame has
 * arrived (docs/sperli.md, "Messages larger than one frame"); frames are gathered per
 * (source, tag). Arrived messages wait in arrival order; receives wait in the order
 * they were posted. An arriving message goes to the first posted receive it matches; a
 * new receive takes the first arrived message it matches.
 */
export class Mailbox {
  private readonly arrived: Message[] = [];
  private readonly posted: Posted[] = [];
  /** Full frames of messages still open, by source, then tag. */
  private readonly partial = new Map<number, Map<number, Uint8Array[]>>();
  private readonly spinner: Spinner | undefined;
  private readonly self: number | undefined;

  /**
   * A mailbox; with `spinner`, the event loop is kept polling while a receive waits.
   * A receive from `self` (this rank) alone waits for this rank's own send, not for a
   * peer: it does not hold the spinner.
   */
  constructor(spinner?: Spinner, self?: number) {
    this.spinner = spinner;
    this.self = self;
  }

  /**
   * The source of the first posted receive that waits for `peer` (a receive from
   * ANY_SOURCE too, with `any`), or undefined when none does.
   */
  waitsFor(peer: number, any: boolean): number | undefined {
    for (const p of this.posted) if (p.source === peer || (any && p.source === ANY_SOURCE)) return p.source;
    return undefined;
  }

  /** One DATA frame from `source`. */
  frame(source: number, tag: number, payload: Uint8Array): void {
    let bySource = this.partial.get(source);
    const open = bySource?.get(tag);
    if (payload.length === MAX_PAYLOAD) {
      if (open !== undefined) open.push(payload);
      else {
        if (bySource === undefined) {
          bySource = new Map();
          this.partial.set(source, bySource);
        }
        bySource.set(tag, [payload]);
      }
      return;
    }
    if (open === undefined) {
      this.deliver({ source, tag, data: payload });
      return;
    }
    bySource?.delete(tag);
    if (bySource?.size === 0) this.partial.delete(source);
    open.push(payload);
    let total = 0;
    for (const p of open) total += p.length;
    const data = new Uint8Array(total);
    let at = 0;
    for (const p of open) {
      data.set(p, at);
      at += p.length;
    }
    this.deliver({ source, tag, data });
  }

  /** A whole message (from the network, or sent to self). */
  deliver(m: Message): void {
    const i = this.posted.findIndex((p) => matches(p.source, p.tag, m));
    if (i < 0) {
      this.arrived.push(m);
      return;
    }
    const p = this.posted[i] as Posted;
    this.posted.splice(i, 1);
    if (p.held) this.spinner?.release();
    p.resolve(m);
  }

  /** The first arrived message from `source` with `tag` (either may be ANY_*), or a wait for one. */
  take(source: number, tag: number, stopped: PlexusError | undefined): Promise<Message> {
    const i = this.arrived.findIndex((m) => matches(source, tag, m));
    if (i >= 0) {
      const m = this.arrived[i] as Message;
      this.arrived.splice(i, 1);
      return Promise.resolve(m);
    }
    if (stopped !== undefined) return Promise.reject(stopped);
    const held = source !== this.self;
    if (held) this.spinner?.hold();
    return new Promise<Message>((resolve, reject) => {
      this.posted.push({ source, tag, resolve, reject, held });
    });
  }

  /** Rejects every posted receive; arrived messages stay for nobody. */
  fail(error: PlexusError): void {
    const waiting = this.posted.splice(0);
    this.arrived.length = 0;
    this.partial.clear();
    for (const p of waiting) {
      if (p.held) this.spinner?.release();
      p.reject(error);
    }
  }
}
