/**
 * A gossip member's removed set on disk: `<dataDir>/gossip-removed.json` (its layout:
 * ts/codec/gossip-removed.ts), replaced with fsync and an atomic rename whenever the member
 * learns of a removal, read when the node starts. A missing file is an empty set; a damaged
 * one is refused (PLX_CLUSTER_AUTHORITY_STATE), never ignored.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeGossipRemoved, encodeGossipRemoved } from '../../codec/gossip-removed.js';
import { writeFileDurably } from '../durable-file.js';
import { ClusterCode, clusterError } from '../errors.js';

export const GOSSIP_REMOVED_FILE = 'gossip-removed.json';

/** The removed node ids kept in `dir` for cluster `cluster` (empty when there is no file). */
export async function loadGossipRemoved(dir: string, cluster: string): Promise<readonly string[]> {
  const file = join(dir, GOSSIP_REMOVED_FILE);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw clusterError(
      ClusterCode.AUTHORITY_STATE,
      `cannot read ${file}: ${(e as Error).message}`,
      { file, reason: 'read' },
      e,
    );
  }
  return decodeGossipRemoved(text, cluster, file);
}

/** Replaces the removed set kept in `dir` durably (a crash leaves the old set or the new one). */
export async function saveGossipRemoved(dir: string, cluster: string, removed: readonly string[]): Promise<void> {
  await writeFileDurably(join(dir, GOSSIP_REMOVED_FILE), encodeGossipRemoved(cluster, removed));
}
