/**
 * The one apply path of the event store. Every committed change reaches the indexes
 * (state.ts), the live subscribers and the applied watermark here, in position order:
 * replay of the archive and the log when the store opens, a standalone store's own appends
 * and stream changes once the log made them durable, and in cluster mode every batch the
 * replicated log commits (the leader's own included).
 */

import { type Entry, followsInAppend, RecordKind, streamBytesOf } from '../codec/chronacta-record.js';
import type { PlexusError } from '../core/errors.js';
import { Watermark } from '../core/watermark.js';
import { fromStorage } from './errors.js';
import { decodeEntry } from './record.js';
import type { StoreState as State } from './state.js';
import { corrupt, type Decoded, decodePayload, toRecorded } from './store-log.js';
import type { RecordedEvent } from './types.js';

export type CommitListener = (ev: RecordedEvent, entry: Entry) => void;

/**
 * A batch this store encoded itself, so its entries need no decoding to be applied: the
 * events of one append, or one entry (a stream's metadata change).
 */
export type OwnBatch =
  | {
      readonly kind: 'append';
      readonly stream: string;
      readonly firstVersion: number;
      readonly count: number;
      readonly recordedMs: number;
      readonly idempotency: { readonly key: string; readonly fingerprint: Uint8Array } | undefined;
    }
  | { readonly kind: 'entry'; readonly entry: Entry };

export class ApplyPath {
  private readonly listeners = new Set<CommitListener>();
  /** The last applied position, raised as records are applied: what reads wait on instead of polling. */
  readonly applied: Watermark;

  constructor(private readonly state: State) {
    this.applied = new Watermark(BigInt(state.last));
  }

  /** Called with every durable, visible entry in position order; returns the unsubscribe. */
  onCommit(listener: CommitListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Replay while the store opens: one stored record, applied to the indexes (nobody listens yet). */
  replayed(d: Decoded): void {
    this.state.apply(d.entry, d.batchId);
  }

  /**
   * A batch this store appended, now durable in its own log (standalone): applied without
   * decoding, published, then handed to the listeners.
   */
  own(batch: OwnBatch, payloads: readonly Uint8Array[], first: number, batchId: Uint8Array): void {
    if (batch.kind === 'append') {
      this.state.applyAppend(
        batch.stream,
        batch.firstVersion,
        first,
        batch.count,
        batch.recordedMs,
        batchId,
        batch.idempotency,
      );
    } else this.state.apply(batch.entry, batchId);
    this.published();
    if (this.listeners.size > 0) {
      for (const p of payloads) {
        const e = decodeEntry(p);
        const ev = toRecorded(e, batchId);
        for (const l of this.listeners) {
          try {
            l(ev, e);
          } catch {
            // A listener's failure is its own; the commit stands.
          }
        }
      }
    }
  }

  /**
   * Cluster mode: every member, the leader included, applies each committed batch here once
   * it is in its local log, in position order; the leader's own appends resolve only after
   * this ran for them. Returns the failure that stops this member applying (a damaged or
   * out-of-order record), after `onFailure` heard of it.
   */
  committed(
    payloads: readonly Uint8Array[],
    first: number,
    batchId: Uint8Array,
    onFailure: (failure: PlexusError) => void,
  ): void {
    for (let i = 0; i < payloads.length; i++) {
      const payload = payloads[i] as Uint8Array;
      let d: Decoded;
      try {
        d = decodePayload(payload, first + i, batchId);
      } catch (e) {
        onFailure(fromStorage(e, 'applying a replicated record'));
        this.published();
        return;
      }
      const p = d.entry.position;
      if (p <= this.state.last) continue; // already applied while the indexes were rebuilt
      if (p !== this.state.last + 1) {
        onFailure(corrupt('replicated log', p, `expected position ${this.state.last + 1}`));
        this.published();
        return;
      }
      const e = d.entry;
      if (
        e.kind === RecordKind.EVENT &&
        e.indexInBatch === 0 &&
        e.batchSize > 1 &&
        i + e.batchSize <= payloads.length &&
        this.listeners.size === 0
      ) {
        // A whole append: the events after its first are checked from their headers and
        // indexed as one run, without decoding their strings.
        const name = streamBytesOf(payload);
        let n = 1;
        while (n < e.batchSize && followsInAppend(payloads[i + n] as Uint8Array, e, name, n)) n++;
        if (n === e.batchSize) {
          this.state.applyAppend(e.stream, e.version, p, n, e.recordedMs, d.batchId, e.idempotency);
          i += n - 1;
          continue;
        }
      }
      this.state.apply(d.entry, d.batchId);
      if (this.listeners.size > 0) {
        const ev = toRecorded(d.entry, d.batchId);
        for (const l of this.listeners) {
          try {
            l(ev, d.entry);
          } catch {
            // A listener's failure is its own; the commit stands.
          }
        }
      }
    }
    this.published();
  }

  /** Releases the waiters for positions applied by now. */
  published(): void {
    this.applied.advance(BigInt(this.state.last));
  }
}
