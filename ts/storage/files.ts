/**
 * File-system helpers of the log engine: directory fsync, whole-file durable replacement,
 * positional reads through a bounded window, the directory lock and a small cache of
 * read handles.
 */
import { writeSync, writevSync } from 'node:fs';
import { type FileHandle, mkdir, open, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { StorageCode, storageError } from './errors.js';
import { LOCK_FILE } from './format.js';

export function errnoOf(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null ? ((e as { code?: unknown }).code as string | undefined) : undefined;
}

/** fsync of a directory, so that files made, renamed or removed in it survive a crash. */
export async function syncDir(dir: string): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch (e) {
    // A file system without directory fsync (EINVAL) cannot do better.
    if (errnoOf(e) !== 'EINVAL') throw e;
  } finally {
    await fh?.close();
  }
}

/**
 * `mkdir(dir, { recursive: true })` without its endless loop: Node.js 20's recursive mkdir
 * retries forever (spinning a CPU, deaf to signals) when a parent exists but refuses new
 * entries with ENOENT, as `/proc` does. Each missing directory is made on its own, from the
 * nearest one that exists, so every refusal (ENOENT, ENOTDIR, EACCES, EROFS, EEXIST for a
 * file in the way) comes back as an error. Resolves with the first directory made, or
 * undefined when `dir` existed.
 */
export async function makeDirs(dir: string): Promise<string | undefined> {
  const missing: string[] = [];
  for (let d = resolve(dir); ; d = dirname(d)) {
    try {
      if ((await stat(d)).isDirectory()) break;
      throw Object.assign(new Error(`ENOTDIR: not a directory, mkdir '${d}'`), { code: 'ENOTDIR', path: d });
    } catch (e) {
      if (errnoOf(e) !== 'ENOENT' || dirname(d) === d) throw e;
      missing.push(d);
    }
  }
  for (let i = missing.length - 1; i >= 0; i--) {
    try {
      await mkdir(missing[i] as string);
    } catch (e) {
      // Made meanwhile by someone else: fine when it is a directory.
      if (errnoOf(e) !== 'EEXIST' || !(await stat(missing[i] as string)).isDirectory()) throw e;
    }
  }
  return missing[missing.length - 1];
}

/** Makes `dir` (and missing parents); new entries are fsynced into their parents. */
export async function ensureDir(dir: string): Promise<void> {
  const first = await makeDirs(dir);
  if (first === undefined) return;
  for (let d = resolve(dir); ; d = dirname(d)) {
    await syncDir(dirname(d));
    if (d === first || dirname(d) === d) break;
  }
}

/** The bytes of `path`, or undefined when it does not exist. */
export async function readIfExists(path: string): Promise<Buffer | undefined> {
  try {
    return await readFile(path);
  } catch (e) {
    if (errnoOf(e) === 'ENOENT') return undefined;
    throw e;
  }
}

export async function unlinkIfExists(path: string): Promise<boolean> {
  try {
    await unlink(path);
    return true;
  } catch (e) {
    if (errnoOf(e) === 'ENOENT') return false;
    throw e;
  }
}

/**
 * Replaces `dir/name` with `bytes` so that a crash leaves the old or the new content:
 * `name.tmp` written and fsynced, renamed over `name`, the directory fsynced. With
 * `sync` false (fsync mode `never`) only the rename is kept. `mode` is the new file's
 * permission bits (before the umask); 0o600 for a private key.
 */
export async function replaceFile(
  dir: string,
  name: string,
  bytes: Uint8Array,
  sync: boolean,
  mode = 0o666,
): Promise<void> {
  const tmp = join(dir, `${name}.tmp`);
  const fh = await open(tmp, 'w', mode);
  try {
    for (let at = 0; at < bytes.length; ) {
      const { bytesWritten } = await fh.write(bytes, at, bytes.length - at, at);
      at += bytesWritten;
    }
    if (sync) await fh.datasync();
  } catch (e) {
    await fh.close().catch(() => {});
    await unlinkIfExists(tmp).catch(() => {});
    throw e;
  }
  await fh.close();
  await rename(tmp, join(dir, name));
  if (sync) await syncDir(dir);
}

/** Writes the whole of `buf` at `position`, however many calls that takes. */
export async function writeAll(fh: FileHandle, buf: Uint8Array, position: number): Promise<void> {
  for (let at = 0; at < buf.length; ) {
    const { bytesWritten } = await fh.write(buf, at, buf.length - at, position + at);
    if (bytesWritten === 0) throw Object.assign(new Error('write made no progress'), { code: 'EIO' });
    at += bytesWritten;
  }
}

/**
 * Writes the buffers end to end at `position` with one gathered write (no copy into one
 * buffer), finishing a short write with positional writes of the rest.
 */
export async function writeAllGathered(fh: FileHandle, bufs: readonly Uint8Array[], position: number): Promise<void> {
  if (bufs.length === 1) return writeAll(fh, bufs[0] as Uint8Array, position);
  let total = 0;
  for (const b of bufs) total += b.length;
  const { bytesWritten } = await fh.writev(bufs as Uint8Array[], position);
  if (bytesWritten >= total) return;
  // A short write (rare on regular files): the rest, copied out once.
  let skip = bytesWritten;
  const rest: Uint8Array[] = [];
  for (const b of bufs) {
    if (skip >= b.length) skip -= b.length;
    else {
      rest.push(skip > 0 ? b.subarray(skip) : b);
      skip = 0;
    }
  }
  await writeAll(fh, Buffer.concat(rest), position + bytesWritten);
}

/**
 * `writeAllGathered` on the calling thread: synchronous positional writes into the page
 * cache, no trip through libuv's thread pool (for writes not followed by an fsync).
 */
export function writeAllGatheredSync(fd: number, bufs: readonly Uint8Array[], position: number): void {
  let total = 0;
  for (const b of bufs) total += b.length;
  let done = bufs.length === 1 ? 0 : writevSync(fd, bufs as Uint8Array[], position);
  if (done >= total) return;
  const rest = done === 0 && bufs.length === 1 ? (bufs[0] as Uint8Array) : Buffer.concat(bufs).subarray(done);
  for (let at = 0; at < rest.length; ) {
    const n = writeSync(fd, rest, at, rest.length - at, position + done);
    if (n === 0) throw Object.assign(new Error('write made no progress'), { code: 'EIO' });
    at += n;
    done += n;
  }
}

/** Reads up to `length` bytes at `position`; fewer only at the end of the file. */
export async function readAt(fh: FileHandle, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(length);
  let at = 0;
  while (at < length) {
    const { bytesRead } = await fh.read(buf, at, length - at, position + at);
    if (bytesRead === 0) break;
    at += bytesRead;
  }
  return at === length ? buf : buf.subarray(0, at);
}

const WINDOW = 64 * 1024;

/**
 * Positional reads of one file through a window of at least 64 KiB, so walking small
 * records costs one system call per window rather than one per record.
 */
export class WindowReader {
  private buf: Buffer = Buffer.alloc(0);
  private start = 0;

  constructor(
    private readonly fh: FileHandle,
    /** Nothing at or past this offset is read. */
    private readonly limit: number,
    private readonly window = WINDOW,
  ) {}

  /**
   * Bytes `[off, off + n)` as `buf.subarray(at, at + n)`, or undefined when the file (or
   * the limit) ends first.
   */
  async get(off: number, n: number): Promise<{ buf: Buffer; at: number } | undefined> {
    if (off + n > this.limit) return undefined;
    if (off >= this.start && off + n <= this.start + this.buf.length) return { buf: this.buf, at: off - this.start };
    const len = Math.min(Math.max(n, this.window), this.limit - off);
    const buf = await readAt(this.fh, off, len);
    this.buf = buf;
    this.start = off;
    if (buf.length < n) return undefined;
    return { buf, at: 0 };
  }
}

// ---------------------------------------------------------------- lock

const heldHere = new Set<string>();

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return errnoOf(e) === 'EPERM';
  }
}

/**
 * Takes the directory for this process: a `LOCK` file holding the owner's pid. A lock
 * left by a process that is gone is taken over; one held by a live process, or by another
 * open log of this process, is refused with PLX_STORAGE_LOCKED.
 */
export async function acquireLock(dir: string): Promise<void> {
  const path = join(dir, LOCK_FILE);
  if (heldHere.has(path)) {
    throw storageError(StorageCode.LOCKED, `the log at ${dir} is already open in this process; close it first`, {
      dir,
      pid: process.pid,
    });
  }
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await writeFile(path, `${process.pid}\n`, { flag: 'wx' });
      heldHere.add(path);
      return;
    } catch (e) {
      if (errnoOf(e) !== 'EEXIST') throw e;
    }
    const text = (await readIfExists(path))?.toString('latin1') ?? '';
    const pid = Number.parseInt(text, 10);
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid)) {
      throw storageError(
        StorageCode.LOCKED,
        `the log at ${dir} is open in process ${pid}; stop it or use another directory`,
        {
          dir,
          pid,
        },
      );
    }
    // Left behind by a process that is gone (or unreadable): take it over.
    await unlinkIfExists(path);
  }
  throw storageError(StorageCode.LOCKED, `could not take the lock file ${path}`, { dir });
}

export async function releaseLock(dir: string): Promise<void> {
  const path = join(dir, LOCK_FILE);
  if (!heldHere.delete(path)) return;
  await unlinkIfExists(path).catch(() => {});
}

// ---------------------------------------------------------------- read handles

interface CachedHandle {
  readonly opening: Promise<FileHandle>;
  users: number;
  used: number;
  retired: boolean;
}

/**
 * Read-only handles on segment files, opened on first use and shared by concurrent reads.
 * At most `max` idle handles stay open; a retired file (truncated away or compacted) is
 * closed once its last reader is done.
 */
export class HandleCache {
  private readonly open = new Map<string, CachedHandle>();
  private tick = 0;

  constructor(private readonly max = 8) {}

  async use<T>(path: string, fn: (fh: FileHandle) => Promise<T>): Promise<T> {
    let h = this.open.get(path);
    if (!h) {
      h = { opening: open(path, 'r'), users: 0, used: 0, retired: false };
      this.open.set(path, h);
      h.opening.catch(() => this.open.delete(path));
    }
    h.users++;
    h.used = ++this.tick;
    try {
      return await fn(await h.opening);
    } finally {
      h.users--;
      if (h.retired && h.users === 0) void this.closeOne(path, h);
      else this.trim();
    }
  }

  /** The file is gone or cut: new reads open it afresh, the old handle closes when idle. */
  retire(path: string): void {
    const h = this.open.get(path);
    if (!h) return;
    this.open.delete(path);
    h.retired = true;
    if (h.users === 0) void this.closeOne(path, h);
  }

  async closeAll(): Promise<void> {
    const all = [...this.open.entries()];
    this.open.clear();
    await Promise.all(
      all.map(([path, h]) => {
        h.retired = true;
        return h.users === 0 ? this.closeOne(path, h) : undefined;
      }),
    );
  }

  private trim(): void {
    if (this.open.size <= this.max) return;
    const idle = [...this.open.entries()].filter(([, h]) => h.users === 0).sort((a, b) => a[1].used - b[1].used);
    for (const [path, h] of idle.slice(0, this.open.size - this.max)) {
      this.open.delete(path);
      void this.closeOne(path, h);
    }
  }

  private async closeOne(_path: string, h: CachedHandle): Promise<void> {
    try {
      await (await h.opening).close();
    } catch {
      // Never opened, or already closed.
    }
  }
}
