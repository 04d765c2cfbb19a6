/**
 * Compaction of the event store: the closed segments of the log move into a new archive
 * generation that keeps only what readers still see (and redacted stubs of deleted appends
 * whose idempotency keys are alive); then the log drops them. Appends, reads and
 * subscriptions go on while it runs.
 */
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { encodeEntry, RecordKind } from '../codec/chronacta-record.js';
import type { Clock } from '../core/clock.js';
import { openLog } from '../storage/file-log.js';
import { isSegmented, logSegments } from '../storage/segmented.js';
import type { FsyncMode, LogStorage, SegmentInfo, StorageLogger } from '../storage/types.js';
import { ArchiveGen, genDirName, writePointer } from './archive.js';
import { fromStorage } from './errors.js';
import type { PreparedDataDir } from './layout.js';
import { redact } from './record.js';
import type { StoreState as State } from './state.js';
import { decodeRecord, sameBytes, stderrWarnings } from './store-log.js';
import { CHUNK } from './store-reads.js';
import type { CompactionReport } from './types.js';

/** What compaction uses of the store. */
export interface CompactorDeps {
  readonly prepared: PreparedDataDir;
  readonly log: LogStorage;
  readonly state: State;
  readonly clock: Clock;
  readonly fsync?: FsyncMode | undefined;
  readonly logger?: StorageLogger | undefined;
  /** The archive generation readers use now, and its replacement once a compaction wrote one. */
  readonly archive: () => ArchiveGen;
  readonly setArchive: (a: ArchiveGen) => void;
}

export class Compactor {
  private readonly prepared: PreparedDataDir;
  private readonly log: LogStorage;
  private readonly state: State;
  private readonly clock: Clock;
  private readonly opts: { readonly fsync?: FsyncMode | undefined; readonly logger?: StorageLogger | undefined };

  constructor(private readonly deps: CompactorDeps) {
    this.prepared = deps.prepared;
    this.log = deps.log;
    this.state = deps.state;
    this.clock = deps.clock;
    this.opts = { fsync: deps.fsync, logger: deps.logger };
  }

  private get archive(): ArchiveGen {
    return this.deps.archive();
  }

  private set archive(a: ArchiveGen) {
    this.deps.setArchive(a);
  }

  /** Below the log's open (last) segment and at most one past the last record applied. */
  compactionCutoff(): number {
    const segments = this.segments();
    const tailBase = segments.length > 0 ? Number((segments[segments.length - 1] as SegmentInfo).first) : 1;
    return Math.min(tailBase, this.state.last + 1);
  }

  /** The log's segments, oldest first: FileLog's, or in cluster mode the replicated log's local FileLog's. */
  private segments(): SegmentInfo[] {
    return isSegmented(this.log) ? logSegments(this.log) : [];
  }

  async runCompaction(limit = Number.POSITIVE_INFINITY): Promise<CompactionReport> {
    const paths = this.prepared.paths;
    const old = this.archive;
    const segments = this.segments();
    const bases = segments.map((s) => Number(s.first));
    const cutoff = Math.min(this.compactionCutoff(), limit);
    if (cutoff <= old.cutoff) {
      return { cutoff: BigInt(old.cutoff), kept: 0, dropped: 0, bytesBefore: 0, bytesAfter: 0 };
    }
    // The space the compacted range takes now: the closed segments below the cutoff and the old archive.
    let bytesBefore = await dirBytes(join(paths.archive, genDirName(old.pointer.generation)));
    for (let i = 0; i + 1 < segments.length; i++) {
      if ((bases[i + 1] as number) <= cutoff) {
        bytesBefore += await stat(join(paths.log, (segments[i] as SegmentInfo).file)).then(
          (x) => x.size,
          () => 0,
        );
      }
    }
    // What readers cannot see now: a prefix of each stream's versions, fixed for this run.
    const hidden = new Map<string, { truncateBefore: number; hard: boolean }>();
    for (const s of this.state.streams.values()) {
      if (s.truncateBefore > 0 || s.deleted === 'hard') {
        hidden.set(s.name, { truncateBefore: s.truncateBefore, hard: s.deleted === 'hard' });
      }
    }
    const now = this.clock.now();
    const generation = old.pointer.generation + 1;
    const dir = join(paths.archive, genDirName(generation));
    await rm(dir, { recursive: true, force: true });
    const archiveLog = await openLog(dir, {
      fsync: this.opts.fsync ?? 'batch',
      logger: this.opts.logger ?? stderrWarnings,
    });
    const globals: number[] = [];
    let kept = 0;
    let dropped = 0;
    const arc = old.acquire();
    try {
      let batch: Uint8Array[] = [];
      let batchId: Uint8Array | undefined;
      let pending: Promise<unknown>[] = [];
      const flush = async (force: boolean) => {
        if (batch.length > 0 && batchId) {
          const appended = archiveLog.append(batch, { batchId });
          appended.catch(() => {}); // awaited below; handled here so a failure is never unobserved
          pending.push(appended);
        }
        batch = [];
        batchId = undefined;
        if (force || pending.length >= 256) {
          await Promise.all(pending);
          pending = [];
        }
      };
      let p = 1;
      while (p < cutoff) {
        const recs =
          p < arc.cutoff
            ? await arc.readUp(p, arc.cutoff - 1, CHUNK)
            : await this.log.read(BigInt(p), { maxCount: Math.min(CHUNK, cutoff - p) });
        if (recs.length === 0) {
          if (p < arc.cutoff) {
            p = arc.cutoff;
            continue;
          }
          break;
        }
        for (const r of recs) {
          const d = decodeRecord(r);
          const e = d.entry;
          p = e.position + 1;
          let payload: Uint8Array | undefined = d.payload;
          if (e.kind === RecordKind.EVENT || e.kind === RecordKind.REDACTED) {
            const h = hidden.get(e.stream);
            const gone =
              e.kind === RecordKind.REDACTED || (h !== undefined && (h.hard || e.version < h.truncateBefore));
            if (gone) {
              payload =
                e.idempotency && this.state.keyAlive(e.recordedMs, now)
                  ? e.kind === RecordKind.REDACTED
                    ? d.payload
                    : encodeEntry(redact(e))
                  : undefined;
            }
          }
          if (!batchId || !sameBytes(batchId, d.batchId)) {
            await flush(false);
            batchId = d.batchId;
          }
          if (payload === undefined) {
            dropped++;
            continue;
          }
          kept++;
          batch.push(payload);
          globals.push(e.position);
        }
      }
      await flush(true);
    } catch (e) {
      await archiveLog.close().catch(() => {});
      throw fromStorage(e, 'compacting');
    } finally {
      arc.release();
    }
    const pointer = { generation, cutoff };
    await writePointer(paths.archive, pointer);
    this.archive = new ArchiveGen(pointer, archiveLog, globals);
    old.retire(() => {
      void (async () => {
        await old.log?.close().catch(() => {});
        // Only the retired generation: by the time its last reader is gone, a later compaction
        // may have made the generation after this run's, which is the one readers use then.
        await rm(join(paths.archive, genDirName(old.pointer.generation)), { recursive: true, force: true }).catch(
          () => {},
        );
      })();
    });
    await this.log.compactBefore(BigInt(cutoff));
    const bytesAfter = await dirBytes(dir);
    return { cutoff: BigInt(cutoff), kept, dropped, bytesBefore, bytesAfter };
  }
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  let names: import('node:fs').Dirent[];
  try {
    names = await readdir(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const d of names) {
    const p = join(dir, d.name);
    if (d.isDirectory()) total += await dirBytes(p);
    else
      total += await stat(p).then(
        (s) => s.size,
        () => 0,
      );
  }
  return total;
}
