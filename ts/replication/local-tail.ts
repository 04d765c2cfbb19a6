/**
 * The durability of a member's local log of committed records (`<dir>/log/`) when it is
 * written without an fsync on the acknowledgement path (`localFsync: 'never'`, the default):
 * see docs/chronacta-ha.md, "Durability of the local log".
 *
 * The Raft log is the durable source of truth; the local log is derived from it. So the local
 * log only has to be durable where the Raft log no longer holds what it was derived from:
 * `syncLocalLog` fsyncs its segment files and directory, and the replicated log calls it before
 * a Raft snapshot compacts Raft entries away and before the local log itself is compacted.
 * After a power loss, anything past the last such sync may be lost or damaged, in any
 * segment. A clean close fsyncs the log and then leaves a marker (`log.clean`), which the next
 * open removes before anything is written; an open that finds no marker (the member crashed or
 * lost power) checks every record of the log (`scanOnOpen: 'all'`), and `cutDamagedTail` cuts
 * the log at its first damaged record (the storage engine refuses such a directory) so that it
 * opens again. The member then re-applies the rest from its Raft log (or, below its Raft
 * snapshot, fetches it from another member).
 */
import { open, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ClockTimers, TimerHandle } from '../core/clock.js';
import { isPlexusError } from '../core/errors.js';
import { type FileLog, openLog } from '../storage/file-log.js';
import { indexName, parseSegmentName, SEGMENT_HEADER_BYTES } from '../storage/format.js';
import type { StorageLogger } from '../storage/types.js';
import { verifyLog } from '../storage/verify.js';

/** In the replicated log's directory: the local log was closed cleanly and fsynced. */
export const CLEAN_MARKER = 'log.clean';

/** Segment files already fsynced after they were closed (a closed segment never changes again). */
export type SyncedSegments = Set<string>;

async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Makes every record written to the log in `dir` so far durable: fsyncs the segment files
 * not synced since they were closed (`files`: the log's segment names, oldest first; the last
 * one is open) and the directory (new and removed segment files). Call it once the appends to
 * cover have completed.
 */
export async function syncLocalLog(dir: string, files: readonly string[], synced: SyncedSegments): Promise<void> {
  for (let i = 0; i < files.length; i++) {
    const name = files[i] as string;
    if (synced.has(name)) continue;
    await fsyncPath(join(dir, name));
    if (i < files.length - 1) synced.add(name);
  }
  await fsyncPath(dir);
  for (const name of synced) if (!files.includes(name)) synced.delete(name);
}

/**
 * A log in `dir` that the storage engine refuses to open because of damage (not a torn tail,
 * which it repairs itself): cuts it at the first damaged byte, so that it opens again with the
 * records before it. The segment holding the damage is truncated there (removed when the
 * damage is in its header), every later segment and the index files of the cut ones are
 * removed, and the directory is fsynced. Returns what was cut, or undefined when verifyLog
 * finds no damage it could cut (the meta file, say): then nothing was changed.
 */
export async function cutDamagedTail(
  dir: string,
  logger?: StorageLogger,
): Promise<{ file: string; offset: number; reason: string; removed: string[] } | undefined> {
  const report = await verifyLog(dir);
  let cut: { base: number; file: string; offset: number; reason: string } | undefined;
  for (const p of report.problems) {
    if (p.severity !== 'fatal') continue;
    const base = parseSegmentName(p.file);
    if (base === undefined) return undefined; // the meta file or another file: not a tail to cut
    if (!cut || base < cut.base || (base === cut.base && p.offset < cut.offset)) {
      cut = { base, file: p.file, offset: p.offset, reason: p.reason };
    }
  }
  if (!cut) return undefined;
  const removed: string[] = [];
  const names = (await readdir(dir)).sort();
  // Newest first, so that a crash in between leaves a prefix of the segments.
  for (const name of [...names].reverse()) {
    const base = parseSegmentName(name);
    if (base === undefined || base <= cut.base) continue;
    await rm(join(dir, name), { force: true });
    removed.push(name);
  }
  for (const name of names) {
    const seg = /^(\d{20})\.idx$/.exec(name);
    if (seg && Number(seg[1]) >= cut.base) await rm(join(dir, name), { force: true });
  }
  if (cut.offset < SEGMENT_HEADER_BYTES) {
    await rm(join(dir, cut.file), { force: true });
    await rm(join(dir, indexName(cut.base)), { force: true });
    removed.push(cut.file);
  } else {
    await truncate(join(dir, cut.file), cut.offset);
    await fsyncPath(join(dir, cut.file));
  }
  await fsyncPath(dir);
  logger?.warn('replicated log: cut the local log at damage left by a power loss; the rest is re-applied', {
    file: join(dir, cut.file),
    offset: cut.offset,
    reason: cut.reason,
    removed,
  });
  return { file: cut.file, offset: cut.offset, reason: cut.reason, removed };
}

/**
 * Opens the local log `<dir>/log`. With `never`, the clean-close marker is taken first (removed,
 * durably, before anything is written): without it every record is checked, and damage is cut
 * away (`cutDamagedTail`) before the log is opened again.
 */
export async function openLocalLog(
  dir: string,
  o: { segmentBytes?: number; logger?: StorageLogger },
  fsync: 'batch' | 'never',
  logger: StorageLogger | undefined,
): Promise<FileLog> {
  const logDir = join(dir, 'log');
  let clean = true;
  if (fsync === 'never') {
    const marker = join(dir, CLEAN_MARKER);
    clean = await stat(marker).then(
      () => true,
      () => false,
    );
    if (clean) {
      await rm(marker, { force: true });
      await fsyncPath(dir);
    }
  }
  // Without fsyncs the writes only copy into the page cache: done inline, not through the thread pool.
  const opts = { ...o, fsync, inlineWrites: true, ...(clean ? {} : { scanOnOpen: 'all' as const }) };
  try {
    return await openLog(logDir, opts);
  } catch (err) {
    if (fsync !== 'never' || !isPlexusError(err, 'PLX_STORAGE_CORRUPT')) throw err;
    if (!(await cutDamagedTail(logDir, logger))) throw err;
    return openLog(logDir, opts);
  }
}

/** After the local log in `<dir>/log` was closed: fsyncs it, then leaves the clean-close marker. */
export async function markCleanClose(dir: string, files: readonly string[]): Promise<void> {
  await syncLocalLog(join(dir, 'log'), files, new Set());
  const marker = join(dir, CLEAN_MARKER);
  await writeFile(marker, 'closed cleanly; the local log is fsynced\n');
  await fsyncPath(marker);
  await fsyncPath(dir);
}

export interface LocalDurabilityOptions {
  /** The replicated log's directory (the local log is `<dir>/log/`). */
  readonly dir: string;
  readonly localFsync: 'always' | 'batch' | 'never';
  /** The background write-back's period (0: off). */
  readonly writebackMs: number;
  readonly id: number;
  readonly logger?: StorageLogger;
}

export interface LocalDurabilityDeps {
  readonly clock: ClockTimers;
  readonly local: Pick<FileLog, 'last' | 'segmentFiles'>;
  /** Makes the local log durable as far as it is written (default: `syncLocalLog`). */
  readonly sync?: (logDir: string, files: readonly string[], synced: SyncedSegments) => Promise<void>;
  /** The local log's last position counting appends issued and not yet acknowledged. */
  localTail(): number;
  /** The member closed: the write-back stops. */
  closed(): boolean;
}

/**
 * How far a member's local log is durable with localFsync 'never': the syncs before a Raft
 * snapshot or a compaction (`sync`), the background write-back every localWritebackMs
 * (`startWriteback`), and the last position they covered (`durableLast`).
 */
export class LocalDurability {
  /** The last local position a sync of the local log covered. */
  syncedTo = 0n;
  /** Closed local segments fsynced since they were closed. */
  readonly syncedSegments: SyncedSegments = new Set();
  private writebackTimer: TimerHandle | undefined;
  private writingBack: Promise<void> | undefined;
  private writtenBackTo = -1;

  constructor(
    private readonly opts: LocalDurabilityOptions,
    private readonly deps: LocalDurabilityDeps,
  ) {}

  /**
   * The last local position this member keeps through a crash or a power loss: everything
   * written with localFsync 'always' or 'batch', what the last sync covered with 'never' (all
   * of it when the background write-back is off: such a member promises nothing more).
   */
  get durableLast(): bigint {
    const last = this.deps.local.last;
    if (this.opts.localFsync !== 'never' || this.opts.writebackMs === 0) return last;
    // biome-ignore lint/complexity/useMathMinMax: bigint operands, which Math.min does not take
    return this.syncedTo < last ? this.syncedTo : last;
  }

  /** localFsync 'never': makes the local log durable as far as it is written. */
  async sync(): Promise<void> {
    if (this.opts.localFsync !== 'never') return;
    const local = this.deps.local;
    const upTo = local.last;
    await (this.deps.sync ?? syncLocalLog)(join(this.opts.dir, 'log'), local.segmentFiles, this.syncedSegments);
    if (upTo > this.syncedTo) this.syncedTo = upTo;
  }

  /** localFsync 'never' and localWritebackMs > 0: writes the local log back every localWritebackMs. */
  startWriteback(): void {
    const ms = this.opts.writebackMs;
    if (this.opts.localFsync !== 'never' || ms === 0) return;
    const clock = this.deps.clock;
    const round = () => {
      if (this.deps.closed()) return;
      this.writebackTimer = clock.setTimeout(round, ms);
      const tail = this.deps.localTail();
      if (this.writingBack !== undefined || tail === this.writtenBackTo) return;
      const p = this.sync()
        .then(
          () => {
            this.writtenBackTo = tail;
          },
          (err: unknown) => {
            // A segment removed by a compaction meanwhile: the next round writes back what is there.
            if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
            this.opts.logger?.warn('replicated log: background write-back of the local log failed', {
              id: this.opts.id,
              error: String(err),
            });
          },
        )
        .finally(() => {
          if (this.writingBack === p) this.writingBack = undefined;
        });
      this.writingBack = p;
    };
    this.writebackTimer = clock.setTimeout(round, ms);
  }

  /** Stops the write-back's timer. */
  stopWriteback(): void {
    if (this.writebackTimer !== undefined) this.deps.clock.clearTimeout(this.writebackTimer);
  }

  /** The write-back running now, if any. */
  running(): Promise<void> | undefined {
    return this.writingBack;
  }
}
