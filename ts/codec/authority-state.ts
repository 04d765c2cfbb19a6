/**
 * The lease authority's state file, `authority.state` (ts/cluster/authority-state.ts reads and
 * writes it): two lines, the state as JSON (`format`, `version` 1, the cluster id, the shard
 * count, the epoch ceiling as a decimal string, the view ceiling, and `[shard, member]` homes by
 * shard), then `sha256 <hex of the first line>`. A text that is damaged, of another cluster or
 * of another shard count is PLX_CLUSTER_AUTHORITY_STATE with `details.reason` naming what is
 * wrong (docs/cluster.md, "The authority's state").
 */
import { createHash } from 'node:crypto';
import { PlexusError } from '../core/errors.js';
import { isDnsLabel } from '../core/names.js';

/** Which cluster the file must belong to. */
export interface AuthorityStateCluster {
  readonly id: string;
  readonly shardCount: number;
}

/** What the file keeps (ts/cluster/authority.ts `AuthorityDurable`). */
export interface AuthorityStateRecord {
  /** Every epoch granted so far is at or below this. */
  readonly epochCeiling: bigint;
  /** Every view version so far is at or below this. */
  readonly viewCeiling: number;
  /** The member whose store holds each shard's journal. */
  readonly homes: ReadonlyMap<number, string>;
}

const FORMAT = 'plexus-authority-state';
const VERSION = 1;
/** The largest state file read (2^20 shards with 63-character homes fit). */
export const MAX_AUTHORITY_STATE_BYTES = 128 * 1024 * 1024;

interface StateJson {
  format: string;
  version: number;
  cluster: string;
  shardCount: number;
  epochCeiling: string;
  viewCeiling: number;
  /** [shard, member] pairs, by shard. */
  homes: [number, string][];
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** The file's text for `state`. */
export function encodeAuthorityState(meta: AuthorityStateCluster, state: AuthorityStateRecord): string {
  const body: StateJson = {
    format: FORMAT,
    version: VERSION,
    cluster: meta.id,
    shardCount: meta.shardCount,
    epochCeiling: state.epochCeiling.toString(),
    viewCeiling: state.viewCeiling,
    homes: [...state.homes].sort((a, b) => a[0] - b[0]),
  };
  const line = JSON.stringify(body);
  return `${line}\nsha256 ${sha256(line)}\n`;
}

/** Parses and checks the file's text; throws PLX_CLUSTER_AUTHORITY_STATE naming what is wrong. */
export function decodeAuthorityState(text: string, meta: AuthorityStateCluster, file: string): AuthorityStateRecord {
  const bad = (reason: string, message: string, extra: Record<string, unknown> = {}): never => {
    throw new PlexusError(
      'PLX_CLUSTER_AUTHORITY_STATE',
      `${file}: ${message}; the lease authority does not start on a damaged state (restore the file from a backup, or see docs/cluster.md, "The authority's state")`,
      { file, reason, ...extra },
    );
  };
  const lines = text.split('\n');
  const body = lines[0] ?? '';
  const sum = /^sha256 ([0-9a-f]{64})$/.exec(lines[1] ?? '');
  if (lines.length !== 3 || lines[2] !== '' || sum === null)
    bad('format', 'is not two lines: the state and its sha256');
  if (sha256(body) !== sum?.[1]) bad('checksum', 'does not match its sha256: the file is damaged');
  let j: StateJson;
  try {
    j = JSON.parse(body) as StateJson;
  } catch {
    return bad('format', 'its state is not JSON');
  }
  if (typeof j !== 'object' || j === null || j.format !== FORMAT) bad('format', `is not a ${FORMAT} file`);
  if (j.version !== VERSION) bad('version', `has version ${String(j.version)}; this build reads ${VERSION}`);
  if (j.cluster !== meta.id) {
    bad('cluster', `belongs to cluster ${JSON.stringify(j.cluster)}, not ${JSON.stringify(meta.id)}`, {
      cluster: j.cluster,
    });
  }
  if (j.shardCount !== meta.shardCount) {
    bad('shardCount', `was written for ${String(j.shardCount)} shards, the cluster has ${meta.shardCount}`, {
      shardCount: j.shardCount,
    });
  }
  if (typeof j.epochCeiling !== 'string' || !/^\d{1,20}$/.test(j.epochCeiling) || BigInt(j.epochCeiling) >= 1n << 64n) {
    bad('epochCeiling', 'has an epoch ceiling that is not a whole number below 2^64');
  }
  if (!Number.isSafeInteger(j.viewCeiling) || j.viewCeiling < 0) {
    bad('viewCeiling', 'has a view ceiling that is not a whole number');
  }
  if (!Array.isArray(j.homes)) bad('homes', 'has no homes list');
  const homes = new Map<number, string>();
  for (const h of j.homes) {
    const [shard, node] = Array.isArray(h) ? h : [];
    if (
      !Array.isArray(h) ||
      h.length !== 2 ||
      !Number.isInteger(shard) ||
      (shard as number) < 0 ||
      (shard as number) >= meta.shardCount ||
      !isDnsLabel(node) ||
      homes.has(shard as number)
    ) {
      bad('homes', `has a bad home entry ${JSON.stringify(h)}`);
    }
    homes.set(shard as number, node as string);
  }
  return { epochCeiling: BigInt(j.epochCeiling), viewCeiling: j.viewCeiling, homes };
}
