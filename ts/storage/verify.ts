/**
 * `verifyLog(dir)`: checks a log directory offline and reports what it holds and every
 * problem, each with the file and byte offset, without changing anything. Every segment is
 * scanned in full (every CRC), and every index file is compared with its segment. A
 * problem is `repairable` when `openLog` would fix it (a torn tail, an incomplete last
 * batch, a torn new segment, a missing or stale index) and `fatal` when `openLog` would
 * refuse the directory.
 */
import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { StorageCode, storageError } from './errors.js';
import { DEFAULT_INDEX_EVERY } from './file-log.js';
import { errnoOf } from './files.js';
import { inspectLog } from './recovery.js';
import type { VerifyReport } from './types.js';

export async function verifyLog(dir: string): Promise<VerifyReport> {
  const abs = resolve(dir);
  try {
    if (!(await stat(abs)).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
  } catch (e) {
    throw storageError(StorageCode.NOT_FOUND, `${abs} is not a log directory (${errnoOf(e) ?? String(e)})`, {
      dir: abs,
    });
  }
  const found = await inspectLog(abs, { indexEvery: DEFAULT_INDEX_EVERY, mode: 'verify' });
  const segs = found.segments;
  const records = segs.reduce((n, s) => n + s.count, 0);
  const tail = segs[segs.length - 1];
  const last = tail ? tail.last : Math.max(found.nextBase - 1, 0);
  const first = records > 0 && segs[0] ? segs[0].base : 0;
  return {
    dir: abs,
    ok: found.problems.length === 0,
    openable: found.problems.every((p) => p.severity !== 'fatal'),
    segments: segs.length,
    records,
    first: BigInt(first),
    last: BigInt(last),
    highestEpoch: found.highestEpoch,
    bytes: found.bytes,
    problems: found.problems,
  };
}
