/**
 * The actor journal of a cluster node: the runtime's `JournalStorage` with every append of a
 * shard going through `ClusterStorage`, which stamps this node's lease epoch on it as the
 * fencing token (a store that accepted a newer owner refuses it `PLX_CLUSTER_FENCED`).
 *
 * Two layouts (docs/cluster.md, "Actors across nodes"):
 * - `per-node`: this node's own shard stores. Only this node writes them, so the per-shard
 *   index of the journal stays valid across lease changes.
 * - `shared`: every node reaches the same shard stores (a shared directory served by one
 *   process, or shared in-memory states). Another node may have written a shard since this
 *   node last held it, so each new lease epoch reads the shard's index afresh.
 */
import { shardOf } from '../core/index.js';
import { LogJournalStorage } from '../runtime/log-journal.js';
import type {
  ActorHistory,
  JournalAppendOptions,
  JournalStorage,
  MacrostepEntry,
  SnapshotEntry,
} from '../runtime/types.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from '../storage/types.js';
import { ClusterCode, clusterError } from './errors.js';
import { ClusterStorage } from './storage.js';

export interface ClusterJournalOptions {
  readonly shardCount: number;
  readonly layout: 'per-node' | 'shared';
  /** Opens a shard's store (called once per shard, or once per lease epoch with `shared`). */
  readonly open: (shard: number) => Promise<LogStorage>;
  /** This node's usable lease epoch on a shard. */
  readonly epochOf: (shard: number) => bigint | undefined;
}

/** A shard store whose appends go through ClusterStorage (epoch-stamped); reads go direct. */
class StampedLog implements LogStorage {
  constructor(
    private readonly shard: number,
    private readonly log: LogStorage,
    private readonly cluster: ClusterStorage,
  ) {}
  get first(): bigint {
    return this.log.first;
  }
  get last(): bigint {
    return this.log.last;
  }
  get highestEpoch(): bigint {
    return this.log.highestEpoch;
  }
  append(payloads: readonly Uint8Array[], opts: AppendOptions = {}): Promise<AppendResult> {
    return this.cluster.append(
      this.shard,
      payloads,
      opts.batchId === undefined
        ? opts.expectedLast === undefined
          ? {}
          : { expectedLast: opts.expectedLast }
        : opts.expectedLast === undefined
          ? { batchId: opts.batchId }
          : { batchId: opts.batchId, expectedLast: opts.expectedLast },
    );
  }
  read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.log.read(from, opts);
  }
  readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.log.readBackward(from, opts);
  }
  compactBefore(position: bigint): Promise<void> {
    return this.log.compactBefore(position);
  }
  async close(): Promise<void> {}
}

interface EpochJournal {
  readonly epoch: bigint;
  readonly journal: LogJournalStorage;
  readonly cluster: ClusterStorage;
}

export class ClusterJournal implements JournalStorage {
  readonly shardCount: number;
  private single?: { journal: LogJournalStorage; cluster: ClusterStorage };
  private readonly byShard = new Map<number, EpochJournal>();
  private readonly retired: EpochJournal[] = [];

  constructor(private readonly opts: ClusterJournalOptions) {
    this.shardCount = opts.shardCount;
    if (opts.layout === 'per-node') {
      const stores = new Map<number, Promise<LogStorage>>();
      const raw = (s: number) => {
        let p = stores.get(s);
        if (p === undefined) {
          p = opts.open(s);
          p.catch(() => stores.delete(s));
          stores.set(s, p);
        }
        return p;
      };
      const cluster = new ClusterStorage({ shardCount: opts.shardCount, open: raw, epochOf: opts.epochOf });
      const journal = new LogJournalStorage(opts.shardCount, async (s) => new StampedLog(s, await raw(s), cluster));
      this.single = { journal, cluster };
    }
  }

  private journalOf(iri: string): LogJournalStorage {
    if (this.single !== undefined) return this.single.journal;
    const shard = shardOf(iri, this.shardCount);
    const epoch = this.opts.epochOf(shard);
    if (epoch === undefined) {
      throw clusterError(
        ClusterCode.LEASE_LOST,
        `this node holds no usable lease on shard ${shard} of ${iri}: forward the message to the owner`,
        { shard },
      );
    }
    let j = this.byShard.get(shard);
    if (j === undefined || j.epoch !== epoch) {
      if (j !== undefined) this.retired.push(j);
      let opened: Promise<LogStorage> | undefined;
      const raw = (s: number) => {
        opened ??= this.opts.open(s);
        return opened;
      };
      const cluster = new ClusterStorage({
        shardCount: this.shardCount,
        open: raw,
        epochOf: (s) => {
          const e = this.opts.epochOf(s);
          // An activation of an older epoch must not write under the newer one.
          return e === epoch ? e : e === undefined ? undefined : epoch;
        },
      });
      // Not compacted here: a journal of an older epoch could compact a store the shard's new
      // owner already indexed. Shared stores are compacted by no one yet (docs/cluster.md).
      const journal = new LogJournalStorage(
        this.shardCount,
        async (s) => new StampedLog(s, await raw(s), cluster),
        undefined,
        { deadRecords: 0 },
      );
      j = { epoch, journal, cluster };
      this.byShard.set(shard, j);
    }
    return j.journal;
  }

  async append(iri: string, entry: MacrostepEntry, opts: JournalAppendOptions): Promise<void> {
    return this.journalOf(iri).append(iri, entry, opts);
  }

  async snapshot(iri: string, entry: SnapshotEntry, opts?: { readonly epoch?: bigint }): Promise<void> {
    return this.journalOf(iri).snapshot(iri, entry, opts);
  }

  async history(iri: string): Promise<ActorHistory> {
    return this.journalOf(iri).history(iri);
  }

  async close(): Promise<void> {
    if (this.single !== undefined) {
      await this.single.journal.close();
      await this.single.cluster.close();
      return;
    }
    for (const j of [...this.byShard.values(), ...this.retired]) {
      await j.journal.close();
      await j.cluster.close();
    }
    this.byShard.clear();
    this.retired.length = 0;
  }
}
