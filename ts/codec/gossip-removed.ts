/**
 * The removed set of a gossip member, `gossip-removed.json` in its data directory
 * (ts/cluster/gossip/removed-file.ts reads and writes it): one JSON object, `format`
 * `plexus-gossip-removed`, `version` 1, the cluster id and `removed`, the node ids removed from
 * the cluster, sorted. A text that is damaged, of another format version or of another cluster
 * is PLX_CLUSTER_AUTHORITY_STATE with `details.reason` naming what is wrong: a member that
 * could not read its removed set would admit a removed node again.
 */
import { PlexusError } from '../core/errors.js';

const FORMAT = 'plexus-gossip-removed';
const VERSION = 1;
/** A removed set file above this is damaged. */
export const MAX_GOSSIP_REMOVED_BYTES = 1024 * 1024;

export function encodeGossipRemoved(cluster: string, removed: readonly string[]): string {
  return `${JSON.stringify({ format: FORMAT, version: VERSION, cluster, removed: [...removed].sort() })}\n`;
}

/** The removed node ids of `text`, checked to belong to cluster `cluster`; `file` names it in refusals. */
export function decodeGossipRemoved(text: string, cluster: string, file: string): readonly string[] {
  const bad = (reason: string, why: string) =>
    new PlexusError('PLX_CLUSTER_AUTHORITY_STATE', `${file} ${why}`, { file, reason });
  if (text.length > MAX_GOSSIP_REMOVED_BYTES) throw bad('size', `is above ${MAX_GOSSIP_REMOVED_BYTES} bytes: damaged`);
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw bad('format', 'is not JSON: damaged (cut short?)');
  }
  if (o === null || typeof o !== 'object' || o.format !== FORMAT) throw bad('format', `is not a ${FORMAT} file`);
  if (o.version !== VERSION) throw bad('version', `has format version ${String(o.version)}, not ${VERSION}`);
  if (o.cluster !== cluster) throw bad('cluster', `belongs to cluster ${String(o.cluster)}, not ${cluster}`);
  if (!Array.isArray(o.removed) || o.removed.some((n) => typeof n !== 'string' || n.length === 0)) {
    throw bad('removed', 'lists removed nodes that are not node ids');
  }
  return o.removed as string[];
}
