/**
 * `MultiplexedLog`: many logs (shards, numbered 0 .. 2^30-1) kept in a few log-engine stores
 * (lanes), so that appends of different shards made while a write is in flight go out in the
 * same group: one write and one fsync for all of them (the log engine's group commit), where
 * one store per shard costs one write and one fsync per shard. The actor runtime keeps the
 * shards of a node's journal in one (ts/runtime/journal-dir.ts). The on-disk format is in
 * docs/storage.md, "Multiplexed log".
 *
 * `shard(n)` is shard n's view as a `LogStorage` of its own: positions 1, 2, ... count that
 * shard's records only, an append carrying an epoch below the highest the shard accepted is
 * refused (`PLX_STORAGE_FENCED`), `expectedLast` compares against the shard's own last
 * position, and `compactBefore(p)` drops the shard's records below p. The view maps its
 * positions to the store's through an in-memory index of runs (consecutive shard positions
 * at consecutive store positions), built by one scan when the log opens. A shard cannot be
 * truncated (its records are interleaved with other shards' in the lane), so the view is a
 * `LogStorage` and not a `TruncatableLog`.
 *
 * The stores are lanes: shard n lives in lane `n % lanes` (1 by default, fixed when the
 * directory is made), each lane a log-engine store with one write in flight at a time, so
 * up to `lanes` groups are written at once while each groups the shards of its lane.
 *
 * Records of a lane, each the store record's payload, are laid out by plexus/codec
 * (ts/codec/multiplexed-log.ts):
 * - the first (legacy) format, shard and epoch; its shard position is one after the shard's
 *   previous record in the lane.
 * - a record with its shard position; written by appends and by compaction, which copies a
 *   live record forward (the later copy of a position wins when the lane is read).
 * - a mark written by compaction: the shard's records below `start` are compacted, its last
 *   position is at least `last`, its highest epoch at least `highest epoch`, and its last
 *   first-format record has position `old last` (so the first-format records left after a
 *   compaction still know their positions).
 * A lane is compacted once enough of its records are dead (below their shard's compaction
 * point) and at least as many are dead as live: its live records below the lane's last
 * position are copied forward, marks written, and the store compacts before the copies.
 *
 * The directory holds one store directory per lane, `lane-<i>/`.
 */
import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import {
  decodeLaneRecord,
  encodeMark,
  encodePositioned,
  LANE_F_MARK,
  LANE_HEADER,
  LANE_OLD_HEADER,
  LANE_SHARD_BITS,
  laneEpoch,
  lanePayloadOffset,
  lanePosition,
  laneWord,
  positionedWord,
  writePositionedHeader,
} from '../codec/multiplexed-log.js';
import { type PlexusCode, PlexusError } from '../core/errors.js';
import { checkAppend, checkPosition, checkReadOptions } from './checks.js';
import { closedError } from './errors.js';
import { type FileLogOptions, openLog } from './file-log.js';
import { MAX_BATCH_RECORDS, RECORD_HEADER_BYTES } from './format.js';
import type { AppendOptions, AppendResult, LogRecord, LogStorage, ReadOptions } from './types.js';

/** Lanes of a new multiplexed log: shard n is in lane n % lanes, each lane one store with one write in flight. */
export const DEFAULT_LANES = 1;
/** Dead records a lane gathers before it is compacted (`LaneCompaction.deadRecords`). */
export const DEFAULT_LANE_COMPACT_RECORDS = 65_536;

/** Payload bytes of one batch of copies. */
const COPY_BATCH_BYTES = 4 * 1024 * 1024;

function storageFailure(code: PlexusCode, message: string, details: Record<string, unknown>): PlexusError {
  return new PlexusError(code, message, details);
}

/**
 * Shard positions mapped to store positions as runs: run i covers shard positions
 * `pos[i] .. pos[i] + len[i] - 1` at store positions `lane[i] ...`, runs ascending by shard
 * position. Runs before `head` are dropped (compacted).
 */
export class PositionRuns {
  private pos: number[] = [];
  private lane: number[] = [];
  private len: number[] = [];
  private head = 0;
  /** Shard positions covered. */
  count = 0;

  get runs(): number {
    return this.pos.length - this.head;
  }
  /** The lowest position covered, 0 when none. */
  get first(): number {
    return this.runs === 0 ? 0 : (this.pos[this.head] as number);
  }
  /** The highest position covered, 0 when none. */
  get end(): number {
    const i = this.pos.length - 1;
    return this.runs === 0 ? 0 : (this.pos[i] as number) + (this.len[i] as number) - 1;
  }

  /** The last run starting at or before `p`, or head - 1. */
  private find(p: number): number {
    let lo = this.head;
    let hi = this.pos.length - 1;
    let at = this.head - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.pos[mid] as number) <= p) {
        at = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return at;
  }

  /** The store position of shard position `p`, or -1. */
  lookup(p: number): number {
    const i = this.find(p);
    if (i < this.head) return -1;
    const k = p - (this.pos[i] as number);
    return k < (this.len[i] as number) ? (this.lane[i] as number) + k : -1;
  }

  /** The run holding `p`: store position and how many positions from `p` on follow it there; undefined when none. */
  runAt(p: number): { lane: number; n: number } | undefined {
    const i = this.find(p);
    if (i < this.head) return undefined;
    const k = p - (this.pos[i] as number);
    const len = this.len[i] as number;
    return k < len ? { lane: (this.lane[i] as number) + k, n: len - k } : undefined;
  }

  /** Maps `p` to store position `l` (a later copy of `p` replaces the earlier one). */
  assign(p: number, l: number): void {
    const n = this.pos.length;
    if (this.runs === 0 || p > this.end) {
      const i = n - 1;
      if (this.runs > 0 && p === this.end + 1 && l === (this.lane[i] as number) + (this.len[i] as number)) {
        this.len[i] = (this.len[i] as number) + 1;
      } else {
        this.pos.push(p);
        this.lane.push(l);
        this.len.push(1);
      }
      this.count++;
      return;
    }
    const i = this.find(p);
    if (i < this.head || p >= (this.pos[i] as number) + (this.len[i] as number)) {
      // a position in no run: a run of its own after run i
      this.pos.splice(i + 1, 0, p);
      this.lane.splice(i + 1, 0, l);
      this.len.splice(i + 1, 0, 1);
      this.count++;
      return;
    }
    const k = p - (this.pos[i] as number);
    if ((this.lane[i] as number) + k === l) return;
    const prev = i - 1;
    if (
      k === 0 &&
      prev >= this.head &&
      (this.pos[prev] as number) + (this.len[prev] as number) === p &&
      (this.lane[prev] as number) + (this.len[prev] as number) === l
    ) {
      // the next of a run of copies: the previous run grows, this one loses its head
      this.len[prev] = (this.len[prev] as number) + 1;
      this.pos[i] = p + 1;
      this.lane[i] = (this.lane[i] as number) + 1;
      this.len[i] = (this.len[i] as number) - 1;
      if (this.len[i] === 0) {
        this.pos.splice(i, 1);
        this.lane.splice(i, 1);
        this.len.splice(i, 1);
      }
      return;
    }
    const len = this.len[i] as number;
    const lane = this.lane[i] as number;
    const ps: number[] = [];
    const ls: number[] = [];
    const ns: number[] = [];
    if (k > 0) {
      ps.push(this.pos[i] as number);
      ls.push(lane);
      ns.push(k);
    }
    ps.push(p);
    ls.push(l);
    ns.push(1);
    if (len - k - 1 > 0) {
      ps.push(p + 1);
      ls.push(lane + k + 1);
      ns.push(len - k - 1);
    }
    this.pos.splice(i, 1, ...ps);
    this.lane.splice(i, 1, ...ls);
    this.len.splice(i, 1, ...ns);
  }

  /** Drops every position below `p`; returns how many were covered. */
  dropBelow(p: number): number {
    let dropped = 0;
    while (this.runs > 0 && (this.pos[this.head] as number) + (this.len[this.head] as number) <= p) {
      dropped += this.len[this.head] as number;
      this.head++;
    }
    if (this.runs > 0 && (this.pos[this.head] as number) < p) {
      const k = p - (this.pos[this.head] as number);
      this.pos[this.head] = p;
      this.lane[this.head] = (this.lane[this.head] as number) + k;
      this.len[this.head] = (this.len[this.head] as number) - k;
      dropped += k;
    }
    if (this.head > 0 && (this.runs === 0 || this.head * 2 > this.pos.length)) {
      this.pos.splice(0, this.head);
      this.lane.splice(0, this.head);
      this.len.splice(0, this.head);
      this.head = 0;
    }
    this.count -= dropped;
    return dropped;
  }

  /** Every (shard position, store position) with the store position below `below`, ascending by shard position. */
  below(below: number): { pos: number; lane: number }[] {
    const out: { pos: number; lane: number }[] = [];
    for (let i = this.head; i < this.pos.length; i++) {
      const l = this.lane[i] as number;
      const n = Math.min(this.len[i] as number, below - l);
      for (let k = 0; k < n; k++) out.push({ pos: (this.pos[i] as number) + k, lane: l + k });
    }
    return out;
  }
}

/**
 * The highest position through which every position is known (indexed), given ranges that
 * complete in any order: a compaction cuts only below it, so that a record the store has
 * acknowledged but whose caller has not indexed it yet is never dropped.
 */
export class IndexedThrough {
  private readonly ahead = new Map<number, number>();
  constructor(public through = 0) {}
  /** Positions `first .. last` are indexed. */
  add(first: number, last: number): void {
    if (first > this.through + 1) {
      this.ahead.set(first, last);
      return;
    }
    if (last > this.through) this.through = last;
    for (let next = this.ahead.get(this.through + 1); next !== undefined; next = this.ahead.get(this.through + 1)) {
      this.ahead.delete(this.through + 1);
      this.through = next;
    }
  }
}

/** When a multiplexed log compacts a lane. */
export interface LaneCompaction {
  /**
   * Compact a lane once this many of its records are dead (below their shard's compaction
   * point) and at least as many are dead as live (default 65 536; 0 = never).
   */
  readonly deadRecords?: number;
}

class Lane {
  /** Records of the lane's shards at or above their shard's start. */
  live = 0;
  /** Records that died since the lane was opened or last compacted. */
  dead = 0;
  /** Bumped when a compaction moved records: a read that missed a record looks it up again. */
  gen = 0;
  compacting: Promise<void> | undefined;
  readonly shards = new Set<ShardIndex>();
  /** Store positions indexed (or known dead): a compaction cuts below `indexed.through + 1`. */
  readonly indexed = new IndexedThrough();
  constructor(
    readonly i: number,
    readonly store: LogStorage,
  ) {}
}

class ShardIndex {
  /** Shard positions to store positions. */
  readonly runs = new PositionRuns();
  /** Positions below this one are compacted. */
  start = 1;
  /** The last acknowledged position. */
  last = 0;
  /** The last position given to an append (acknowledged or not). */
  assigned = 0;
  /** The position of the shard's last first-format record (0: none). */
  oldLast = 0;
  highestEpoch = 0n;
  /** Appends called and not yet settled. */
  pending = 0;
  constructor(
    readonly n: number,
    /** The lane holding the shard (lane `n % lanes`). */
    readonly lane: Lane,
  ) {}
  get store(): LogStorage {
    return this.lane.store;
  }
}

/** One shard's records of a `MultiplexedLog`, as a `LogStorage`. */
class ShardLog implements LogStorage {
  private closed = false;
  constructor(
    private readonly node: MultiplexedLog,
    private readonly ix: ShardIndex,
  ) {}

  /** Refuses every call once the view is closed, as a store of its own would. */
  private open(): void {
    if (this.closed) throw closedError(`shard ${this.ix.n} of a multiplexed log`);
  }

  get first(): bigint {
    return BigInt(this.ix.runs.first);
  }
  get last(): bigint {
    return BigInt(this.ix.last);
  }
  get highestEpoch(): bigint {
    return this.ix.highestEpoch;
  }

  append(payloads: readonly Uint8Array[], opts: AppendOptions = {}): Promise<AppendResult> {
    try {
      this.open();
      checkAppend(payloads, opts);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.node.append(this.ix, payloads, opts);
  }

  /** Reads `n` records of the shard from store position `lane` on, as shard positions `pos` ... */
  private async readRun(pos: number, lane: number, n: number, maxBytes: number): Promise<LogRecord[]> {
    // The lane's records carry a header of up to LANE_HEADER bytes before the shard's payload; the
    // budget is the shard's payload bytes, which `collect` counts.
    const laneBytes = maxBytes + LANE_HEADER * n;
    const recs = await this.ix.store.read(BigInt(lane), {
      maxCount: n,
      maxBytes: Number.isSafeInteger(laneBytes) ? laneBytes : Number.POSITIVE_INFINITY,
    });
    const out: LogRecord[] = [];
    for (let k = 0; k < recs.length; k++) {
      const rec = recs[k] as LogRecord;
      const b = rec.payload;
      const word = b.length >= LANE_OLD_HEADER ? laneWord(b) : LANE_F_MARK;
      if (rec.position !== BigInt(lane + k) || (word & LANE_F_MARK) !== 0 || (word & LANE_SHARD_BITS) !== this.ix.n) {
        throw storageFailure('PLX_STORAGE_CORRUPT', `the node log lacks record ${pos + k} of shard ${this.ix.n}`, {
          shard: this.ix.n,
        });
      }
      const skip = lanePayloadOffset(word);
      if (skip === LANE_HEADER && (b.length < LANE_HEADER || lanePosition(b) !== BigInt(pos + k))) {
        throw storageFailure('PLX_STORAGE_CORRUPT', `the node log lacks record ${pos + k} of shard ${this.ix.n}`, {
          shard: this.ix.n,
        });
      }
      out.push({
        position: BigInt(pos + k),
        batchId: rec.batchId,
        epoch: laneEpoch(b),
        payload: b.subarray(skip),
      });
    }
    return out;
  }

  /** Up to 64 runs from shard position `p` on (downwards when `step` is -1), read at once. */
  private async chunk(
    p: number,
    step: 1 | -1,
    room: number,
    maxBytes: number,
  ): Promise<{ got: LogRecord[][]; short: boolean }> {
    const reads: { pos: number; lane: number; n: number }[] = [];
    const first = this.ix.runs.first;
    let want = 0;
    while (reads.length < 64 && first > 0 && p >= first && p <= this.ix.last && want < room) {
      const r = this.ix.runs.runAt(p);
      if (r === undefined) break;
      if (step > 0) {
        const n = Math.min(r.n, room - want, this.ix.last - p + 1);
        reads.push({ pos: p, lane: r.lane, n });
        want += n;
        p += n;
      } else {
        reads.push({ pos: p, lane: r.lane, n: 1 });
        want++;
        p--;
      }
    }
    const got = await Promise.all(reads.map((r) => this.readRun(r.pos, r.lane, r.n, maxBytes)));
    // a run cut short by maxBytes ends the chunk
    const k = reads.findIndex((r, i) => (got[i] as LogRecord[]).length < r.n);
    return k < 0 ? { got, short: false } : { got: got.slice(0, k + 1), short: true };
  }

  private async collect(from: number, step: 1 | -1, opts: ReadOptions): Promise<LogRecord[]> {
    const maxCount = opts.maxCount ?? Number.POSITIVE_INFINITY;
    const maxBytes = opts.maxBytes ?? 8 * 1024 * 1024;
    const out: LogRecord[] = [];
    let bytes = 0;
    let p = from;
    while (out.length < maxCount) {
      const at = p;
      const { got, short } = await this.node.reading(this.ix, () =>
        this.chunk(at, step, maxCount - out.length, maxBytes),
      );
      let n = 0;
      for (const recs of got) {
        for (const r of recs) {
          if (out.length > 0 && bytes + r.payload.length > maxBytes) return out;
          bytes += r.payload.length;
          out.push(r);
          n++;
        }
      }
      // none left, or a run cut short by maxBytes: the budget is spent
      if (n === 0 || short) return out;
      p += step * n;
    }
    return out;
  }

  private below(from: bigint, what: string): void {
    if (from >= 1n && from < this.first && this.ix.start > 1) {
      throw storageFailure(
        'PLX_STORAGE_COMPACTED',
        `position ${from} of shard ${this.ix.n} is below the first stored record ${this.first}: it was compacted away (${what} from ${this.first})`,
        { position: from, first: this.first, shard: this.ix.n },
      );
    }
  }

  async read(from: bigint, opts: ReadOptions = {}): Promise<LogRecord[]> {
    this.open();
    checkPosition(from, 'read from', 1);
    checkReadOptions(opts);
    this.below(from, 'read');
    return this.collect(Math.max(Number(from), this.ix.runs.first), 1, opts);
  }
  async readBackward(from: bigint, opts: ReadOptions = {}): Promise<LogRecord[]> {
    this.open();
    checkPosition(from, 'readBackward from', 1);
    checkReadOptions(opts);
    const f = from > BigInt(this.ix.last) ? this.ix.last : Number(from);
    if (f < 1) return [];
    this.below(BigInt(f), 'readBackward');
    return this.collect(f, -1, opts);
  }
  /**
   * Drops the shard's records below `position` from the view at once; the lane reclaims
   * their space when it compacts (they may come back after a restart until then).
   */
  async compactBefore(position: bigint): Promise<void> {
    this.open();
    if (typeof position !== 'bigint' || position < 0n) {
      throw storageFailure(
        'PLX_STORAGE_BAD_INPUT',
        `compactBefore needs a position of 0 or more, got ${String(position)}`,
        {
          shard: this.ix.n,
        },
      );
    }
    // Resolves once the lane has reclaimed what this made dead, when that started a lane
    // compaction (its failure is counted in the multiplexed log, and the next drop retries it).
    await this.node.compactShard(this.ix, Number(position))?.catch(() => {});
  }
  /**
   * Closes this view: later calls on it fail with `PLX_STORAGE_CLOSED`, and `shard(n)` gives
   * a new view. The multiplexed log stays open: `MultiplexedLog.close()` closes it.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.node.forget(this.ix.n, this);
  }
}

export class MultiplexedLog {
  private readonly shards = new Map<number, ShardIndex>();
  private readonly views = new Map<number, ShardLog>();
  private readonly lanes: Lane[];
  private readonly deadRecords: number;
  private closed = false;
  /** Lane compactions that failed (the lane stays as it was; the next one tries again). */
  compactionFailures = 0;
  /** Lane compactions completed. */
  compactions = 0;

  /** Lanes with a compaction running now (for tools and tests). */
  get compactionsRunning(): number {
    let n = 0;
    for (const l of this.lanes) if (l.compacting !== undefined) n++;
    return n;
  }

  private constructor(
    readonly stores: readonly LogStorage[],
    compaction: LaneCompaction,
  ) {
    this.lanes = stores.map((s, i) => new Lane(i, s));
    const d = compaction.deadRecords ?? DEFAULT_LANE_COMPACT_RECORDS;
    if (!Number.isSafeInteger(d) || d < 0) {
      throw storageFailure('PLX_STORAGE_BAD_INPUT', `deadRecords must be a whole number of 0 or more, got ${d}`, {});
    }
    this.deadRecords = d;
  }

  /**
   * Opens (or creates) the multiplexed log in `dir` and indexes it by shard. A new directory gets
   * `lanes` lane stores (`lane-0/` ...; default 1); an existing one keeps its own.
   */
  static async open(
    dir: string,
    opts: FileLogOptions = {},
    lanes = DEFAULT_LANES,
    compaction: LaneCompaction = {},
  ): Promise<MultiplexedLog> {
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
      return await MultiplexedLog.over(stores, compaction);
    } catch (e) {
      for (const st of stores) await st.close().catch(() => {});
      throw e;
    }
  }

  /** A multiplexed log over given lane stores (`MemoryLog`s in tests); they are indexed here. */
  static async over(
    stores: LogStorage | readonly LogStorage[],
    compaction: LaneCompaction = {},
  ): Promise<MultiplexedLog> {
    const nl = new MultiplexedLog(Array.isArray(stores) ? stores : [stores as LogStorage], compaction);
    for (const lane of nl.lanes) await nl.scan(lane);
    return nl;
  }

  private async scan(lane: Lane): Promise<void> {
    const store = lane.store;
    let from = store.first === 0n ? 1n : store.first;
    const last = store.last;
    /** Store positions of first-format records per shard (they come before any other record of the lane). */
    const old = new Map<ShardIndex, number[]>();
    /** Records with their shard position, per shard, before the first-format ones are placed. */
    const later = new Map<ShardIndex, PositionRuns>();
    while (from <= last) {
      const batch = await store.read(from, { maxBytes: 8 * 1024 * 1024 });
      if (batch.length === 0) break;
      for (const rec of batch) {
        const b = rec.payload;
        const short = () =>
          storageFailure(
            'PLX_STORAGE_CORRUPT',
            `record ${rec.position} of the node journal log is too short to be a shard record`,
            { position: rec.position },
          );
        if (b.length < LANE_OLD_HEADER) throw short();
        const word = laneWord(b);
        const n = word & LANE_SHARD_BITS;
        const r = decodeLaneRecord(b);
        if (n % this.lanes.length !== lane.i || r === 'kind') {
          throw storageFailure(
            'PLX_STORAGE_CORRUPT',
            `record ${rec.position} of lane ${lane.i} of the node journal log belongs to shard ${n}, which is not in that lane`,
            { position: rec.position, lane: lane.i, shard: n },
          );
        }
        const ix = this.index(n);
        const e = laneEpoch(b);
        if (e > ix.highestEpoch) ix.highestEpoch = e;
        if (r === 'short') throw short();
        if (r.kind === 'mark') {
          ix.start = Math.max(ix.start, r.start);
          ix.last = Math.max(ix.last, r.last);
          ix.oldLast = Math.max(ix.oldLast, r.oldLast);
        } else if (r.kind === 'positioned') {
          const p = r.position;
          let runs = later.get(ix);
          if (runs === undefined) {
            runs = new PositionRuns();
            later.set(ix, runs);
          }
          runs.assign(p, Number(rec.position));
          if (p > ix.last) ix.last = p;
        } else {
          let at = old.get(ix);
          if (at === undefined) {
            at = [];
            old.set(ix, at);
          }
          at.push(Number(rec.position));
        }
      }
      from = (batch[batch.length - 1]?.position ?? last) + 1n;
    }
    let live = 0;
    for (const ix of lane.shards) {
      // First-format records count from 1, or (after a compaction dropped some) up to the
      // last one's position as the marks keep it.
      const at = old.get(ix) ?? [];
      if (ix.oldLast === 0) ix.oldLast = at.length;
      const base = ix.oldLast - at.length + 1;
      for (let k = 0; k < at.length; k++) ix.runs.assign(base + k, at[k] as number);
      if (ix.oldLast > ix.last) ix.last = ix.oldLast;
      const runs = later.get(ix);
      if (runs !== undefined) for (const e of runs.below(Number.MAX_SAFE_INTEGER)) ix.runs.assign(e.pos, e.lane);
      ix.runs.dropBelow(ix.start);
      ix.assigned = ix.last;
      live += ix.runs.count;
    }
    lane.live = live;
    lane.dead = Math.max(0, (store.first === 0n ? 0 : Number(store.last - store.first) + 1) - live);
    lane.indexed.through = Number(last);
  }

  private index(n: number): ShardIndex {
    let ix = this.shards.get(n);
    if (ix === undefined) {
      const lane = this.lanes[n % this.lanes.length] as Lane;
      ix = new ShardIndex(n, lane);
      lane.shards.add(ix);
      this.shards.set(n, ix);
    }
    return ix;
  }

  /** Shard `n`'s view (the same object on every call). */
  shard(n: number): LogStorage {
    let v = this.views.get(n);
    if (v === undefined) {
      if (!Number.isInteger(n) || n < 0 || n > LANE_SHARD_BITS) {
        throw storageFailure(
          'PLX_STORAGE_BAD_INPUT',
          `a shard is a whole number from 0 to ${LANE_SHARD_BITS}, got ${n}`,
          {},
        );
      }
      v = new ShardLog(this, this.index(n));
      this.views.set(n, v);
    }
    return v;
  }

  /** Drops a closed view, so that `shard(n)` makes a new one. */
  forget(n: number, view: LogStorage): void {
    if (this.views.get(n) === view) this.views.delete(n);
  }

  /** Whether shard `n` holds at least one record. */
  holds(n: number): boolean {
    return (this.shards.get(n)?.last ?? 0) > 0;
  }

  /** The shards holding at least one record. */
  heldShards(): number[] {
    return [...this.shards.values()].filter((ix) => ix.last > 0).map((ix) => ix.n);
  }

  /** Records of the lanes, live and dead (for tools and tests). */
  laneStats(): { live: number; dead: number; stored: number }[] {
    return this.lanes.map((l) => ({
      live: l.live,
      dead: l.dead,
      stored: l.store.first === 0n ? 0 : Number(l.store.last - l.store.first) + 1,
    }));
  }

  /** The size of the in-memory index: runs and the shard positions they cover (for tools and tests). */
  indexSize(): { runs: number; positions: number } {
    let runs = 0;
    let positions = 0;
    for (const ix of this.shards.values()) {
      runs += ix.runs.runs;
      positions += ix.runs.count;
    }
    return { runs, positions };
  }

  /**
   * Runs a read of shard positions mapped through the index; a read that missed a record
   * because a compaction of the lane moved it (the index changed under it) runs again.
   */
  async reading<T>(ix: ShardIndex, fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const gen = ix.lane.gen;
      try {
        return await fn();
      } catch (e) {
        if (attempt >= 3 || ix.lane.gen === gen) throw e;
      }
    }
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
    const expected = BigInt(ix.assigned);
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
    const first = ix.assigned + 1;
    ix.assigned += payloads.length;
    const word = positionedWord(ix.n);
    let appended: Promise<AppendResult>;
    if (ix.store.appendFramed !== undefined) {
      // One buffer laid out as the store keeps it (record header gap, shard header, payload):
      // the payload is copied once, and the store writes it as it is.
      let size = 0;
      for (const p of payloads) size += RECORD_HEADER_BYTES + LANE_HEADER + p.length;
      const bytes = Buffer.allocUnsafe(size);
      const lengths: number[] = [];
      let at = 0;
      let pos = first;
      for (const p of payloads) {
        at += RECORD_HEADER_BYTES;
        writePositionedHeader(bytes, at, word, epoch, pos++);
        bytes.set(p, at + LANE_HEADER);
        at += LANE_HEADER + p.length;
        lengths.push(LANE_HEADER + p.length);
      }
      appended = ix.store.appendFramed({ bytes, lengths }, storeOpts);
    } else {
      let pos = first;
      appended = ix.store.append(
        payloads.map((p) => encodePositioned(word, epoch, pos++, p)),
        storeOpts,
      );
    }
    if (epoch > ix.highestEpoch) ix.highestEpoch = epoch;
    ix.pending++;
    return appended.then(
      (res) => {
        ix.pending--;
        const count = Number(res.last - res.first) + 1;
        const at = Number(res.first);
        for (let k = 0; k < count; k++) ix.runs.assign(first + k, at + k);
        if (first + count - 1 > ix.last) ix.last = first + count - 1;
        ix.lane.live += count;
        ix.lane.indexed.add(at, at + count - 1);
        return { first: BigInt(first), last: BigInt(first + count - 1), batchId: res.batchId };
      },
      (e) => {
        ix.pending--;
        // Later appends of the shard failed with it (the store refuses everything after a failed write).
        if (ix.pending === 0) ix.assigned = ix.last;
        throw e;
      },
    );
  }

  /**
   * Drops shard positions below `position` from the index; the lane reclaims them when it
   * compacts. Returns the lane compaction this started or found running, if any.
   */
  compactShard(ix: ShardIndex, position: number): Promise<void> | undefined {
    const p = Math.min(position, ix.last + 1);
    if (p <= ix.start) return undefined;
    ix.start = p;
    const dropped = ix.runs.dropBelow(p);
    ix.lane.live -= dropped;
    ix.lane.dead += dropped;
    return this.maybeCompactLane(ix.lane);
  }

  /** Starts a compaction of the lane once enough of it is dead (as many dead records as live, and `deadRecords`). */
  private maybeCompactLane(lane: Lane): Promise<void> | undefined {
    if (this.deadRecords > 0 && lane.dead >= this.deadRecords && lane.dead >= lane.live && !this.closed) {
      return this.compactLane(lane);
    }
    return lane.compacting;
  }

  /** Compacts a lane (one compaction at a time per lane); resolves when it has finished. */
  compactLane(lane: Lane | number): Promise<void> {
    const l = typeof lane === 'number' ? (this.lanes[lane] as Lane) : lane;
    if (l.compacting === undefined) {
      l.compacting = this.runCompaction(l)
        .then(
          (diedMeanwhile) => {
            this.compactions++;
            return diedMeanwhile;
          },
          () => {
            this.compactionFailures++;
            return 0;
          },
        )
        .then((diedMeanwhile) => {
          l.compacting = undefined;
          // Records that died while it ran asked for a compaction that found this one running:
          // look again. Not after a failure (the next dropped records retry), and not for the
          // marks a compaction writes itself, which would start one after another.
          if (diedMeanwhile > 0) void this.maybeCompactLane(l);
        });
    }
    return l.compacting;
  }

  /**
   * Copies every live record of the lane below its last position forward (with its shard
   * position), writes a mark per shard, then compacts the store before the copies. A crash
   * at any point leaves every live record in the lane (the originals until the copies are
   * durable, the copies after); a later copy of a position replaces the earlier one.
   * Returns how many records died while it ran.
   */
  private async runCompaction(lane: Lane): Promise<number> {
    const store = lane.store;
    // Every store position below the cut is indexed (a record acknowledged by the store whose
    // append has not been indexed yet is above it).
    const cut = lane.indexed.through + 1;
    const deadBefore = lane.dead;
    // What to copy: every live record below the cut, in store order.
    const want: { ix: ShardIndex; pos: number; lane: number }[] = [];
    for (const ix of lane.shards) for (const e of ix.runs.below(cut)) want.push({ ix, pos: e.pos, lane: e.lane });
    want.sort((a, b) => a.lane - b.lane);
    const copied: { ix: ShardIndex; pos: number; lane: number }[] = [];
    let batch: Uint8Array[] = [];
    let batchOf: { ix: ShardIndex; pos: number }[] = [];
    let bytes = 0;
    const flush = async () => {
      if (batch.length === 0) return;
      // Each shard's copies together, in position order: one run per shard and batch.
      const order = batchOf.map((_, k) => k);
      order.sort((x, y) => {
        const a = batchOf[x] as { ix: ShardIndex; pos: number };
        const b = batchOf[y] as { ix: ShardIndex; pos: number };
        return a.ix.n - b.ix.n || a.pos - b.pos;
      });
      batch = order.map((k) => batch[k] as Uint8Array);
      batchOf = order.map((k) => batchOf[k] as { ix: ShardIndex; pos: number });
      const res = await store.append(batch);
      const at = Number(res.first);
      lane.indexed.add(at, Number(res.last));
      for (let k = 0; k < batchOf.length; k++)
        copied.push({ ...(batchOf[k] as { ix: ShardIndex; pos: number }), lane: at + k });
      batch = [];
      batchOf = [];
      bytes = 0;
    };
    let w = 0;
    let from = store.first === 0n ? 1 : Number(store.first);
    while (w < want.length) {
      const next = want[w] as { lane: number };
      if (from < next.lane) from = next.lane;
      const recs = await store.read(BigInt(from), { maxBytes: COPY_BATCH_BYTES });
      if (recs.length === 0) throw storageFailure('PLX_STORAGE_CORRUPT', `lane ${lane.i} ends before ${from}`, {});
      for (const rec of recs) {
        const p = Number(rec.position);
        while (w < want.length && (want[w] as { lane: number }).lane < p) w++;
        const it = want[w];
        if (it === undefined || it.lane !== p) continue;
        w++;
        const b = rec.payload;
        const skip = lanePayloadOffset(laneWord(b));
        batch.push(encodePositioned(positionedWord(it.ix.n), laneEpoch(b), it.pos, b.subarray(skip)));
        batchOf.push({ ix: it.ix, pos: it.pos });
        bytes += b.length + 8;
        if (bytes >= COPY_BATCH_BYTES || batch.length >= MAX_BATCH_RECORDS) await flush();
      }
      from = Number(recs[recs.length - 1]?.position ?? BigInt(from)) + 1;
    }
    let marks = 0;
    // The marks: each shard's start, last and highest epoch outlive the records below the cut.
    for (const ix of lane.shards) {
      if (ix.last === 0 && ix.highestEpoch === 0n) continue;
      const m = encodeMark(ix.n, ix.highestEpoch, ix.start, ix.last, ix.oldLast);
      batch.push(m);
      batchOf.push({ ix, pos: 0 });
      bytes += m.length;
      marks++;
    }
    await flush();
    // Point the index at the copies (a position compacted meanwhile stays dropped).
    for (const c of copied) {
      if (c.pos === 0 || c.pos < c.ix.start) continue;
      c.ix.runs.assign(c.pos, c.lane);
    }
    lane.gen++;
    await store.compactBefore(BigInt(cut));
    const diedMeanwhile = Math.max(0, lane.dead - deadBefore);
    lane.dead = diedMeanwhile + marks;
    return diedMeanwhile;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const l of this.lanes) await l.compacting;
    for (const st of this.stores) await st.close();
  }
}
