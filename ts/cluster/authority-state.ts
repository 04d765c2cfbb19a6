/**
 * The lease authority's state file, `<data dir of the authority's node>/authority.state`:
 * what a restarted authority needs to stay safe (AuthorityDurable: the epoch ceiling, and with
 * per-node journals the member whose store holds each shard's journal). Two lines: the state
 * as JSON, then `sha256 <hex of the first line>`. Written durably (temporary file, fsync,
 * rename, fsync of the directory); a file that is damaged, of another cluster or of another
 * shard count is refused (PLX_CLUSTER_AUTHORITY_STATE), never ignored: ignoring it would let
 * a failed owner's shards go to a member with an empty journal.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AuthorityDurable } from './authority.js';
import { writeFileDurably } from './durable-file.js';
import { ClusterCode, clusterError } from './errors.js';
import { type ClusterMeta, isDnsLabel } from './meta.js';

export const AUTHORITY_STATE_FILE = 'authority.state';
const FORMAT = 'plexus-authority-state';
const VERSION = 1;
/** The largest state file read (2^20 shards with 63-character homes fit). */
const MAX_BYTES = 128 * 1024 * 1024;

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
export function encodeAuthorityState(meta: ClusterMeta, state: AuthorityDurable): string {
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
export function decodeAuthorityState(text: string, meta: ClusterMeta, file: string): AuthorityDurable {
  const bad = (reason: string, message: string, extra: Record<string, unknown> = {}): never => {
    throw clusterError(
      ClusterCode.AUTHORITY_STATE,
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

/** Reads `<dir>/authority.state`; undefined when there is none (a new cluster). */
export async function loadAuthorityState(dir: string, meta: ClusterMeta): Promise<AuthorityDurable | undefined> {
  const file = join(dir, AUTHORITY_STATE_FILE);
  let buf: Buffer;
  try {
    buf = await readFile(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw clusterError(
      ClusterCode.AUTHORITY_STATE,
      `cannot read ${file}: ${(e as Error).message}`,
      { file, reason: 'read' },
      e,
    );
  }
  if (buf.length > MAX_BYTES) {
    throw clusterError(ClusterCode.AUTHORITY_STATE, `${file} is larger than ${MAX_BYTES} bytes: it is damaged`, {
      file,
      reason: 'size',
    });
  }
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch {
    return decodeAuthorityState('', meta, file);
  }
  return decodeAuthorityState(text, meta, file);
}

/** Replaces `<dir>/authority.state` durably. */
export async function saveAuthorityState(dir: string, meta: ClusterMeta, state: AuthorityDurable): Promise<void> {
  await writeFileDurably(join(dir, AUTHORITY_STATE_FILE), encodeAuthorityState(meta, state), 0o600);
}
