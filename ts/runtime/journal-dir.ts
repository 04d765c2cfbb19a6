/**
 * A journal directory's shard stores: `node/` holds one `MultiplexedLog` (ts/storage/
 * multiplexed-log.ts) with every shard, next to `journal.meta`; a journal directory holding
 * per-shard stores under `shards/` (the older layout) keeps them. docs/runtime.md, "Files".
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { type FileLogOptions, openLog } from '../storage/index.js';
import { DEFAULT_LANES, MultiplexedLog } from '../storage/multiplexed-log.js';
import type { LogStorage } from '../storage/types.js';

/** The store directory of a node-wide journal log inside a journal directory. */
export const NODE_LOG_DIR = 'node';
/** Lanes of a new node log: shard n is in lane n % lanes, each lane one store with one write in flight. */
export const DEFAULT_NODE_LOG_LANES = DEFAULT_LANES;

/**
 * How a journal directory keeps its shards: `node` (one `MultiplexedLog` under `node/`) unless the
 * directory already holds per-shard stores under `shards/` and no node log, which it keeps.
 */
export async function journalStoreMode(dir: string): Promise<'node' | 'shards'> {
  const has = async (d: string) => {
    try {
      return (await readdir(d)).length > 0;
    } catch {
      return false;
    }
  };
  if (await has(join(dir, NODE_LOG_DIR))) return 'node';
  return (await has(join(dir, 'shards'))) ? 'shards' : 'node';
}

/**
 * Opens the shard stores of a journal directory in whichever mode it keeps them (for tools
 * and tests that read a node's journal): `shard(n)` is shard n's store, or undefined when the
 * directory holds nothing of it; `close()` closes every store opened.
 */
export async function openJournalShards(
  dir: string,
  opts: FileLogOptions = {},
): Promise<{ shard(n: number): Promise<LogStorage | undefined>; close(): Promise<void> }> {
  if ((await journalStoreMode(dir)) === 'node') {
    const nl = await MultiplexedLog.open(join(dir, NODE_LOG_DIR), opts);
    return {
      shard: async (n) => (nl.holds(n) ? nl.shard(n) : undefined),
      close: () => nl.close(),
    };
  }
  const open: LogStorage[] = [];
  return {
    shard: async (n) => {
      const d = join(dir, 'shards', String(n).padStart(7, '0'));
      try {
        await readdir(d);
      } catch {
        return undefined;
      }
      const log = await openLog(d, opts);
      open.push(log);
      return log;
    },
    close: async () => {
      for (const l of open.splice(0)) await l.close();
    },
  };
}
