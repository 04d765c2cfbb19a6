/**
 * ClusterStorage: every append of a shard goes to that shard's journal store and carries the
 * node's lease epoch for the shard as the fencing token. A store that has accepted a higher
 * epoch refuses the append (PLX_STORAGE_FENCED), reported here as PLX_CLUSTER_FENCED; an
 * append for a shard this node holds no usable lease on is refused before it reaches the store.
 * The runtime's Storage is wired on top of this (journal per actor inside its shard's store).
 */
import { isPlexusError } from '../core/errors.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from '../storage/types.js';
import { ClusterCode, clusterError } from './errors.js';

export interface ClusterStorageOptions {
  readonly shardCount: number;
  /** Opens (or returns the open) store of a shard: shared files or this node's own. */
  readonly open: (shard: number) => Promise<LogStorage>;
  /** The epoch of this node's usable lease on `shard`, or undefined when it has none. */
  readonly epochOf: (shard: number) => bigint | undefined;
}

export class ClusterStorage {
  private readonly stores = new Map<number, Promise<LogStorage>>();

  constructor(private readonly opts: ClusterStorageOptions) {}

  private store(shard: number): Promise<LogStorage> {
    if (!Number.isInteger(shard) || shard < 0 || shard >= this.opts.shardCount) {
      throw clusterError(ClusterCode.BAD_SHARD, `shard ${shard} is outside 0..${this.opts.shardCount - 1}`, { shard });
    }
    let s = this.stores.get(shard);
    if (!s) {
      s = this.opts.open(shard);
      this.stores.set(shard, s);
    }
    return s;
  }

  /** Appends to `shard`'s store, stamped with this node's lease epoch. */
  async append(
    shard: number,
    payloads: readonly Uint8Array[],
    opts: Omit<AppendOptions, 'epoch'> = {},
  ): Promise<AppendResult> {
    const store = this.store(shard);
    const epoch = this.opts.epochOf(shard);
    if (epoch === undefined) {
      throw clusterError(
        ClusterCode.LEASE_LOST,
        `this node holds no usable lease on shard ${shard}: forward the message to the owner`,
        { shard },
      );
    }
    const log = await store;
    try {
      return await log.append(payloads, { ...opts, epoch });
    } catch (e) {
      if (isPlexusError(e, 'PLX_STORAGE_FENCED')) {
        throw clusterError(
          ClusterCode.FENCED,
          `shard ${shard}: the store accepted a newer owner than epoch ${epoch}; this node lost the shard`,
          { shard, epoch: `${epoch}`, highest: `${log.highestEpoch}` },
          e,
        );
      }
      throw e;
    }
  }

  async read(shard: number, from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return (await this.store(shard)).read(from, opts);
  }

  async close(): Promise<void> {
    const all = [...this.stores.values()];
    this.stores.clear();
    await Promise.all(all.map(async (p) => (await p).close()));
  }
}
