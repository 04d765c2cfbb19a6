/**
 * The disk under SPERLI checkpoints (docs/sperli-checkpoints.md, "Layout on disk"): every
 * file is written durably (a temporary name in the same directory, fsync, rename over
 * the final name, fsync of the directory), so a crash leaves either the old file or the
 * whole new one, never a torn one, and a rename that returned survives a power cut.
 *
 * `CheckpointStore` is the seam: the checkpoint procedure uses nothing else of the file
 * system, so a test can put a store in front of the real one that fails a chosen write.
 * Temporary names carry the process id and random bytes, so ranks that share one
 * directory never write the same temporary file; renaming identical bytes over a file
 * (two ranks keeping the same COMMIT in a shared directory) is harmless.
 */
import { randomBytes } from 'node:crypto';
import type { Dirent } from 'node:fs';
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

async function beginFile(path: string): Promise<Required<PieceWriter>> {
  const dir = dirname(path);
  const tmp = tempName(path);
  let fh: FileHandle | undefined;
  try {
    await ensureDir(dir);
    fh = await open(tmp, 'wx', 0o600);
  } catch (e) {
    throw ioError('write', path, e);
  }
  const handle = fh;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await handle.close();
  };
  return {
    async write(bytes) {
      try {
        for (let at = 0; at < bytes.length; ) {
          const { bytesWritten } = await handle.write(bytes, at, bytes.length - at);
          at += bytesWritten;
        }
      } catch (e) {
        throw ioError('write', path, e);
      }
    },
    async writev(parts) {
      try {
        let rest = parts.filter((p) => p.length > 0);
        while (rest.length > 0) {
          let { bytesWritten } = await handle.writev(rest as Uint8Array[]);
          while (rest.length > 0 && bytesWritten >= (rest[0] as Uint8Array).length) {
            bytesWritten -= (rest[0] as Uint8Array).length;
            rest = rest.slice(1);
          }
          if (bytesWritten > 0) rest = [(rest[0] as Uint8Array).subarray(bytesWritten), ...rest.slice(1)];
        }
      } catch (e) {
        throw ioError('write', path, e);
      }
    },
    async commit() {
      try {
        await handle.sync();
        await close();
        await rename(tmp, path);
        await syncDir(dir);
      } catch (e) {
        await close().catch(() => {});
        await quietUnlink(tmp);
        throw ioError('write', path, e);
      }
    },
    async discard() {
      await close().catch(() => {});
      await quietUnlink(tmp);
    },
  };
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
  async write(path, bytes) {
    const w = await beginFile(path);
    try {
      await w.write(bytes);
    } catch (e) {
      await w.discard();
      throw e;
    }
    await w.commit();
  },

  async writeParts(path, parts) {
    const w = await beginFile(path);
    try {
      await w.writev(parts);
    } catch (e) {
      await w.discard();
      throw e;
    }
    await w.commit();
  },

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
