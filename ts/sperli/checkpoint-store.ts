/**
 * The disk under SPERLI checkpoints (docs/sperli-checkpoints.md, "Layout on disk"): every
 * file is written durably (a temporary name in the same directory, fsync, rename over
 * the final name, fsync of the directory), so a crash leaves either the old file or the
 * whole new one, never a torn one, and a rename that returned survives a power cut.
 * Rank files and buddy copies go past the page cache (O_DIRECT, where the system takes
 * it; see TempFile and docs/sperli-checkpoints.md, "Past the page cache").
 *
 * `CheckpointStore` is the seam: the checkpoint procedure uses nothing else of the file
 * system, so a test can put a store in front of the real one that fails a chosen write.
 * Temporary names carry the process id and random bytes, so ranks that share one
 * directory never write the same temporary file; renaming identical bytes over a file
 * (two ranks keeping the same COMMIT in a shared directory) is harmless.
 */
import { randomBytes } from 'node:crypto';
import { type Dirent, constants as fsConstants } from 'node:fs';
import { type FileHandle, mkdir, open, readdir, rename, rmdir, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { PlexusError } from '../core/errors.js';

/** A checkpoint file could not be written, read, listed or removed (details: `op`, `path`). */
export const CHECKPOINT_IO = 'PLX_SPERLI_CHECKPOINT_IO';

/** A file written piece by piece; nothing shows under its name before `commit()`. */
export interface PieceWriter {
  /** Appends bytes (in the order given). */
  write(bytes: Uint8Array): Promise<void>;
  /**
   * Optional: appends the bytes of `parts` one after the other in as few system calls as
   * it can. Without it, the caller writes them one at a time.
   */
  writev?(parts: readonly Uint8Array[]): Promise<void>;
  /**
   * Optional: appends `bytes`, which are copied before this returns (they may be a view
   * of a read buffer that is used again at once); the disk writes follow in the
   * background. A failed write is thrown by a later `copy` and by `commit`. A writer fed
   * through `copy` is fed through nothing else.
   */
  copy?(bytes: Uint8Array): void;
  /** fsync, rename to the final name, fsync of the directory. */
  commit(): Promise<void>;
  /** Removes the temporary file (after a failure); never throws. */
  discard(): Promise<void>;
}

export interface CheckpointStore {
  /** Writes `bytes` as `path` durably, making missing directories (durably too). */
  write(path: string, bytes: Uint8Array): Promise<void>;
  /**
   * Optional: `write` of the bytes of `parts` one after the other, without joining them
   * first. Without it, the caller joins them and calls `write`.
   */
  writeParts?(path: string, parts: readonly Uint8Array[]): Promise<void>;
  /** Starts a durable write of `path` fed in pieces. */
  begin(path: string): Promise<PieceWriter>;
  /**
   * The bytes of `path`, or null when it does not exist. With `limit`, a longer file
   * gives its first `limit + 1` bytes only (so a parser sees that it is too long).
   */
  read(path: string, limit?: number): Promise<Uint8Array | null>;
  /** Removes a file and makes the removal durable; a missing file is fine. */
  remove(path: string): Promise<void>;
  /** The names in a directory ([] when it does not exist). */
  list(dir: string): Promise<string[]>;
  /** Removes a directory and everything in it; a missing one is fine. */
  removeTree(dir: string): Promise<void>;
}

function ioError(op: string, path: string, cause: unknown): PlexusError {
  const why = cause instanceof Error ? cause.message : String(cause);
  return new PlexusError(CHECKPOINT_IO, `checkpoint ${op} of ${path} failed: ${why}`, { op, path }, { cause });
}

function errno(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null ? ((e as { code?: unknown }).code as string | undefined) : undefined;
}

/** fsync of a directory, so that entries made or removed in it survive a crash. */
async function syncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch (e) {
    // A file system without directory fsync (EINVAL) cannot do better.
    if (errno(e) !== 'EINVAL') throw e;
  } finally {
    await fh?.close();
  }
}

/** Makes `dir` and any missing parents, each made entry fsynced into its parent. */
async function ensureDir(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true, mode: 0o700 });
  if (first === undefined) return;
  const made: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    made.push(d);
    if (d === first || dirname(d) === d) break;
  }
  for (const d of made.reverse()) await syncDir(dirname(d));
}

function tempName(path: string): string {
  return join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
}

async function quietUnlink(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch {
    // Nothing to clean up, or nothing that can be done about it.
  }
}

/**
 * Bytes per O_DIRECT write. A direct writer copies what it is given into two page-aligned
 * slots of this size and writes one while it fills the other.
 */
const DIRECT_PIECE = 4 << 20;
/** O_DIRECT offsets and lengths are multiples of this (the largest logical block size of Linux). */
const DIRECT_ALIGN = 4096;
/** Slots of this process: two direct writers at a time; more write through the page cache. */
const DIRECT_SLOTS = 4;
/** Files written whole from fewer bytes than this go through the page cache. */
const DIRECT_MIN = 1 << 20;
const O_DIRECT: number | undefined = (fsConstants as { O_DIRECT?: number }).O_DIRECT;

/**
 * The page-aligned slots of direct writers (a WebAssembly memory is page aligned), made
 * on first use and kept, so every direct write copies into memory already mapped.
 */
const slots = {
  free: [] as Uint8Array[],
  made: false,
  take(): [Uint8Array, Uint8Array] | undefined {
    if (!this.made) {
      this.made = true;
      try {
        const memory = new WebAssembly.Memory({ initial: (DIRECT_SLOTS * DIRECT_PIECE) / 65536 });
        for (let i = 0; i < DIRECT_SLOTS; i++) {
          this.free.push(new Uint8Array(memory.buffer, i * DIRECT_PIECE, DIRECT_PIECE));
        }
      } catch {
        // No memory for slots: every file goes through the page cache.
      }
    }
    if (this.free.length < 2) return undefined;
    return [this.free.pop() as Uint8Array, this.free.pop() as Uint8Array];
  },
  give(pair: readonly Uint8Array[]): void {
    this.free.push(...pair);
  },
};

/**
 * A file being written under a temporary name. With O_DIRECT (Linux, a file system that
 * takes it, two free slots), the bytes are copied into the slots and written past the page
 * cache, 4 MiB at a time, the last block padded with zeros and the file then cut to its
 * length; otherwise they are written through the page cache. A file system that refuses
 * O_DIRECT at open or at the first write gets the same bytes through the page cache.
 * Either way `commit` fsyncs the file before the rename, so durability is the same.
 */
class TempFile implements Required<PieceWriter> {
  private pair: [Uint8Array, Uint8Array] | undefined;
  private slot = 0;
  private fill = 0;
  /** The file offset of the current slot (direct), or of the next byte (after a fallback). */
  private at = 0;
  private length = 0;
  private flushed = false;
  private inFlight: Promise<unknown> | undefined;
  /** Whether the O_DIRECT write in `inFlight` has ended. */
  private writeDone = true;
  private closed = false;
  /** `copy`: copies of bytes that came while no slot could take them, written in order by `background`. */
  private spill: Uint8Array[] = [];
  /** `copy`: the writes that run behind it, while they run. */
  private background: Promise<void> | undefined;
  /** `copy`: the first failure of a write behind it. */
  private failure: PlexusError | undefined;

  private constructor(
    private readonly path: string,
    private readonly tmp: string,
    private handle: FileHandle,
    pair: [Uint8Array, Uint8Array] | undefined,
  ) {
    this.pair = pair;
  }

  static async open(path: string, direct: boolean): Promise<TempFile> {
    const tmp = tempName(path);
    let pair = direct && O_DIRECT !== undefined ? slots.take() : undefined;
    try {
      await ensureDir(dirname(path));
      let fh: FileHandle | undefined;
      if (pair !== undefined) {
        const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | (O_DIRECT as number);
        try {
          fh = await open(tmp, flags, 0o600);
        } catch (e) {
          if (errno(e) !== 'EINVAL') throw e;
        }
      }
      if (fh === undefined) {
        if (pair !== undefined) slots.give(pair);
        pair = undefined;
        fh = await open(tmp, 'wx', 0o600);
      }
      return new TempFile(path, tmp, fh, pair);
    } catch (e) {
      if (pair !== undefined) slots.give(pair);
      throw ioError('write', path, e);
    }
  }

  write(bytes: Uint8Array): Promise<void> {
    return this.writev([bytes]);
  }

  async writev(parts: readonly Uint8Array[]): Promise<void> {
    try {
      this.length += parts.reduce((n, p) => n + p.length, 0);
      if (this.pair === undefined) return await this.writeCached(parts);
      for (let i = 0; i < parts.length; i++) {
        const p = parts[i] as Uint8Array;
        for (let from = 0; from < p.length; ) {
          const n = Math.min(p.length - from, DIRECT_PIECE - this.fill);
          (this.pair[this.slot] as Uint8Array).set(p.subarray(from, from + n), this.fill);
          this.fill += n;
          from += n;
          if (this.fill < DIRECT_PIECE) continue;
          await this.flush(DIRECT_PIECE);
          if (this.pair === undefined) {
            // O_DIRECT was refused: the rest goes through the page cache.
            return await this.writeCached([p.subarray(from), ...parts.slice(i + 1)]);
          }
        }
      }
    } catch (e) {
      throw ioError('write', this.path, e);
    }
  }

  /**
   * Copies `bytes` into the current slot at once. A full slot is written at once when the
   * write of the other slot has ended; otherwise (or through the page cache) the bytes that
   * do not fit are copied aside and written by `background` once the disk has taken the
   * write before them.
   */
  copy(bytes: Uint8Array): void {
    if (this.failure !== undefined) throw this.failure;
    let from = 0;
    if (this.pair !== undefined && this.background === undefined) {
      while (from < bytes.length) {
        const n = Math.min(bytes.length - from, DIRECT_PIECE - this.fill);
        (this.pair[this.slot] as Uint8Array).set(bytes.subarray(from, from + n), this.fill);
        this.fill += n;
        from += n;
        this.length += n;
        if (this.fill < DIRECT_PIECE) break;
        if (!this.flushed || !this.writeDone) {
          // The first write is awaited (O_DIRECT may be refused); a later one waits for the other slot.
          this.runBehind(() => this.flush(DIRECT_PIECE));
          break;
        }
        this.startWrite(DIRECT_PIECE);
      }
    }
    if (from < bytes.length) {
      this.spill.push(bytes.slice(from));
      this.runBehind();
    }
  }

  /** Runs `first`, then writes the spilled copies, unless that already runs. */
  private runBehind(first?: () => Promise<void>): void {
    if (this.background !== undefined) return;
    const run = async (): Promise<void> => {
      try {
        if (first !== undefined) await first();
        while (this.spill.length > 0) {
          const batch = this.spill;
          this.spill = [];
          await this.writev(batch);
        }
      } catch (e) {
        this.failure ??= e instanceof PlexusError ? e : ioError('write', this.path, e);
        this.spill = [];
      } finally {
        this.background = undefined;
      }
    };
    this.background = run();
  }

  /** Waits for the writes behind `copy`; throws the first failure of one. */
  private async caughtUp(): Promise<void> {
    while (this.background !== undefined) await this.background;
    if (this.failure !== undefined) throw this.failure;
  }

  async commit(): Promise<void> {
    try {
      await this.caughtUp();
      if (this.pair !== undefined) {
        if (this.fill > 0 || !this.flushed) {
          const padded = Math.ceil(this.fill / DIRECT_ALIGN) * DIRECT_ALIGN;
          (this.pair[this.slot] as Uint8Array).fill(0, this.fill, padded);
          if (padded > 0) await this.flush(padded);
        }
        await this.inFlight;
        this.inFlight = undefined;
        if (this.pair !== undefined) {
          if (this.length % DIRECT_ALIGN !== 0) await this.handle.truncate(this.length);
          this.release();
        }
      }
      await this.handle.sync();
      await this.close();
      await rename(this.tmp, this.path);
      await syncDir(dirname(this.path));
    } catch (e) {
      await this.discard();
      throw ioError('write', this.path, e);
    }
  }

  async discard(): Promise<void> {
    await this.caughtUp().catch(() => {});
    await this.inFlight?.catch(() => {});
    this.inFlight = undefined;
    this.release();
    await this.close().catch(() => {});
    await quietUnlink(this.tmp);
  }

  /**
   * Starts the O_DIRECT write of the current slot's first `n` bytes once the write before
   * it is done, and moves on to the other slot. The first write is awaited: a refusal
   * (EINVAL) reopens the file without O_DIRECT and writes the slot there.
   */
  private async flush(n: number): Promise<void> {
    const slot = this.pair?.[this.slot] as Uint8Array;
    await this.inFlight;
    this.inFlight = undefined;
    if (this.flushed) {
      this.startWrite(n);
      return;
    }
    this.flushed = true;
    try {
      await writeAll(this.handle, slot.subarray(0, n), this.at);
    } catch (e) {
      if (errno(e) !== 'EINVAL') throw e;
      await this.reopenCached(slot.subarray(0, this.fill));
      return;
    }
    this.at += n;
    this.slot ^= 1;
    this.fill = 0;
  }

  /**
   * Starts the O_DIRECT write of the current slot's first `n` bytes (the write of the
   * other slot has ended) and moves on to the other slot.
   */
  private startWrite(n: number): void {
    const slot = this.pair?.[this.slot] as Uint8Array;
    this.writeDone = false;
    const writing = writeAll(this.handle, slot.subarray(0, n), this.at).finally(() => {
      this.writeDone = true;
    });
    writing.catch((e) => {
      // Also awaited by the next flush, commit or discard.
      this.failure ??= ioError('write', this.path, e);
    });
    this.inFlight = writing;
    this.at += n;
    this.slot ^= 1;
    this.fill = 0;
  }

  /** After a refused O_DIRECT write: the same file without O_DIRECT, `first` written at its start. */
  private async reopenCached(first: Uint8Array): Promise<void> {
    await this.handle.close();
    this.handle = await open(this.tmp, 'r+');
    await writeAll(this.handle, first, 0);
    this.at = first.length;
    this.fill = 0;
    this.release();
  }

  /** Appends `parts` at `at` through the page cache, in as few `writev` calls as it takes. */
  private async writeCached(parts: readonly Uint8Array[]): Promise<void> {
    let rest = parts.filter((p) => p.length > 0);
    while (rest.length > 0) {
      let { bytesWritten } = await this.handle.writev(rest as Uint8Array[], this.at);
      this.at += bytesWritten;
      while (rest.length > 0 && bytesWritten >= (rest[0] as Uint8Array).length) {
        bytesWritten -= (rest[0] as Uint8Array).length;
        rest = rest.slice(1);
      }
      if (bytesWritten > 0) rest = [(rest[0] as Uint8Array).subarray(bytesWritten), ...rest.slice(1)];
    }
  }

  private release(): void {
    if (this.pair !== undefined) slots.give(this.pair);
    this.pair = undefined;
  }

  private async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.handle.close();
  }
}

/** Writes all of `bytes` at `position`. */
async function writeAll(fh: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  for (let done = 0; done < bytes.length; ) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

function beginFile(path: string): Promise<Required<PieceWriter>> {
  return TempFile.open(path, true);
}

/** Writes `parts` one after the other as `path`, durably. */
async function writeFile(path: string, parts: readonly Uint8Array[]): Promise<void> {
  const w = await TempFile.open(path, parts.reduce((n, p) => n + p.length, 0) >= DIRECT_MIN);
  try {
    await w.writev(parts);
  } catch (e) {
    await w.discard();
    throw e;
  }
  await w.commit();
}

async function removeTree(dir: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    let entries: Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (e) {
      if (errno(e) === 'ENOENT') return;
      throw e;
    }
    for (const entry of entries) {
      const p = join(dir, entry.name);
      if (entry.isDirectory()) await removeTree(p);
      else {
        try {
          await unlink(p);
        } catch (e) {
          if (errno(e) !== 'ENOENT') throw e;
        }
      }
    }
    try {
      await rmdir(dir);
      return;
    } catch (e) {
      const code = errno(e);
      if (code === 'ENOENT') return;
      // Another rank sharing the directory may have put a file in it meanwhile.
      if (code !== 'ENOTEMPTY' || attempt >= 3) throw e;
    }
  }
}

/** The store on the local file system (node:fs), with fsync as described above. */
export const fileStore: CheckpointStore = {
  write: (path, bytes) => writeFile(path, [bytes]),

  writeParts: writeFile,

  begin: beginFile,

  async read(path, limit = Number.POSITIVE_INFINITY) {
    let fh: FileHandle | undefined;
    try {
      fh = await open(path, 'r');
      const size = (await fh.stat()).size;
      const want = Math.min(size, limit + 1);
      const out = new Uint8Array(want);
      let at = 0;
      while (at < want) {
        const { bytesRead } = await fh.read(out, at, want - at, at);
        if (bytesRead === 0) break;
        at += bytesRead;
      }
      return at === want ? out : out.subarray(0, at);
    } catch (e) {
      if (errno(e) === 'ENOENT') return null;
      throw ioError('read', path, e);
    } finally {
      await fh?.close();
    }
  },

  async remove(path) {
    try {
      await unlink(path);
    } catch (e) {
      if (errno(e) === 'ENOENT') return;
      throw ioError('remove', path, e);
    }
    try {
      await syncDir(dirname(path));
    } catch (e) {
      throw ioError('remove', path, e);
    }
  },

  async list(dir) {
    try {
      return await readdir(dir);
    } catch (e) {
      if (errno(e) === 'ENOENT') return [];
      throw ioError('list', dir, e);
    }
  },

  async removeTree(dir) {
    try {
      await removeTree(dir);
    } catch (e) {
      throw ioError('remove', dir, e);
    }
  },
};
