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
 * scan of the shard when the shard is first used.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeJournalRecord, encodeJournalRecord, peekJournalRecord } from '../codec/journal-record.js';
import { isPlexusError, type PlexusError } from '../core/errors.js';
import { shardOf } from '../core/index.js';
import { type FileLogOptions, MemoryLog, MemoryLogState, openLog } from '../storage/index.js';
import type { LogStorage } from '../storage/types.js';
import { macrostepOfRecord, recordOfMacrostep, recordOfSnapshot, snapshotOfRecord } from './entries.js';
import { JournalStoreCode, RuntimeCode, runtimeError } from './errors.js';
import { journalStoreMode, NODE_LOG_DIR, NodeLog } from './node-log.js';
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
  /** Positions of macrosteps after the newest snapshot, in order. */
  positions: bigint[];
}

class Shard {
  readonly actors = new Map<string, ActorIndex>();
  constructor(
    readonly n: number,
    readonly log: LogStorage,
  ) {}

  actor(iri: string): ActorIndex {
    let a = this.actors.get(iri);
    if (a === undefined) {
      a = { lastSeq: 0, pendingSeq: 0, positions: [] };
      this.actors.set(iri, a);
    }
    return a;
  }

  /** Builds the index from every record of the shard. */
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
          a.snapshotAt = rec.position;
          a.positions = [];
        } else {
          a.positions.push(rec.position);
          a.lastSeq = key.seq;
          a.pendingSeq = key.seq;
        }
      }
      from = (batch[batch.length - 1]?.position ?? last) + 1n;
    }
  }
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

export class LogJournalStorage implements JournalStorage {
  private readonly shards = new Map<number, Promise<Shard>>();
  private closed = false;

  constructor(
    readonly shardCount: number,
    private readonly open: ShardOpener,
    /** Runs once every shard store is closed (a `NodeLog` under the shard views closes here). */
    private readonly onClose?: () => Promise<void>,
  ) {
    shardOf('', shardCount); // refuses a shard count that is not a power of two up to 2^20
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
    try {
      const res = await shard.log.append(
        [bytes],
        opts.epoch === undefined ? { batchId: batchId() } : { batchId: batchId(), epoch: opts.epoch },
      );
      a.positions.push(res.first);
      a.lastSeq = entry.seq;
    } catch (e) {
      a.pendingSeq = a.lastSeq;
      throw storageFailure(e, iri, shard.n);
    }
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
    try {
      const res = await shard.log.append([bytes], opts.epoch === undefined ? {} : { epoch: opts.epoch });
      a.snapshotAt = res.first;
      a.positions = a.positions.filter((p) => p > res.first);
    } catch (e) {
      throw storageFailure(e, iri, shard.n);
    }
  }

  async history(iri: string): Promise<ActorHistory> {
    const shard = await this.shard(iri);
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
    let snapshot: ActorHistory['snapshot'];
    if (at !== undefined) {
      const r = await read(at);
      if (r.kind !== 'snapshot' || r.iri !== iri) throw corrupt(shard.n, at, undefined);
      snapshot = snapshotOfRecord(r);
    }
    const records = [];
    for (const p of positions) {
      const r = await read(p);
      if (r.kind !== 'macrostep' || r.iri !== iri) throw corrupt(shard.n, p, undefined);
      records.push(macrostepOfRecord(r));
    }
    return snapshot === undefined ? { records, lastSeq } : { snapshot, records, lastSeq };
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
        await (await p).log.close();
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
   * under `shards/`) or `node` (all shards in one store under `node/`, `NodeLog`: one group
   * commit across shards). An existing directory keeps its own.
   */
  readonly store?: 'shards' | 'node';
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
    const nl = await NodeLog.open(nodeDir, logOpts);
    return new LogJournalStorage(
      meta.shardCount,
      async (n) => nl.shard(n),
      () => nl.close(),
    );
  }
  return new LogJournalStorage(meta.shardCount, async (n) => {
    const d = shardDir(dir, n);
    await mkdir(d, { recursive: true });
    return openLog(d, logOpts);
  });
}

/**
 * An in-memory journal on `MemoryLog`s: the same behaviour, for fast tests. Passing the
 * same `states` map again is a restart that kept everything.
 */
export function memoryJournal(shardCount = 8, states: Map<number, MemoryLogState> = new Map()): LogJournalStorage {
  return new LogJournalStorage(shardCount, async (n) => {
    let s = states.get(n);
    if (s === undefined) {
      s = new MemoryLogState();
      states.set(n, s);
    }
    return new MemoryLog(s);
  });
}
