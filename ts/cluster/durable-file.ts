/**
 * Replaces a small file so that a crash leaves either the old or the new contents, never a
 * mix: write `<path>.tmp`, fsync it, rename it over `<path>`, fsync the directory.
 */
import { open, rename } from 'node:fs/promises';
import { dirname } from 'node:path';

export async function writeFileDurably(path: string, data: string | Uint8Array, mode = 0o644): Promise<void> {
  const tmp = `${path}.tmp`;
  const fh = await open(tmp, 'w', mode);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
  const dir = await open(dirname(path), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
