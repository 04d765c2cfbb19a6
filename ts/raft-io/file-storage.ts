/**
 * FileRaftStorage: the RaftStorage seam on the plexus log engine (ts/storage FileLog). Reads
 * are served from an in-memory mirror (a MemoryRaftStorage); every write updates the mirror at
 * once and is queued, in call order, as records of a journal (ts/codec/raft-journal.ts) in
 * the log. `sync()` resolves once every write made so far is durable: a driver calls it after
 * persisting a Ready and before sending its messages.
 *
 * A hard state that only moves the commit index (same term and vote as the last one written)
 * updates the mirror and is written to the journal with the next entries, term or vote change,
 * checkpoint or close, not on its own: the commit index need not be durable (after a restart
 * the leader tells it again, and re-applied entries are the application's duplicates), and
 * the journal is written with O_DSYNC, so a record of its own would cost a disk flush that
 * the next Ready's entries would queue behind.
 *
 * `compact` and `applySnapshot` write a checkpoint (the snapshot, the hard state and the
 * entries after the snapshot) as one batch, then let the log drop the segments before it, so
 * the journal stays about as large as the state it holds. On open, the journal is replayed from
 * its last checkpoint.
 */

import {
  decodeJournalRecord,
  encodeCheckpointRecord,
  encodeChunkRecord,
  encodeEntryRecord,
  encodeHardRecord,
  entryRecordBytes,
  KIND_CHECKPOINT,
  writeEntryRecord,
} from '../codec/raft-journal.js';
import { PlexusError } from '../core/errors.js';
import { RaftErrorCode, raftError } from '../raft/errors.js';
import { MemoryRaftStorage, type RaftInitialState, type RaftStorage, type RaftStorageWriter } from '../raft/storage.js';
import type { Entry, HardState, Snapshot } from '../raft/types.js';
import { type FileLogOptions, openLog } from '../storage/file-log.js';
import { MAX_RECORD_BYTES, RECORD_HEADER_BYTES } from '../storage/format.js';
import type { FramedBatch, LogStorage } from '../storage/types.js';

const CHUNK_BYTES = MAX_RECORD_BYTES - 16;

export class FileRaftStorage implements RaftStorage, RaftStorageWriter {
  private mirror: MemoryRaftStorage;
  private chain: Promise<void> = Promise.resolve();
  private failure: unknown;
  /** The term and vote of the last hard state written to the journal. */
  private written: { term: number; vote: number };
  /** A hard state newer than the journal's (only its commit index moved), written with the next record. */
  private hardDue: HardState | undefined;

  private constructor(
    private readonly log: LogStorage,
    mirror: MemoryRaftStorage,
  ) {
    this.mirror = mirror;
    const hs = mirror.initialState().hardState;
    this.written = { term: hs.term, vote: hs.vote };
  }

  /** Opens (or creates) the storage in `dir`, replaying its journal. */
  static async open(dir: string, opts: FileLogOptions = {}): Promise<FileRaftStorage> {
    const log = await openLog(dir, opts);
    try {
      return new FileRaftStorage(log, await replay(log));
    } catch (e) {
      await log.close();
      throw e;
    }
  }

  /** A founding member's storage (see MemoryRaftStorage.bootstrap); refused when `dir` already holds state. */
  static async bootstrap(
    dir: string,
    confState: Snapshot['metadata']['confState'],
    data: Uint8Array = new Uint8Array(0),
    opts: FileLogOptions = {},
  ): Promise<FileRaftStorage> {
    const s = await FileRaftStorage.open(dir, opts);
    if (s.log.last !== 0n) {
      await s.close();
      throw raftError(RaftErrorCode.BAD_CONFIG, `${dir} already holds Raft state; open it instead of bootstrapping`);
    }
    s.applySnapshot({ metadata: { index: 1, term: 1, confState }, data });
    s.setHardState({ term: 1, vote: 0, commit: 1 });
    await s.sync();
    return s;
  }

  // ---- reads (from the mirror) ----

  initialState(): RaftInitialState {
    return this.mirror.initialState();
  }
  entries(lo: number, hi: number, maxBytes?: number): Entry[] {
    return this.mirror.entries(lo, hi, maxBytes);
  }
  term(i: number): number {
    return this.mirror.term(i);
  }
  firstIndex(): number {
    return this.mirror.firstIndex();
  }
  lastIndex(): number {
    return this.mirror.lastIndex();
  }
  snapshot(): Snapshot {
    return this.mirror.snapshot();
  }

  // ---- writes (mirror now, journal in order) ----

  private write(records: Uint8Array[], checkpoint = false): void {
    if (records.length === 0) return;
    this.chain = this.chain.then(async () => {
      if (this.failure !== undefined) return;
      try {
        const r = await this.log.append(records);
        if (checkpoint) await this.log.compactBefore(r.first);
      } catch (e) {
        this.failure = e;
      }
    });
  }

  append(entries: readonly Entry[]): void {
    this.mirror.append(entries);
    const hard = this.hardDue ? encodeHardRecord(this.hardDue) : undefined;
    this.hardDue = undefined;
    if (entries.length === 0 && !hard) return;
    if (!this.log.appendFramed) {
      const records = entries.map(encodeEntryRecord);
      if (hard) records.push(hard);
      this.write(records);
      return;
    }
    // The records laid out as the log stores them (a header gap before each): the log writes
    // this buffer as it is, so each entry's bytes are copied once on the way to the disk.
    const count = entries.length + (hard ? 1 : 0);
    const lengths = new Uint32Array(count);
    let total = 0;
    for (let i = 0; i < entries.length; i++) {
      const n = entryRecordBytes(entries[i] as Entry);
      lengths[i] = n;
      total += RECORD_HEADER_BYTES + n;
    }
    if (hard) {
      lengths[count - 1] = hard.length;
      total += RECORD_HEADER_BYTES + hard.length;
    }
    const bytes = new Uint8Array(total);
    let off = 0;
    for (let i = 0; i < entries.length; i++) {
      writeEntryRecord(bytes, off + RECORD_HEADER_BYTES, entries[i] as Entry);
      off += RECORD_HEADER_BYTES + (lengths[i] as number);
    }
    if (hard) bytes.set(hard, off + RECORD_HEADER_BYTES);
    this.writeFramed({ bytes, lengths });
  }

  private writeFramed(batch: FramedBatch): void {
    const log = this.log as Required<Pick<LogStorage, 'appendFramed'>>;
    this.chain = this.chain.then(async () => {
      if (this.failure !== undefined) return;
      try {
        await log.appendFramed(batch);
      } catch (e) {
        this.failure = e;
      }
    });
  }

  setHardState(hs: HardState): void {
    this.mirror.setHardState(hs);
    if (hs.term === this.written.term && hs.vote === this.written.vote) {
      this.hardDue = hs;
      return;
    }
    this.hardDue = undefined;
    this.written = { term: hs.term, vote: hs.vote };
    this.write([encodeHardRecord(hs)]);
  }

  applySnapshot(snap: Snapshot): void {
    this.mirror.applySnapshot(snap);
    this.checkpoint();
  }

  compact(snap: Snapshot): void {
    this.mirror.compact(snap);
    this.checkpoint();
  }

  private checkpoint(): void {
    const snap = this.mirror.snapshot();
    const chunks: Uint8Array[] = [];
    for (let at = 0; at < snap.data.length; at += CHUNK_BYTES) chunks.push(snap.data.subarray(at, at + CHUNK_BYTES));
    const first = this.mirror.firstIndex();
    const last = this.mirror.lastIndex();
    const entries = last >= first ? this.mirror.entries(first, last + 1) : [];
    const hs = this.mirror.initialState().hardState;
    this.written = { term: hs.term, vote: hs.vote };
    this.hardDue = undefined;
    // A snapshot covers committed entries only: the commit index is at least its index (a
    // received snapshot arrives before the hard state that says so).
    const commit = Math.max(hs.commit, snap.metadata.index);
    this.write(
      [
        encodeCheckpointRecord(snap.metadata, chunks.length),
        ...chunks.map(encodeChunkRecord),
        encodeHardRecord({ ...hs, commit }),
        ...entries.map(encodeEntryRecord),
      ],
      true,
    );
  }

  /**
   * Whether the journal's durable writes run on the calling thread (`FileLog` option
   * `inlineSyncWrites`) from the next write on; a log without that choice ignores it.
   */
  setInlineSyncWrites(on: boolean): void {
    (this.log as { setInlineSyncWrites?(on: boolean): void }).setInlineSyncWrites?.(on);
  }

  /** Resolves once every write made so far is durable; rejects with PLX_RAFT_STORAGE_FAILED after a failed write. */
  async sync(): Promise<void> {
    await this.chain;
    if (this.failure !== undefined) {
      throw new PlexusError(
        RaftErrorCode.STORAGE_FAILED,
        'a Raft storage write failed; the node must stop (see the cause)',
        {},
        { cause: this.failure },
      );
    }
  }

  async close(): Promise<void> {
    if (this.hardDue) this.write([encodeHardRecord(this.hardDue)]);
    this.hardDue = undefined;
    await this.chain;
    await this.log.close();
  }
}

async function replay(log: LogStorage): Promise<MemoryRaftStorage> {
  const records: Uint8Array[] = [];
  if (log.last > 0n) {
    for (let from = log.first; from <= log.last; ) {
      const batch = await log.read(from, { maxBytes: 64 * 1024 * 1024 });
      if (batch.length === 0) break;
      for (const r of batch) records.push(r.payload);
      from = batch[batch.length - 1]!.position + 1n;
    }
  }
  const decoded = records.map(decodeJournalRecord);
  let start = 0;
  for (let i = 0; i < decoded.length; i++) if (decoded[i]!.kind === KIND_CHECKPOINT) start = i;
  if (log.first > 1n && decoded[start]?.kind !== KIND_CHECKPOINT) {
    throw raftError(RaftErrorCode.STORAGE_CORRUPT, 'the journal was compacted but holds no checkpoint');
  }
  const m = new MemoryRaftStorage();
  try {
    for (let i = start; i < decoded.length; i++) {
      const r = decoded[i]!;
      if (r.kind === 1) m.append([r.entry]);
      else if (r.kind === 2) m.setHardState(r.hard);
      else if (r.kind === 3) {
        const parts: Uint8Array[] = [];
        for (let k = 0; k < r.chunks; k++) {
          const c = decoded[++i];
          if (c?.kind !== 4) throw raftError(RaftErrorCode.STORAGE_CORRUPT, 'a checkpoint is missing a chunk');
          parts.push(c.data);
        }
        const data = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
        let at = 0;
        for (const p of parts) {
          data.set(p, at);
          at += p.length;
        }
        m.reset({ metadata: r.meta, data });
      } else {
        throw raftError(RaftErrorCode.STORAGE_CORRUPT, 'a snapshot chunk outside a checkpoint');
      }
    }
  } catch (e) {
    if (e instanceof Error && 'code' in e && e.code === RaftErrorCode.STORAGE_CORRUPT) throw e;
    throw raftError(RaftErrorCode.STORAGE_CORRUPT, `the journal does not replay: ${(e as Error).message}`);
  }
  return m;
}
