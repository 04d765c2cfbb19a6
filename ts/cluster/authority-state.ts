/**
 * The lease authority's state file, `<data dir of the authority's node>/authority.state`:
 * what a restarted authority needs to stay safe (AuthorityDurable: the epoch ceiling, and with
 * per-node journals the member whose store holds each shard's journal), in the layout of
 * ts/codec/authority-state.ts. Written durably (temporary file, fsync,
 * rename, fsync of the directory); a file that is damaged, of another cluster or of another
 * shard count is refused (PLX_CLUSTER_AUTHORITY_STATE), never ignored: ignoring it would let
 * a failed owner's shards go to a member with an empty journal.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeAuthorityState, encodeAuthorityState, MAX_AUTHORITY_STATE_BYTES } from '../codec/authority-state.js';
import type { AuthorityDurable } from './authority.js';
import { writeFileDurably } from './durable-file.js';
import { ClusterCode, clusterError } from './errors.js';
import type { ClusterMeta } from './meta.js';

export const AUTHORITY_STATE_FILE = 'authority.state';
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
  if (buf.length > MAX_AUTHORITY_STATE_BYTES) {
    throw clusterError(
      ClusterCode.AUTHORITY_STATE,
      `${file} is larger than ${MAX_AUTHORITY_STATE_BYTES} bytes: it is damaged`,
      {
        file,
        reason: 'size',
      },
    );
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
