/**
 * ClusterMeta: what fixes a cluster at creation (id, shard count, hash version, replication
 * factor), kept as JSON in `<data dir>/cluster.meta`. A node whose values differ is refused
 * when it joins, with `details.field` naming the first field that differs.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  CLUSTER_META_FIELDS,
  type ClusterMetaFields,
  encodeClusterMeta,
  HASH_VERSION,
  META_FILE,
} from '../codec/cluster-meta.js';
import { MAX_SHARDS, shardOf } from '../core/index.js';
import { isDnsLabel } from '../core/names.js';
import { writeFileDurably } from './durable-file.js';
import { ClusterCode, clusterError } from './errors.js';

/** The largest replication factor this build keeps its promise for. */
export const MAX_REPLICATION_FACTOR = 1;

export interface ClusterMeta extends ClusterMetaFields {
  /** The cluster id: a DNS label (lower-case letters, digits, hyphens; 1 to 63). */
  readonly id: string;
  /** A power of two from 1 to 2^20. */
  readonly shardCount: number;
  /** 1. */
  readonly hashVersion: number;
  /**
   * 1. Nothing replicates a shard's journal yet, so a greater value is refused
   * (PLX_CLUSTER_REPLICATION_UNSUPPORTED) rather than accepted and ignored.
   */
  readonly replicationFactor: number;
}

/** Checks and freezes a ClusterMeta. */
export function clusterMeta(m: ClusterMeta): ClusterMeta {
  const bad = (field: string, why: string) =>
    clusterError(ClusterCode.BAD_META, `cluster.meta: ${field} ${why}`, { field });
  if (m === null || typeof m !== 'object') throw bad('meta', 'must be an object');
  if (!isDnsLabel(m.id)) throw bad('id', 'must be a DNS label: lower-case letters, digits and hyphens, 1 to 63');
  const n = m.shardCount;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_SHARDS || (n & (n - 1)) !== 0) {
    throw bad('shardCount', `must be a power of two from 1 to ${MAX_SHARDS}, got ${String(n)}`);
  }
  if (m.hashVersion !== HASH_VERSION) throw bad('hashVersion', `must be ${HASH_VERSION}, got ${String(m.hashVersion)}`);
  const rf = m.replicationFactor;
  if (typeof rf !== 'number' || !Number.isInteger(rf) || rf < 1 || rf > 255) {
    throw bad('replicationFactor', `must be an integer from 1 to 255, got ${String(rf)}`);
  }
  if (rf > MAX_REPLICATION_FACTOR) {
    throw clusterError(
      ClusterCode.REPLICATION_UNSUPPORTED,
      `cluster.meta: replicationFactor ${rf} is not supported: nothing replicates shard journals yet, so each shard lives on one node; use 1`,
      { field: 'replicationFactor', replicationFactor: rf, supported: MAX_REPLICATION_FACTOR },
    );
  }
  return Object.freeze({ id: m.id, shardCount: n, hashVersion: m.hashVersion, replicationFactor: rf });
}

const FIELDS = CLUSTER_META_FIELDS;

/** The first field in which `theirs` differs from `ours`, or undefined when they agree. */
export function metaDifference(ours: ClusterMeta, theirs: ClusterMeta): (typeof FIELDS)[number] | undefined {
  return FIELDS.find((f) => ours[f] !== theirs[f]);
}

/** Refuses (PLX_CLUSTER_META_MISMATCH, details.field) a joining node whose meta differs. */
export function checkJoinMeta(ours: ClusterMeta, theirs: ClusterMeta, node = 'the node'): void {
  const field = metaDifference(ours, theirs);
  if (field !== undefined) {
    throw clusterError(
      ClusterCode.META_MISMATCH,
      `${node} was built with ${field} = ${JSON.stringify(theirs[field])} but the cluster has ${JSON.stringify(ours[field])}; configure it with the cluster's cluster.meta`,
      { field, cluster: ours[field], node: theirs[field] },
    );
  }
}

/** The shard of an actor IRI under `meta` (hash version 1). */
export function shardOfIri(meta: ClusterMeta, iri: string): number {
  return shardOf(iri, meta.shardCount);
}

/** Reads and checks `<dir>/cluster.meta`. */
export async function readClusterMeta(dir: string, name = META_FILE): Promise<ClusterMeta> {
  const file = join(dir, name);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    const missing = (e as NodeJS.ErrnoException).code === 'ENOENT';
    throw clusterError(
      ClusterCode.BAD_META,
      `cannot read ${file}: ${(e as Error).message}`,
      { field: 'file', missing },
      e,
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw clusterError(ClusterCode.BAD_META, `${file} is not JSON`, { field: 'file' }, e);
  }
  return clusterMeta(parsed as ClusterMeta);
}

/**
 * Writes `<dir>/cluster.meta` once: when the file exists with other values it is refused
 * (PLX_CLUSTER_META_MISMATCH), with the same values it is left alone.
 */
export async function writeClusterMeta(dir: string, meta: ClusterMeta): Promise<ClusterMeta> {
  const m = clusterMeta(meta);
  let existing: ClusterMeta | undefined;
  try {
    existing = await readClusterMeta(dir);
  } catch (e) {
    if ((e as { details?: { missing?: boolean } }).details?.missing !== true) throw e;
  }
  if (existing) {
    checkJoinMeta(existing, m, 'the new cluster.meta');
    return existing;
  }
  await writeFileDurably(join(dir, META_FILE), encodeClusterMeta(m));
  return m;
}
