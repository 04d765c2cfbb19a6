/**
 * `NodeLog`: every shard of a journal in a few log-engine stores, so that the macrosteps of
 * actors of different shards that finish while a write is in flight go out in the same
 * group: one write and one fsync for all of them (the log engine's group commit), where one
 * store per shard costs one write and one fsync per shard. docs/runtime.md, "Files".
 *
 * Each record is the journal record of one shard prefixed with 12 bytes: the shard (u32 LE)
 * and the fencing epoch its append carried (u64 LE). `shard(n)` is shard n's view as a
 * `LogStorage` of its own: positions 1, 2, ... count that shard's records only, an append
 * carrying an epoch below the highest the shard accepted is refused (`PLX_STORAGE_FENCED`),
 * and `expectedLast` compares against the shard's own last position. The view maps its
 * positions to the store's through an in-memory index built by one scan when the log opens.
 *
 * The stores are lanes: shard n lives in lane `n % lanes` (4 by default, fixed when the
 * directory is made), each lane a log-engine store with one write in flight at a time, so
 * up to `lanes` groups are written at once while each groups the shards of its lane.
 *
 * The directory is `<journal dir>/node/lane-<i>/` next to `journal.meta`; a journal directory
 * holding per-shard stores (`shards/`) keeps them (`journalStoreMode`).
 */
import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { PlexusError } from '../core/errors.js';
import { type FileLogOptions, openLog, RECORD_HEADER_BYTES } from '../storage/index.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from '../storage/types.js';

/** The store directory of a node-wide journal log inside a journal directory. */
export const NODE_LOG_DIR = 'node';
/** Lanes of a new node log: shard n is in lane n % lanes, each lane one store with one write in flight. */
export const DEFAULT_NODE_LOG_LANES = 4;
const HEADER = 12;

function storageFailure(code: string, message: string, details: Record<string, unknown>): PlexusError {
  return new PlexusError(code, message, details);
}

class ShardIndex {
  /** Positions in its lane's store of the shard's records, in order (shard position i + 1 at [i]). */
  readonly at: number[] = [];
  highestEpoch = 0n;
  /** Appends called and not yet settled. */
  pending = 0;
  constructor(
    readonly n: number,
    /** The lane store holding the shard (lane `n % lanes`). */
    readonly store: LogStorage,
  ) {}
}

/** One shard's records of a `NodeLog`, as a `LogStorage`. */
class ShardView implements LogStorage {
  constructor(
    private readonly node: NodeLog,
    private readonly ix: ShardIndex,
  ) {}

  get first(): bigint {
    return this.ix.at.length === 0 ? 0n : 1n;
  }
  get last(): bigint {
    return BigInt(this.ix.at.length);
  }
  get highestEpoch(): bigint {
    return this.ix.highestEpoch;
  }

  append(payloads: readonly Uint8Array[], opts: AppendOptions = {}): Promise<AppendResult> {
    return this.node.append(this.ix, payloads, opts);
  }

  private async readAt(positions: number[]): Promise<LogRecord[]> {
    const recs = await Promise.all(positions.map((p) => this.ix.store.read(BigInt(p), { maxCount: 1 })));
    return recs.map((r, i) => {
      const rec = r[0];
      if (rec === undefined || rec.position !== BigInt(positions[i] as number)) {
        throw storageFailure('PLX_STORAGE_CORRUPT', `the node log lacks record ${positions[i]} of shard ${this.ix.n}`, {
          shard: this.ix.n,
        });
      }
      const b = rec.payload;
      const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
      return {
        position: 0n,
        batchId: rec.batchId,
        epoch: dv.getBigUint64(4, true),
        payload: b.subarray(HEADER),
      };
    });
  }

  private async collect(from: bigint, step: 1 | -1, opts: ReadOptions = {}): Promise<LogRecord[]> {
    const count = this.ix.at.length;
    let i = Number(from) - 1;
    if (step < 0 && i >= count) i = count - 1;
    const maxCount = opts.maxCount ?? Number.POSITIVE_INFINITY;
    const maxBytes = opts.maxBytes ?? 8 * 1024 * 1024;
    const out: LogRecord[] = [];
    let bytes = 0;
    while (i >= 0 && i < count && out.length < maxCount) {
      const chunk: number[] = [];
      const idx: number[] = [];
      for (; i >= 0 && i < count && chunk.length < 64 && out.length + chunk.length < maxCount; i += step) {
        chunk.push(this.ix.at[i] as number);
        idx.push(i + 1);
      }
      const recs = await this.readAt(chunk);
      for (let k = 0; k < recs.length; k++) {
        const r = recs[k] as LogRecord;
        if (out.length > 0 && bytes + r.payload.length > maxBytes) return out;
        bytes += r.payload.length;
        out.push({ ...r, position: BigInt(idx[k] as number) });
      }
    }
    return out;
  }

  read(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    if (from < 1n) from = 1n;
    return this.collect(from, 1, opts);
  }
  readBackward(from: bigint, opts?: ReadOptions): Promise<LogRecord[]> {
    return this.collect(from, -1, opts);
  }
  async truncateAfter(): Promise<void> {
    throw storageFailure('PLX_STORAGE_BAD_INPUT', 'a shard of a node-wide journal log cannot be truncated', {
      shard: this.ix.n,
    });
  }
  async compactBefore(): Promise<void> {
    throw storageFailure('PLX_STORAGE_BAD_INPUT', 'a shard of a node-wide journal log cannot be compacted', {
      shard: this.ix.n,
    });
  }
  /** The node log stays open: `NodeLog.close()` closes it. */
  async close(): Promise<void> {}
}

export class NodeLog {
  private readonly shards = new Map<number, ShardIndex>();
  private readonly views = new Map<number, ShardView>();

  private constructor(readonly stores: readonly LogStorage[]) {}

  /**
   * Opens (or creates) the node log in `dir` and indexes it by shard. A new directory gets
   * `lanes` lane stores (`lane-0/` ...; default 4); an existing one keeps its own.
   */
  static async open(dir: string, opts: FileLogOptions = {}, lanes = DEFAULT_NODE_LOG_LANES): Promise<NodeLog> {
    await mkdir(dir, { recursive: true });
    const found = (await readdir(dir)).filter((n) => /^lane-[0-9]+$/.test(n)).length;
    const k = found > 0 ? found : lanes;
    if (!Number.isInteger(k) || k < 1 || k > 1024) {
      throw storageFailure('PLX_STORAGE_BAD_INPUT', `a node log has 1 to 1024 lanes, not ${k}`, { lanes: k });
    }
    const stores: LogStorage[] = [];
    try {
      for (let i = 0; i < k; i++) {
        const d = join(dir, `lane-${i}`);
        await mkdir(d, { recursive: true });
        stores.push(await openLog(d, opts));
      }
      return await NodeLog.over(stores);
    } catch (e) {
      for (const st of stores) await st.close().catch(() => {});
      throw e;
    }
  }

  /** A node log over given lane stores (`MemoryLog`s in tests); they are indexed here. */
  static async over(stores: LogStorage | readonly LogStorage[]): Promise<NodeLog> {
    const nl = new NodeLog(Array.isArray(stores) ? stores : [stores as LogStorage]);
    for (let lane = 0; lane < nl.stores.length; lane++) await nl.scan(lane);
    return nl;
  }

  private async scan(lane: number): Promise<void> {
    const store = this.stores[lane] as LogStorage;
    let from = store.first === 0n ? 1n : store.first;
    const last = store.last;
    while (from <= last) {
      const batch = await store.read(from, { maxBytes: 8 * 1024 * 1024 });
      if (batch.length === 0) break;
      for (const rec of batch) {
        const b = rec.payload;
        if (b.length < HEADER) {
          throw storageFailure(
            'PLX_STORAGE_CORRUPT',
            `record ${rec.position} of the node journal log is too short to be a shard record`,
            {
              position: rec.position,
            },
          );
        }
        const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
        const n = dv.getUint32(0, true);
        if (n % this.stores.length !== lane) {
          throw storageFailure(
            'PLX_STORAGE_CORRUPT',
            `record ${rec.position} of lane ${lane} of the node journal log belongs to shard ${n}, which is not in that lane`,
            { position: rec.position, lane, shard: n },
          );
        }
        const ix = this.index(n);
        ix.at.push(Number(rec.position));
        const e = dv.getBigUint64(4, true);
        if (e > ix.highestEpoch) ix.highestEpoch = e;
      }
      from = (batch[batch.length - 1]?.position ?? last) + 1n;
    }
  }

  private index(n: number): ShardIndex {
    let ix = this.shards.get(n);
    if (ix === undefined) {
      ix = new ShardIndex(n, this.stores[n % this.stores.length] as LogStorage);
      this.shards.set(n, ix);
    }
    return ix;
  }

  /** Shard `n`'s view (the same object on every call). */
  shard(n: number): LogStorage {
    let v = this.views.get(n);
    if (v === undefined) {
      v = new ShardView(this, this.index(n));
      this.views.set(n, v);
    }
    return v;
  }

  /** Whether shard `n` holds at least one record. */
  holds(n: number): boolean {
    return (this.shards.get(n)?.at.length ?? 0) > 0;
  }

  /** The shards holding at least one record. */
  heldShards(): number[] {
    return [...this.shards.values()].filter((ix) => ix.at.length > 0).map((ix) => ix.n);
  }

  /** Appends of one shard, in call order; concurrent appends of the shards of a lane share its group commit. */
  append(ix: ShardIndex, payloads: readonly Uint8Array[], opts: AppendOptions): Promise<AppendResult> {
    const epoch = opts.epoch ?? 0n;
    if (typeof epoch !== 'bigint' || epoch < 0n || epoch >= 1n << 64n) {
      return Promise.reject(
        storageFailure('PLX_STORAGE_BAD_INPUT', `epoch must be a bigint from 0 to 2^64 - 1, got ${String(epoch)}`, {}),
      );
    }
    // An append without an epoch is not fenced (as in the log engine); it records epoch 0.
    if (opts.epoch !== undefined && epoch < ix.highestEpoch) {
      return Promise.reject(
        storageFailure(
          'PLX_STORAGE_FENCED',
          `append refused: epoch ${epoch} is below the highest accepted epoch ${ix.highestEpoch} of shard ${ix.n}; a writer with a newer epoch owns the shard`,
          { epoch, highestEpoch: ix.highestEpoch, shard: ix.n },
        ),
      );
    }
    const expected = BigInt(ix.at.length + ix.pending);
    if (opts.expectedLast !== undefined && opts.expectedLast !== expected) {
      return Promise.reject(
        storageFailure(
          'PLX_STORAGE_CONFLICT',
          `append refused: expected the last position of shard ${ix.n} to be ${opts.expectedLast} but it is ${expected}`,
          { expected: opts.expectedLast, actual: expected, shard: ix.n },
        ),
      );
    }
    const storeOpts = opts.batchId === undefined ? {} : { batchId: opts.batchId };
    let appended: Promise<AppendResult>;
    if (ix.store.appendFramed !== undefined) {
      // One buffer laid out as the store keeps it (record header gap, shard prefix, payload):
      // the payload is copied once, and the store writes it as it is.
      let size = 0;
      for (const p of payloads) size += RECORD_HEADER_BYTES + HEADER + p.length;
      const bytes = Buffer.allocUnsafe(size);
      const lengths: number[] = [];
      let at = 0;
      for (const p of payloads) {
        at += RECORD_HEADER_BYTES;
        bytes.writeUInt32LE(ix.n, at);
        bytes.writeBigUInt64LE(epoch, at + 4);
        bytes.set(p, at + HEADER);
        at += HEADER + p.length;
        lengths.push(HEADER + p.length);
      }
      appended = ix.store.appendFramed({ bytes, lengths }, storeOpts);
    } else {
      const framed = payloads.map((p) => {
        const b = Buffer.allocUnsafe(HEADER + p.length);
        b.writeUInt32LE(ix.n, 0);
        b.writeBigUInt64LE(epoch, 4);
        b.set(p, HEADER);
        return b;
      });
      appended = ix.store.append(framed, storeOpts);
    }
    if (epoch > ix.highestEpoch) ix.highestEpoch = epoch;
    ix.pending++;
    return appended.then(
      (res) => {
        ix.pending--;
        const first = ix.at.length + 1;
        for (let p = Number(res.first); p <= Number(res.last); p++) ix.at.push(p);
        return { first: BigInt(first), last: BigInt(ix.at.length), batchId: res.batchId };
      },
      (e) => {
        ix.pending--;
        throw e;
      },
    );
  }

  async close(): Promise<void> {
    for (const st of this.stores) await st.close();
  }
}

/**
 * How a journal directory keeps its shards: `node` (one `NodeLog` under `node/`) unless the
 * directory already holds per-shard stores under `shards/` and no node log, which it keeps.
 */
export async function journalStoreMode(dir: string): Promise<'node' | 'shards'> {
  const has = async (d: string) => {
    try {
      return (await readdir(d)).length > 0;
    } catch {
      return false;
    }
  };
  if (await has(join(dir, NODE_LOG_DIR))) return 'node';
  return (await has(join(dir, 'shards'))) ? 'shards' : 'node';
}

/**
 * Opens the shard stores of a journal directory in whichever mode it keeps them (for tools
 * and tests that read a node's journal): `shard(n)` is shard n's store, or undefined when the
 * directory holds nothing of it; `close()` closes every store opened.
 */
export async function openJournalShards(
  dir: string,
  opts: FileLogOptions = {},
): Promise<{ shard(n: number): Promise<LogStorage | undefined>; close(): Promise<void> }> {
  if ((await journalStoreMode(dir)) === 'node') {
    const nl = await NodeLog.open(join(dir, NODE_LOG_DIR), opts);
    return {
      shard: async (n) => (nl.holds(n) ? nl.shard(n) : undefined),
      close: () => nl.close(),
    };
  }
  const open: LogStorage[] = [];
  return {
    shard: async (n) => {
      const d = join(dir, 'shards', String(n).padStart(7, '0'));
      try {
        await readdir(d);
      } catch {
        return undefined;
      }
      const log = await openLog(d, opts);
      open.push(log);
      return log;
    },
    close: async () => {
      for (const l of open.splice(0)) await l.close();
    },
  };
}
