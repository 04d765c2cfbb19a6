/**
 * What the replicated log puts in Raft entries besides EVFR frames, and the bookkeeping of its
 * group commit: appends gathered for one entry (`FrameGroup`, `concatFrames`), compaction
 * records (`PXHC`), membership records (`PXHM`), and the marks that map Raft indexes to local
 * positions. Pure functions; the replica (replica.ts) uses them.
 */
import { checkMember, type HaMember } from './config.js';
import { ReplicationErrorCode, replicationError } from './errors.js';

/** A membership record carried in a Raft entry: magic `PXHM`, then JSON. */
export const META_MAGIC = Uint8Array.of(0x50, 0x58, 0x48, 0x4d);
export const META_MAX = 4096;

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

/** A compaction record: magic `PXHC`, then the u64 position below which members may compact. */
export const COMPACT_MAGIC = Uint8Array.of(0x50, 0x58, 0x48, 0x43);

export function isCompactMarker(data: Uint8Array): boolean {
  return data.length === 12 && COMPACT_MAGIC.every((b, i) => data[i] === b);
}

export function encodeCompactMarker(below: number): Uint8Array {
  const out = new Uint8Array(12);
  out.set(COMPACT_MAGIC);
  new DataView(out.buffer).setBigUint64(4, BigInt(below), true);
  return out;
}

export function isMeta(data: Uint8Array): boolean {
  return data.length >= 4 && data[0] === 0x50 && data[1] === 0x58 && data[2] === 0x48 && data[3] === 0x4d;
}

export function encodeMeta(member: HaMember): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify({ op: 'member', member }));
  const out = new Uint8Array(4 + json.length);
  out.set(META_MAGIC);
  out.set(json, 4);
  return out;
}

export function decodeMeta(data: Uint8Array): HaMember {
  if (data.length > META_MAX)
    throw replicationError(
      ReplicationErrorCode.DIVERGED,
      `membership record of ${data.length} bytes is above ${META_MAX}`,
    );
  const v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(data.subarray(4))) as Record<string, unknown>;
  if (v.op !== 'member')
    throw replicationError(ReplicationErrorCode.DIVERGED, `unknown membership record op ${String(v.op)}`);
  return checkMember(v.member);
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
