/**
 * The logs a Chronacta data directory holds, found the way the store lays them out
 * (docs/chronacta.md, "The data directory"): a standalone store's `log/`, a cluster member's
 * replicated log (`replica/log/`, the records, and `replica/raft/`, the Raft journal with its
 * snapshots), and the compacted archive generation the pointer in `archive/` names.
 * `plexus chronacta verify` checks each of them; `--truncate-damaged-tail` (verify and serve)
 * cuts a damaged last record off each of them on purpose (docs/storage.md, "Recovery").
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { openLog } from '../storage/file-log.js';
import { parseSegmentName } from '../storage/format.js';
import type { StorageLogger, VerifyProblem } from '../storage/types.js';
import { genDirName, readPointer } from './archive.js';
import { ChronactaCode, chronactaError } from './errors.js';

/** Which log of the data directory: the standalone log, the archive, or a cluster member's replicated log and Raft journal. */
export type DataLogKind = 'log' | 'archive' | 'replica-log' | 'raft-log';

export interface DataLog {
  readonly kind: DataLogKind;
  readonly dir: string;
}

function errnoOf(e: unknown): string | undefined {
  return (e as { code?: string } | undefined)?.code;
}

/** Whether `dir` holds a segment file; false when it does not exist. */
async function holdsSegments(dir: string): Promise<boolean> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (e) {
    if (errnoOf(e) === 'ENOENT') return false;
    throw chronactaError(
      ChronactaCode.BAD_DATA_DIR,
      `cannot read ${dir}: ${(e as Error).message}`,
      { dir, errno: errnoOf(e) },
      e,
    );
  }
  return names.some((n) => parseSegmentName(n) !== undefined);
}

/**
 * The logs in the data directory `root`, in the order the store opens them. Refuses
 * (PLX_CHRONACTA_BAD_DATA_DIR) a path that is not a directory, and one that holds no log
 * at all unless `allowEmpty` (a store not started yet); a damaged archive pointer is
 * refused with PLX_CHRONACTA_CORRUPT.
 */
export async function findDataLogs(root: string, opts: { allowEmpty?: boolean } = {}): Promise<DataLog[]> {
  try {
    if (!(await stat(root)).isDirectory()) {
      throw chronactaError(ChronactaCode.BAD_DATA_DIR, `${root} is not a directory`, { dir: root });
    }
  } catch (e) {
    if (opts.allowEmpty && errnoOf(e) === 'ENOENT') return [];
    if (errnoOf(e) === undefined) throw e;
    throw chronactaError(
      ChronactaCode.BAD_DATA_DIR,
      `${root} is not a data directory: ${(e as Error).message}`,
      { dir: root, errno: errnoOf(e) },
      e,
    );
  }
  const logs: DataLog[] = [];
  const pointer = await readPointer(join(root, 'archive'));
  if (pointer.generation > 0)
    logs.push({ kind: 'archive', dir: join(root, 'archive', genDirName(pointer.generation)) });
  for (const [kind, dir] of [
    ['log', join(root, 'log')],
    ['raft-log', join(root, 'replica', 'raft')],
    ['replica-log', join(root, 'replica', 'log')],
  ] as const) {
    if (await holdsSegments(dir)) logs.push({ kind, dir });
  }
  if (!logs.some((l) => l.kind !== 'archive') && !opts.allowEmpty) {
    throw chronactaError(
      ChronactaCode.BAD_DATA_DIR,
      `${root} holds no Chronacta log: no segment file in log/, replica/log/ or replica/raft/ ` +
        '(not a data directory, or a store or cluster member that never started)',
      { dir: root },
    );
  }
  return logs;
}

/**
 * Opens the log in `dir` with `truncateDamagedTail` and closes it again: a damaged last record
 * is cut off (with the rest of its batch), as is any torn tail; returns what recovery dropped.
 * The log must not be open elsewhere (PLX_STORAGE_LOCKED otherwise); other damage is refused
 * with PLX_STORAGE_CORRUPT as always.
 */
export async function truncateDamagedTail(dir: string, logger: StorageLogger): Promise<readonly VerifyProblem[]> {
  const log = await openLog(dir, { truncateDamagedTail: true, logger });
  await log.close();
  return log.recovery;
}
