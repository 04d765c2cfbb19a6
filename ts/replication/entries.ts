/**
 * What the replicated log puts in Raft entries besides EVFR frames, and the bookkeeping of its
 * group commit: appends gathered for one entry (`FrameGroup`, `concatFrames`), membership
 * records (`PXHM`) with their member checked, and the marks that map Raft indexes to local
 * positions. The byte layouts of the membership and compaction (`PXHC`) records are in
 * ts/codec/replication-entries.ts. Pure functions; the replica (replica.ts) uses them.
 */
import { decodeMeta as decodeMetaRecord } from '../codec/replication-entries.js';
import { checkMember, type HaMember } from './config.js';
import { ReplicationErrorCode, replicationError } from './errors.js';

/** What the window remembers of the last frame at or below a Raft index. */
/** `frames`: appends (EVFR frames) this member applied or skipped up to this entry since it opened. */
export type Mark = [index: number, lastPosition: number, batchId: Uint8Array, epoch: bigint, frames: number];

/**
 * Appends gathered for one Raft entry: their EVFR frames laid end to end (docs/evfr.md,
 * "Several frames in one entry"), proposed together, each append answered when it commits.
 */
export interface FrameGroup {
  readonly term: number;
  readonly first: number;
  last: number;
  batchId: Uint8Array;
  readonly frames: Uint8Array[];
  bytes: number;
  /** A large append proposed as an entry of its own (SOLO_FRAME_BYTES). */
  readonly solo: boolean;
  readonly done: Promise<number>;
  resolve(index: number): void;
  reject(err: unknown): void;
}

/**
 * An append whose frame has at least this many bytes is proposed as an entry of its own, even
 * with group commit: it is a large entry already, so grouping saves little per event, and
 * laying it end to end with others would copy its bytes once more.
 */
export const SOLO_FRAME_BYTES = 4096;

export function concatFrames(frames: readonly Uint8Array[], bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  let at = 0;
  for (const f of frames) {
    out.set(f, at);
    at += f.length;
  }
  return out;
}

/**
 * The member of a membership record (ts/codec/replication-entries.ts), checked; a record that
 * does not decode is PLX_REPLICATION_DIVERGED.
 */
export function decodeMeta(data: Uint8Array): HaMember {
  return checkMember(decodeMetaRecord(data, (message) => replicationError(ReplicationErrorCode.DIVERGED, message)));
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export function hex(b: Uint8Array): string {
  return Buffer.from(b).toString('hex');
}

export function hexBytes(h: string): Uint8Array {
  return new Uint8Array(Buffer.from(h, 'hex'));
}

export function splitAddress(a: string): { host: string; port: number } {
  const i = a.lastIndexOf(':');
  return { host: a.slice(0, i), port: Number(a.slice(i + 1)) };
}
