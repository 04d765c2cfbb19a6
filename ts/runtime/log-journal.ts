/**
 * `LogJournalStorage`: the actor journal on the log engine, one store per shard. An actor
 * `iri` lives in shard `shardOf(iri, shardCount)` (ts/core, hash version 1), the same
 * function a cluster places shards by, so a single-node data directory can become a
 * cluster's without re-hashing. Each shard is one `LogStorage` with one writer: every
 * macrostep is one append of one record, and concurrent appends of the actors of one
 * shard share the log engine's group commit (one fsync). docs/runtime.md, "Files".
 *
 * Per shard an in-memory index maps each actor to its last seq, its newest snapshot's
 * position and the positions of its macrosteps after that snapshot; it is built by one
 * scan of the shard when the shard is first used. Records before an actor's newest
 * snapshot are dead; once enough of a shard is dead, the journal compacts it (`compact`):
 * live records below the shard's end are copied forward and the store compacts before them.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeJournalRecord, encodeJournalRecord, peekJournalRecord } from '../codec/journal-record.js';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { shardOf } from '../core/index.js';
import { type FileLogOptions, MemoryLog, MemoryLogState, openLog } from '../storage/index.js';
import { IndexedThrough, MultiplexedLog } from '../storage/multiplexed-log.js';
import type { LogStorage } from '../storage/types.js';
import { macrostepOfRecord, recordOfMacrostep, recordOfSnapshot, snapshotOfRecord } from './entries.js';
import { JournalStoreCode, RuntimeCode, runtimeError } from './errors.js';
import { journalStoreMode, NODE_LOG_DIR } from './journal-dir.js';
import type { ActorHistory, JournalAppendOptions, JournalStorage, MacrostepEntry, SnapshotEntry } from './types.js';

/** The default shard count of a single-node journal. */
export const DEFAULT_JOURNAL_SHARDS = 64;
/** The file naming the layout of a journal directory. */
export const JOURNAL_META_FILE = 'journal.meta';
const META_FORMAT = 'plexus-actor-journal';

/** The directory of shard `shard`'s log store inside a journal directory: `shards/0000042`. */
export function shardDir(dir: string, shard: number): string {
  return join(dir, 'shards', String(shard).padStart(7, '0'));
}

interface ActorIndex {
  /** Last seq of an acknowledged record. */
  lastSeq: number;
  /** Last seq counting appends in flight (the compare-and-set compares against this). */
  pendingSeq: number;
  snapshotAt?: bigint;
  /** The seq of the snapshot at `snapshotAt`. */
  snapshotSeq: number;
  /** Positions of macrosteps after the newest snapshot, in seq order. */
  positions: bigint[];
  /** The seq of each of `positions`. */
  seqs: number[];
  /** Bumped by every snapshot (a copy made before it is dead). */
  ver: number;
}

/** Records of an actor that replay reads: its newest snapshot and the macrosteps after it. */
function liveCount(a: ActorIndex): number {
  return (a.snapshotAt === undefined ? 0 : 1) + a.positions.length;
}

class Shard {
  readonly actors = new Map<string, ActorIndex>();
  /** Records the index holds as live (sum of `liveCount`). */
  live = 0;
  /** Every position through this one is in the index (a record written by another writer stops it). */
  readonly indexed = new IndexedThrough();
  /** Records stored when scanned plus those this journal appended since (in flight included). */
  issued = 0;
  /** Positions below this were compacted (or handed to compactBefore). */
  cut = 0;
  /** The fencing epoch of the latest append, carried by compaction's copies. */
  epoch: bigint | undefined;
  /** Bumped when a compaction moved records: a history read that missed one reads again. */
  gen = 0;
  compacting: Promise<void> | undefined;
  /** The store cannot compact (a remote one): not tried again until the journal reopens. */
  noCompaction = false;
  /** After a failed compaction, the next waits until the shard's last position passes this. */
  retryAfter = 0;
  constructor(
    readonly n: number,
    readonly log: LogStorage,
  ) {}

  actor(iri: string): ActorIndex {
    let a = this.actors.get(iri);
    if (a === undefined) {
      a = { lastSeq: 0, pendingSeq: 0, snapshotSeq: 0, positions: [], seqs: [], ver: 0 };
      this.actors.set(iri, a);
    }
    return a;
  }

  /** Records stored and not live, above the last compaction point. */
  get dead(): number {
    const first = Number(this.log.first);
    if (first === 0) return 0;
    const from = Math.max(first, this.cut);
    return Math.max(0, Number(this.log.last) - from + 1 - this.live);
  }

  /**
   * Builds the index from every record of the shard. A compaction may leave a record twice
   * (the original and its copy, after a crash between the two steps) and copies after newer
   * records: the newest snapshot is the one with the highest seq, and a macrostep seq read
   * again takes the later position.
   */
  async scan(): Promise<void> {
    let from = this.log.first === 0n ? 1n : this.log.first;
    const last = this.log.last;
    while (from <= last) {
      const batch = await this.log.read(from, { maxBytes: 8 * 1024 * 1024 });
      if (batch.length === 0) break;
      for (const rec of batch) {
        let key: ReturnType<typeof peekJournalRecord>;
        try {
          key = peekJournalRecord(rec.payload);
        } catch (e) {
          throw corrupt(this.n, rec.position, e);
        }
        const a = this.actor(key.iri);
        if (key.kind === 'snapshot') {
          if (a.snapshotAt === undefined || key.seq >= a.snapshotSeq) {
            a.snapshotAt = rec.position;
            a.snapshotSeq = key.seq;
          }
        } else {
          const k = a.seqs.length;
          if (k === 0 || key.seq > (a.seqs[k - 1] as number)) {
            a.seqs.push(key.seq);
            a.positions.push(rec.position);
          } else {
            const i = lowerBound(a.seqs, key.seq);
            if (a.seqs[i] === key.seq) a.positions[i] = rec.position;
            else {
              a.seqs.splice(i, 0, key.seq);
              a.positions.splice(i, 0, rec.position);
            }
          }
        }
        if (key.seq > a.lastSeq) a.lastSeq = key.seq;
      }
      from = (batch[batch.length - 1]?.position ?? last) + 1n;
    }
    let live = 0;
    for (const a of this.actors.values()) {
      if (a.snapshotAt !== undefined) {
        const i = lowerBound(a.seqs, a.snapshotSeq + 1);
        a.seqs.splice(0, i);
        a.positions.splice(0, i);
      }
      a.pendingSeq = a.lastSeq;
      live += liveCount(a);
    }
    this.live = live;
    this.indexed.through = Number(last);
    this.issued = Number(last);
  }

  /** No other writer appended to the store since it was scanned (compaction needs that). */
  get alone(): boolean {
    return Number(this.log.last) <= this.issued;
  }

  /** Notes an append of this journal at `first .. last`. */
  wrote(first: bigint, last: bigint): void {
    this.indexed.add(Number(first), Number(last));
  }
}

/** The first index of ascending `xs` holding a value of at least `v`. */
function lowerBound(xs: readonly number[], v: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((xs[mid] as number) < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function corrupt(shard: number, position: bigint, cause: unknown): PlexusError {
  return runtimeError(
    JournalStoreCode.corrupt,
    `shard ${shard} holds a record at position ${position} that is not a journal record; restore the shard from a copy`,
    { shard, position },
    cause,
  );
}

function storageFailure(e: unknown, iri: string, shard: number): unknown {
  if (isPlexusError(e, 'PLX_STORAGE_FENCED')) {
    return runtimeError(
      JournalStoreCode.fenced,
      `append for ${iri} refused: shard ${shard} accepted a higher fencing epoch; this node no longer owns the shard`,
      { iri, shard, ...e.details },
      e,
    );
  }
  if (isPlexusError(e, 'PLX_STORAGE_CLOSED')) {
    return runtimeError(JournalStoreCode.closed, `the journal of shard ${shard} is closed`, { shard }, e);
  }
  return e;
}

let batchIds = new Uint8Array(0);
let batchIdAt = 0;

/**
 * A fresh random 16-byte batch id for one append, drawn from a pool refilled 4096 at a time
 * (the log copies it; asking the log to make one costs a random draw per append).
 */
function batchId(): Uint8Array {
  if (batchIdAt + 16 > batchIds.length) {
    batchIds = randomBytes(16 * 4096);
    batchIdAt = 0;
  }
  batchIdAt += 16;
  return batchIds.subarray(batchIdAt - 16, batchIdAt);
}

/** Opens shard `n`'s log store. */
export type ShardOpener = (shard: number) => Promise<LogStorage>;

/** Dead records a shard gathers before the journal compacts it (`JournalCompaction.deadRecords`). */
export const DEFAULT_COMPACT_DEAD_RECORDS = 65_536;

/** When a journal compacts a shard. */
export interface JournalCompaction {
  /**
   * Compact a shard once this many of its records are dead (before their actor's newest
   * snapshot) and at least as many are dead as live (default 65 536; 0 = never). A journal
   * compacts only a shard whose every record it wrote or read itself (its only writer).
   */
  readonly deadRecords?: number;
}

export class LogJournalStorage implements JournalStorage {
  private readonly shards = new Map<number, Promise<Shard>>();
  private closed = false;
  private readonly deadRecords: number;
  /** Shard compactions completed, and failed (the shard stays as it was; for tests and metrics). */
  readonly compactionStats = { runs: 0, failures: 0, copied: 0 };

  constructor(
    readonly shardCount: number,
    private readonly open: ShardOpener,
    /** Runs once every shard store is closed (a `MultiplexedLog` under the shard views closes here). */
    private readonly onClose?: () => Promise<void>,
    compaction: JournalCompaction = {},
  ) {
    shardOf('', shardCount); // refuses a shard count that is not a power of two up to 2^20
    const d = compaction.deadRecords ?? DEFAULT_COMPACT_DEAD_RECORDS;
    if (!Number.isSafeInteger(d) || d < 0) {
      throw runtimeError(RuntimeCode.badInput, `deadRecords must be a whole number of 0 or more, got ${d}`);
    }
    this.deadRecords = d;
  }

  /** The shard of an actor: `shardOf(iri, shardCount)`. */
  shardOf(iri: string): number {
    return shardOf(iri, this.shardCount);
  }

  private shard(iri: string): Promise<Shard> {
    if (this.closed) {
      return Promise.reject(runtimeError(JournalStoreCode.closed, 'the journal is closed; open it again to use it'));
    }
    if (typeof iri !== 'string' || iri.length === 0) {
      return Promise.reject(runtimeError(RuntimeCode.badInput, 'an actor IRI must be a non-empty string'));
    }
    const n = shardOf(iri, this.shardCount);
    let p = this.shards.get(n);
    if (p === undefined) {
      p = (async () => {
        const shard = new Shard(n, await this.open(n));
        await shard.scan();
        this.maybeCompact(shard);
        return shard;
      })();
      p.catch(() => this.shards.delete(n));
      this.shards.set(n, p);
    }
    return p;
  }

  async append(iri: string, entry: MacrostepEntry, opts: JournalAppendOptions): Promise<void> {
    const shard = await this.shard(iri);
    // From here to log.append nothing awaits, so the compare-and-set and the append's
    // place in the shard's order are one step.
    const a = shard.actor(iri);
    if (opts.expectedSeq !== a.pendingSeq || entry.seq !== opts.expectedSeq + 1) {
      throw runtimeError(
        JournalStoreCode.conflict,
        `append for ${iri} expected its journal at seq ${opts.expectedSeq} (writing ${entry.seq}), but it is at ${a.pendingSeq}; another activation wrote to it`,
        { iri, expected: opts.expectedSeq, actual: a.pendingSeq },
      );
    }
    const bytes = encodeJournalRecord(recordOfMacrostep(iri, entry));
    a.pendingSeq = entry.seq;
    if (opts.epoch !== undefined) shard.epoch = opts.epoch;
    shard.issued++;
    try {
      const res = await shard.log.append(
        [bytes],
        opts.epoch === undefined ? { batchId: batchId() } : { batchId: batchId(), epoch: opts.epoch },
      );
      shard.wrote(res.first, res.last);
      a.positions.push(res.first);
      a.seqs.push(entry.seq);
      a.lastSeq = entry.seq;
      shard.live++;
    } catch (e) {
      a.pendingSeq = a.lastSeq;
      shard.issued--;
      throw storageFailure(e, iri, shard.n);
    }
    this.maybeCompact(shard);
  }

  async snapshot(iri: string, entry: SnapshotEntry, opts: { readonly epoch?: bigint } = {}): Promise<void> {
    const shard = await this.shard(iri);
    const a = shard.actor(iri);
    if (entry.seq !== a.pendingSeq || a.pendingSeq !== a.lastSeq) {
      throw runtimeError(
        JournalStoreCode.conflict,
        `snapshot of ${iri} at seq ${entry.seq}, but its journal is at ${a.pendingSeq}; snapshot the newest state only`,
        { iri, expected: entry.seq, actual: a.pendingSeq },
      );
    }
    const bytes = encodeJournalRecord(recordOfSnapshot(iri, entry));
    if (opts.epoch !== undefined) shard.epoch = opts.epoch;
    shard.issued++;
    try {
      const res = await shard.log.append([bytes], opts.epoch === undefined ? {} : { epoch: opts.epoch });
      shard.wrote(res.first, res.last);
      shard.live -= liveCount(a);
      a.snapshotAt = res.first;
      a.snapshotSeq = entry.seq;
      a.ver++;
      const i = lowerBound(a.seqs, entry.seq + 1);
      a.seqs.splice(0, i);
      a.positions.splice(0, i);
      shard.live += liveCount(a);
    } catch (e) {
      shard.issued--;
      throw storageFailure(e, iri, shard.n);
    }
    this.maybeCompact(shard);
  }

  async history(iri: string): Promise<ActorHistory> {
    const shard = await this.shard(iri);
    // A compaction may move the records while they are read: read again from the new places.
    for (let attempt = 0; ; attempt++) {
      const gen = shard.gen;
      try {
        return await this.read(shard, iri);
      } catch (e) {
        if (attempt >= 3 || shard.gen === gen) throw e;
      }
    }
  }

  private async read(shard: Shard, iri: string): Promise<ActorHistory> {
    const a = shard.actors.get(iri);
    if (a === undefined) return { records: [], lastSeq: 0 };
    const at = a.snapshotAt;
    const positions = [...a.positions];
    const lastSeq = a.lastSeq;
    const read = async (p: bigint) => {
      const [rec] = await shard.log.read(p, { maxCount: 1 });
      if (rec === undefined || rec.position !== p) throw corrupt(shard.n, p, undefined);
      try {
        return decodeJournalRecord(rec.payload);
      } catch (e) {
        throw corrupt(shard.n, p, e);
      }
    };
    const [snap, ...steps] = await Promise.all([
      at === undefined ? undefined : read(at),
      ...positions.map((p) => read(p)),
    ]);
    let snapshot: ActorHistory['snapshot'];
    if (at !== undefined) {
      if (snap?.kind !== 'snapshot' || snap.iri !== iri) throw corrupt(shard.n, at, undefined);
      snapshot = snapshotOfRecord(snap);
    }
    const records = [];
    for (let i = 0; i < positions.length; i++) {
      const r = steps[i];
      if (r?.kind !== 'macrostep' || r.iri !== iri) throw corrupt(shard.n, positions[i] as bigint, undefined);
      records.push(macrostepOfRecord(r));
    }
    return snapshot === undefined ? { records, lastSeq } : { snapshot, records, lastSeq };
  }

  /** Starts a compaction of the shard when enough of it is dead (one at a time per shard). */
  private maybeCompact(shard: Shard): void {
    if (this.deadRecords === 0 || shard.noCompaction || shard.compacting !== undefined || this.closed) return;
    if (Number(shard.log.last) < shard.retryAfter) return;
    const dead = shard.dead;
    if (dead < this.deadRecords || dead < shard.live) return;
    shard.compacting = this.compact(shard)
      .then(
        () => {
          this.compactionStats.runs++;
        },
        () => {
          // e.g. a lease lost while copying: try again once as many records were written
          this.compactionStats.failures++;
          shard.retryAfter = Number(shard.log.last) + this.deadRecords;
        },
      )
      .finally(() => {
        shard.compacting = undefined;
      });
  }

  /** Compacts shard `n` now, whatever its dead records (for tools and tests); resolves when done. */
  async compactShard(n: number): Promise<void> {
    const p = this.shards.get(n);
    if (p === undefined) return;
    const shard = await p;
    while (shard.compacting !== undefined) await shard.compacting;
    if (shard.noCompaction || this.closed) return;
    shard.compacting = this.compact(shard).finally(() => {
      shard.compacting = undefined;
    });
    await shard.compacting;
  }

  /**
   * Copies the live records (newest snapshot and later macrosteps) below the shard's last
   * position forward, one append per actor, then compacts the store before the copies.
   * Appends in flight meanwhile land above that position and are not touched; a snapshot
   * that lands while an actor is copied makes the copy dead (the index keeps the snapshot).
   * A crash at any point leaves each live record at least once: the originals until the
   * store compacts, the copies after (the scan takes the newest snapshot and one record per
   * seq).
   */
  private async compact(shard: Shard): Promise<void> {
    const log = shard.log;
    if (!shard.alone) return; // another writer: its records are not in the index
    // A store that cannot compact (a remote one) refuses this before anything is copied.
    try {
      await log.compactBefore(log.first);
    } catch {
      shard.noCompaction = true;
      return;
    }
    // Every position below the cut is in the index (appends acknowledged by the store whose
    // callers have not run yet are above it).
    const cut = BigInt(shard.indexed.through) + 1n;
    for (const a of shard.actors.values()) {
      if (this.closed) return;
      const ver = a.ver;
      const snapAt = a.snapshotAt !== undefined && a.snapshotAt < cut ? a.snapshotAt : undefined;
      // Macrosteps below the cut are a prefix of the actor's (later ones were appended after it).
      let k = 0;
      while (k < a.positions.length && (a.positions[k] as bigint) < cut) k++;
      if (snapAt === undefined && k === 0) continue;
      const from = [...(snapAt === undefined ? [] : [snapAt]), ...a.positions.slice(0, k)];
      const recs = await Promise.all(
        from.map(async (p) => {
          const [rec] = await log.read(p, { maxCount: 1 });
          if (rec === undefined || rec.position !== p) throw corrupt(shard.n, p, undefined);
          return rec.payload;
        }),
      );
      if (a.ver !== ver) continue; // a newer snapshot landed: those records are dead
      shard.issued += recs.length;
      const res = await log.append(
        recs,
        shard.epoch === undefined ? { batchId: batchId() } : { batchId: batchId(), epoch: shard.epoch },
      );
      shard.wrote(res.first, res.last);
      this.compactionStats.copied += recs.length;
      if (a.ver !== ver) continue;
      let p = res.first;
      if (snapAt !== undefined) a.snapshotAt = p++;
      for (let i = 0; i < k; i++) a.positions[i] = p++;
    }
    if (!shard.alone || this.closed) return;
    shard.gen++;
    shard.cut = Number(cut);
    await log.compactBefore(cut);
  }

  /** The shards opened so far and their stores (for tools and tests). */
  async openShards(): Promise<Map<number, LogStorage>> {
    const out = new Map<number, LogStorage>();
    for (const [n, p] of this.shards) out.set(n, (await p).log);
    return out;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const all = [...this.shards.values()];
    this.shards.clear();
    for (const p of all) {
      try {
        const shard = await p;
        await shard.compacting;
        await shard.log.close();
      } catch {
        // a shard that failed to open has nothing to close
      }
    }
    await this.onClose?.();
  }
}

export interface OpenJournalOptions {
  /** Shards of a new directory (default 64; a power of two). An existing directory keeps its own. */
  readonly shardCount?: number;
  /** Options of each shard's FileLog (fsync mode, segment size, logger). */
  readonly log?: FileLogOptions;
  /**
   * How a new directory keeps its shards: `shards` (default: one log-engine store per shard
   * under `shards/`) or `node` (all shards in one store under `node/`, `MultiplexedLog`: one group
   * commit across shards). An existing directory keeps its own.
   */
  readonly store?: 'shards' | 'node';
  /** When shards (and, with `node`, lanes) are compacted (docs/runtime.md, "Compaction"). */
  readonly compaction?: JournalCompaction;
}

interface JournalMeta {
  readonly format: string;
  readonly version: number;
  readonly shardCount: number;
  readonly hash: string;
}

/**
 * Opens (or creates) a journal directory: `journal.meta` and `shards/<7 digits>/` log
 * stores, opened when first used. A directory made with another shard count is refused
 * (`PLX_JOURNAL_LAYOUT`) when `shardCount` is given and differs.
 */
export async function openJournal(dir: string, opts: OpenJournalOptions = {}): Promise<LogJournalStorage> {
  await mkdir(dir, { recursive: true });
  const metaPath = join(dir, JOURNAL_META_FILE);
  let meta: JournalMeta | undefined;
  let text: string | undefined;
  try {
    text = await readFile(metaPath, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  if (text !== undefined) {
    try {
      meta = JSON.parse(text) as JournalMeta;
    } catch {
      meta = undefined;
    }
    if (meta?.format !== META_FORMAT || meta.version !== 1 || meta.hash !== 'fnv1a64-v1') {
      throw runtimeError(JournalStoreCode.layout, `${metaPath} is not a version 1 actor journal description`, {
        dir,
      });
    }
    if (opts.shardCount !== undefined && opts.shardCount !== meta.shardCount) {
      throw runtimeError(
        JournalStoreCode.layout,
        `${dir} holds a journal of ${meta.shardCount} shards, not ${opts.shardCount}; open it with its own shard count (or omit it)`,
        { dir, shardCount: meta.shardCount, requested: opts.shardCount },
      );
    }
  } else {
    const shardCount = opts.shardCount ?? DEFAULT_JOURNAL_SHARDS;
    shardOf('', shardCount);
    meta = { format: META_FORMAT, version: 1, shardCount, hash: 'fnv1a64-v1' };
    await writeFile(`${metaPath}.tmp`, `${JSON.stringify(meta)}\n`);
    await rename(`${metaPath}.tmp`, metaPath);
  }
  const logOpts = opts.log ?? {};
  const nodeDir = join(dir, NODE_LOG_DIR);
  const hasNodeLog = await readdir(nodeDir).then(
    (names) => names.length > 0,
    () => false,
  );
  if (hasNodeLog || (opts.store === 'node' && (await journalStoreMode(dir)) === 'node')) {
    const nl = await MultiplexedLog.open(nodeDir, logOpts, undefined, opts.compaction);
    return new LogJournalStorage(
      meta.shardCount,
      async (n) => nl.shard(n),
      () => nl.close(),
      opts.compaction,
    );
  }
  return new LogJournalStorage(
    meta.shardCount,
    async (n) => {
      const d = shardDir(dir, n);
      await mkdir(d, { recursive: true });
      return openLog(d, logOpts);
    },
    undefined,
    opts.compaction,
  );
}

/**
 * An in-memory journal on `MemoryLog`s: the same behaviour, for fast tests. Passing the
 * same `states` map again is a restart that kept everything.
 */
export function memoryJournal(
  shardCount = 8,
  states: Map<number, MemoryLogState> = new Map(),
  compaction?: JournalCompaction,
): LogJournalStorage {
  return new LogJournalStorage(
    shardCount,
    async (n) => {
      let s = states.get(n);
      if (s === undefined) {
        s = new MemoryLogState();
        states.set(n, s);
      }
      return new MemoryLog(s);
    },
    undefined,
    compaction,
  );
}
