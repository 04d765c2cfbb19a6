/**
 * Files and directories the cluster writes. `writeFileDurably` replaces a small file so that a crash leaves either the old or the new contents, never a
 * mix: write `<path>.tmp`, fsync it, rename it over `<path>`, fsync the directory.
 */
import { mkdir, stat } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';
import { replaceFile } from '../storage/files.js';
import { ClusterCode, clusterError } from './errors.js';

export async function writeFileDurably(path: string, data: string | Uint8Array, mode = 0o644): Promise<void> {
  await replaceFile(dirname(path), basename(path), typeof data === 'string' ? Buffer.from(data) : data, true, mode);
}

/**
 * Creates directory `path` and its missing parents, one at a time from the nearest existing
 * ancestor, which must be a directory (`mkdir -p` without `recursive`, which loops forever
 * on some paths under /proc). Refuses with PLX_CLUSTER_BAD_PATH naming the path at fault.
 */
export async function ensureDir(path: string): Promise<void> {
  const bad = (p: string, why: string, cause?: unknown) =>
    clusterError(
      ClusterCode.BAD_PATH,
      `cannot create the directory ${path}: ${p} ${why}`,
      { file: path, at: p },
      cause,
    );
  const missing: string[] = [];
  let p = resolve(path);
  for (;;) {
    let isDir: boolean;
    try {
      isDir = (await stat(p)).isDirectory();
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      const up = dirname(p);
      if (code !== 'ENOENT' || up === p) throw bad(p, `cannot be read (${code})`, e);
      missing.push(p);
      p = up;
      continue;
    }
    if (!isDir) throw bad(p, 'is not a directory');
    break;
  }
  for (const d of missing.reverse()) {
    try {
      await mkdir(d);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (
        code === 'EEXIST' &&
        (await stat(d).then(
          (s) => s.isDirectory(),
          () => false,
        ))
      )
        continue;
      throw bad(d, `cannot be made (${code})`, e);
    }
  }
}
