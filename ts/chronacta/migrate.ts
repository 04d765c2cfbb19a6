/**
 * `plexus chronacta migrate --data DIR`: raises a stopped node's data directory to the
 * data format this build writes (DATA_FORMAT in layout.ts).
 *
 * Format 1 -> 2: node.json gains `clusterId`, the id of the cluster the node's data belongs
 * to (taken from cluster.json), and `version` becomes 2. From then on a cluster.json of
 * another cluster put beside this node's log is refused at start instead of being served
 * with the wrong membership. A format-1 reader ignores the new field, so members of both
 * formats run side by side during a rolling upgrade: stop one member, migrate it, start it,
 * then the next (followers first; hand leadership over before the leader's turn).
 *
 * The rules:
 * - a running node is refused: the migration takes the locks of the directory's logs
 *   (`log/`, `replica/raft/`, `replica/log/`), which every open node holds, and keeps
 *   them until it is done, so no node can open the directory meanwhile
 *   (PLX_CHRONACTA_LOCKED);
 * - crash-safe: the new node.json is written to a temporary file, fsynced, renamed over
 *   the old one and the directory fsynced; a crash leaves the old or the new file whole;
 * - idempotent: a directory already in the current format is left untouched;
 * - a format newer than this build knows is refused (PLX_CHRONACTA_DATA_FORMAT_UNSUPPORTED),
 *   as is a directory without cluster files (PLX_CHRONACTA_BAD_DATA_DIR).
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { isPlexusError } from '../core/errors.js';
import { acquireLock, releaseLock } from '../storage/files.js';
import { ChronactaCode, chronactaError, fromStorage } from './errors.js';
import { DATA_FORMAT, dataPaths, prepareDataDir, writeFileAtomic } from './layout.js';

export interface MigrateReport {
  readonly dataDir: string;
  /** The format found. */
  readonly from: number;
  /** The format now. */
  readonly to: number;
  /** False when the directory was already in the current format (nothing written). */
  readonly changed: boolean;
}

async function isDir(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** Takes the lock of every log directory a node holds open; all or none. */
async function lockAll(root: string): Promise<string[]> {
  const held: string[] = [];
  try {
    for (const d of [join(root, 'log'), join(root, 'replica', 'raft'), join(root, 'replica', 'log')]) {
      if (!(await isDir(d))) continue;
      await acquireLock(d);
      held.push(d);
    }
    return held;
  } catch (e) {
    for (const d of held.reverse()) await releaseLock(d);
    if (isPlexusError(e, 'PLX_STORAGE_LOCKED')) {
      throw chronactaError(
        ChronactaCode.LOCKED,
        `${root} is open in a running node (${e.message}); stop the node, then migrate`,
        { ...e.details, dataDir: root },
        e,
      );
    }
    throw fromStorage(e, `locking ${root}`);
  }
}

/** Migrates the data directory `root` of a stopped node to DATA_FORMAT (see the header). */
export async function migrateDataDir(root: string): Promise<MigrateReport> {
  if (typeof root !== 'string' || root === '') {
    throw chronactaError(ChronactaCode.BAD_INPUT, 'migrate needs the data directory (--data DIR)');
  }
  const paths = dataPaths(root);
  for (const f of [paths.nodeFile, paths.clusterFile]) {
    if (!(await isFile(f))) {
      throw chronactaError(
        ChronactaCode.BAD_DATA_DIR,
        `${root} is not a Chronacta data directory: ${f} is missing (a node that never ran has nothing to migrate)`,
        { dataDir: root, file: f },
      );
    }
  }
  const held = await lockAll(root);
  try {
    // Reads and checks both files as a node would (a newer format is refused here).
    const prep = await prepareDataDir(root);
    const from = prep.node.version;
    if (from === DATA_FORMAT) return { dataDir: root, from, to: DATA_FORMAT, changed: false };
    // 1 -> 2: keep every field of node.json as it is, add the cluster id.
    const raw = JSON.parse(await readFile(paths.nodeFile, 'utf8')) as Record<string, unknown>;
    const next = { ...raw, version: DATA_FORMAT, clusterId: prep.cluster.clusterId };
    await writeFileAtomic(paths.cluster, 'node.json', `${JSON.stringify(next, null, 2)}\n`);
    const after = await prepareDataDir(root);
    if (after.node.version !== DATA_FORMAT || after.node.clusterId !== prep.cluster.clusterId) {
      throw chronactaError(ChronactaCode.INTERNAL, `${paths.nodeFile} does not read back as format ${DATA_FORMAT}`, {
        file: paths.nodeFile,
      });
    }
    return { dataDir: root, from, to: DATA_FORMAT, changed: true };
  } finally {
    for (const d of held.reverse()) await releaseLock(d);
  }
}
