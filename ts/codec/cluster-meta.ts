/**
 * The cluster meta file, `cluster.meta` (ts/cluster/meta.ts checks its values and reads and
 * writes it): one JSON object `{ id, shardCount, hashVersion, replicationFactor }`, indented by
 * two spaces, ending in a newline (docs/cluster.md).
 */

/** The file's name in a cluster directory and in a node's data directory. */
export const META_FILE = 'cluster.meta';
/** The only shard hash version: FNV-1a 64 over the IRI's UTF-8 bytes, mod the shard count. */
export const HASH_VERSION = 1;

/** The fields of the file, in the order it is written (and compared on join). */
export const CLUSTER_META_FIELDS = ['id', 'shardCount', 'hashVersion', 'replicationFactor'] as const;

/** The file's values as written. */
export interface ClusterMetaFields {
  readonly id: string;
  readonly shardCount: number;
  readonly hashVersion: number;
  readonly replicationFactor: number;
}

/** The file's text for `m` (its fields only, in their order). */
export function encodeClusterMeta(m: ClusterMetaFields): string {
  const o = { id: m.id, shardCount: m.shardCount, hashVersion: m.hashVersion, replicationFactor: m.replicationFactor };
  return `${JSON.stringify(o, null, 2)}\n`;
}
