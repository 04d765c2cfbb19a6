/**
 * The history checker of the cluster's fault tests, on the journals as stored: reads every
 * shard store back and checks that
 * - each shard's accepted records carry non-decreasing epochs (positions are totally ordered
 *   across epochs: no stale owner's append was accepted after a newer owner's);
 * - each actor's journal is linear: macrostep seqs run 1, 2, 3, ... with no gap or repeat
 *   (a snapshot carries the seq of the macrostep before it);
 * - each message id was consumed by at most one macrostep of its target (exactly once, with
 *   the delivery counting of the caller for "at least once");
 * - with the writers the nodes reported, at most one node wrote each (shard, epoch).
 */
import { decodeJournalRecord } from '../codec/journal-record.js';
import type { LogStorage } from '../storage/types.js';

export interface ShardHistory {
  readonly shard: number;
  readonly records: readonly { readonly position: bigint; readonly epoch: bigint; readonly payload: Uint8Array }[];
}

export interface HistoryReport {
  readonly actors: number;
  readonly macrosteps: number;
  /** Message ids consumed, by actor. */
  readonly consumed: ReadonlyMap<string, ReadonlySet<string>>;
  /** Epochs seen per shard. */
  readonly epochs: ReadonlyMap<number, readonly bigint[]>;
  readonly problems: readonly string[];
}

/** Reads every record of a store. */
export async function readShard(shard: number, log: LogStorage): Promise<ShardHistory> {
  const records: ShardHistory['records'][number][] = [];
  let from = log.first === 0n ? 1n : log.first;
  for (;;) {
    const batch = await log.read(from, { maxCount: 4096 });
    if (batch.length === 0) break;
    for (const r of batch) records.push({ position: r.position, epoch: r.epoch, payload: r.payload });
    from = (batch[batch.length - 1]?.position ?? from) + 1n;
  }
  return { shard, records };
}

export function checkHistory(
  shards: readonly ShardHistory[],
  writers?: ReadonlyMap<string, ReadonlySet<string>>,
): HistoryReport {
  const problems: string[] = [];
  const lastSeq = new Map<string, number>();
  const consumed = new Map<string, Set<string>>();
  const epochs = new Map<number, bigint[]>();
  let macrosteps = 0;
  for (const s of shards) {
    let prevEpoch = 0n;
    const seen: bigint[] = [];
    for (const r of s.records) {
      if (r.epoch < prevEpoch) {
        problems.push(`shard ${s.shard}: record ${r.position} has epoch ${r.epoch} after epoch ${prevEpoch}`);
      }
      if (r.epoch > prevEpoch || seen.length === 0) seen.push(r.epoch);
      prevEpoch = r.epoch > prevEpoch ? r.epoch : prevEpoch;
      let rec: ReturnType<typeof decodeJournalRecord>;
      try {
        rec = decodeJournalRecord(r.payload);
      } catch (e) {
        problems.push(`shard ${s.shard}: record ${r.position} is not a journal record: ${(e as Error).message}`);
        continue;
      }
      const last = lastSeq.get(rec.iri) ?? 0;
      if (rec.kind === 'snapshot') {
        if (rec.seq !== last) problems.push(`${rec.iri}: snapshot at seq ${rec.seq} but the journal is at ${last}`);
        continue;
      }
      macrosteps++;
      if (rec.seq !== last + 1) problems.push(`${rec.iri}: macrostep seq ${rec.seq} follows seq ${last}`);
      lastSeq.set(rec.iri, rec.seq);
      let ids = consumed.get(rec.iri);
      if (ids === undefined) {
        ids = new Set();
        consumed.set(rec.iri, ids);
      }
      if (ids.has(rec.messageId)) problems.push(`${rec.iri}: message ${rec.messageId} consumed twice`);
      ids.add(rec.messageId);
    }
    epochs.set(s.shard, seen);
  }
  for (const [key, nodes] of writers ?? []) {
    if (nodes.size > 1) problems.push(`${key}: written by ${[...nodes].sort().join(', ')}`);
  }
  return { actors: lastSeq.size, macrosteps, consumed, epochs, problems };
}
