/**
 * The compacted archive: the records below a cutoff position that compaction kept, in a
 * log of their own (ts/storage, so the same record format and recovery), one generation at
 * a time:
 *
 *   DIR/archive/CURRENT       {"generation": n, "cutoff": c}, replaced atomically
 *   DIR/archive/gen-<n>/      a log holding the kept records below c, in position order
 *
 * Each archived record is the original payload (it names its own global position), or a
 * redacted one (its body dropped, kept for an idempotency key). Archive log positions are
 * 1, 2, ...; `globals[i]` is the global position of archive record i + 1.
 */
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { FileLog } from '../storage/file-log.js';
import type { LogRecord } from '../storage/types.js';
import { ChronactaCode, chronactaError } from './errors.js';
import { writeFileAtomic } from './layout.js';

export const CURRENT_FILE = 'CURRENT';

export interface ArchivePointer {
  readonly generation: number;
  /** Records below this global position live in the archive; the log holds the rest. */
  readonly cutoff: number;
}

export function genDirName(generation: number): string {
  return `gen-${String(generation).padStart(8, '0')}`;
}

/** Reads CURRENT; generation 0 (no archive, cutoff 1) when it is absent. */
export async function readPointer(archiveDir: string): Promise<ArchivePointer> {
  let text: string;
  try {
    text = await readFile(join(archiveDir, CURRENT_FILE), 'utf8');
  } catch (e) {
    if ((e as { code?: string }).code === 'ENOENT') return { generation: 0, cutoff: 1 };
    throw chronactaError(ChronactaCode.BAD_DATA_DIR, `cannot read the archive pointer: ${(e as Error).message}`);
  }
  let p: Partial<ArchivePointer>;
  try {
    p = JSON.parse(text) as Partial<ArchivePointer>;
  } catch {
    throw chronactaError(ChronactaCode.CORRUPT, `${join(archiveDir, CURRENT_FILE)} is not JSON`);
  }
  if (!Number.isSafeInteger(p.generation) || !Number.isSafeInteger(p.cutoff) || (p.cutoff as number) < 1) {
    throw chronactaError(ChronactaCode.CORRUPT, `${join(archiveDir, CURRENT_FILE)} has the wrong shape`);
  }
  return { generation: p.generation as number, cutoff: p.cutoff as number };
}

export async function writePointer(archiveDir: string, p: ArchivePointer): Promise<void> {
  await writeFileAtomic(archiveDir, CURRENT_FILE, `${JSON.stringify(p)}\n`);
}

/** Removes every generation directory but `keep` (leftovers of a compaction that did not finish, or replaced ones). */
export async function removeOtherGenerations(archiveDir: string, keep: number): Promise<void> {
  const keepName = genDirName(keep);
  for (const name of await readdir(archiveDir)) {
    if (/^gen-\d{8}$/.test(name) && name !== keepName)
      await rm(join(archiveDir, name), { recursive: true, force: true });
    if (name === `${CURRENT_FILE}.tmp`) await rm(join(archiveDir, name), { force: true });
  }
}

/** One archive generation as the store reads it; reference counted so a replaced one closes after its last reader. */
export class ArchiveGen {
  private refs = 0;
  private retired = false;
  private onIdle: (() => void) | undefined;

  constructor(
    readonly pointer: ArchivePointer,
    readonly log: FileLog | undefined,
    /** Global positions of the archive's records, ascending. */
    readonly globals: number[],
  ) {}

  get cutoff(): number {
    return this.pointer.cutoff;
  }

  acquire(): this {
    this.refs++;
    return this;
  }

  release(): void {
    this.refs--;
    if (this.refs === 0 && this.retired) this.onIdle?.();
  }

  /** Marks the generation replaced; `cleanup` runs once no reader holds it. */
  retire(cleanup: () => void): void {
    this.retired = true;
    this.onIdle = cleanup;
    if (this.refs === 0) cleanup();
  }

  /** Index into `globals` of the first global position at or above `p`. */
  lowerBound(p: number): number {
    let lo = 0;
    let hi = this.globals.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.globals[mid] as number) < p) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Archive records with global positions in `from..to`, ascending, at most `max`. */
  async readUp(from: number, to: number, max: number): Promise<LogRecord[]> {
    if (!this.log || max <= 0) return [];
    const i = this.lowerBound(from);
    const j = this.lowerBound(to + 1);
    const n = Math.min(j - i, max);
    if (n <= 0) return [];
    return this.readIndexes(i, n);
  }

  /** Archive records with global positions in `from..to`, descending from `to`, at most `max`. */
  async readDown(from: number, to: number, max: number): Promise<LogRecord[]> {
    if (!this.log || max <= 0) return [];
    const i = this.lowerBound(from);
    const j = this.lowerBound(to + 1);
    const n = Math.min(j - i, max);
    if (n <= 0) return [];
    return (await this.readIndexes(j - n, n)).reverse();
  }

  /** The record of global position `p`, when archived. */
  indexOf(p: number): number {
    const i = this.lowerBound(p);
    return this.globals[i] === p ? i : -1;
  }

  async readIndexes(start: number, count: number): Promise<LogRecord[]> {
    const out: LogRecord[] = [];
    const log = this.log as FileLog;
    while (out.length < count) {
      const got = await log.read(BigInt(start + out.length + 1), { maxCount: count - out.length });
      if (got.length === 0) break;
      out.push(...got);
    }
    return out;
  }
}
