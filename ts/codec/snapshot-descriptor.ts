/**
 * The data of the replicated log's Raft snapshots (docs/chronacta-ha.md, "Snapshots and
 * catch-up"; docs/formats.md): a small descriptor of a member's local log as of the snapshot's
 * Raft index, not the records themselves.
 *
 *   0 4 bytes magic "PXHS" | 4 UTF-8 JSON {"v":1, index, term, lastPosition, lastBatchId,
 *                                          lastEpoch, members, compactBelow?}
 *
 * at most DESCRIPTOR_MAX bytes in all. Empty data (a founding snapshot) decodes to `undefined`.
 * `index`, `term`, `lastPosition` are safe non-negative integers, `lastBatchId` is 32 hex
 * digits or '', `lastEpoch` a decimal string of at most 20 digits, `members` at most 64 entries
 * (each checked by the replicated log, which knows what a member is), `compactBelow` at least 1.
 *
 * The refusals are the replicated log's: the functions take a `DescriptorRefusal` that builds
 * them (`too-large` when encoding, `corrupt` when decoding), so this module names no code of a
 * layer above it.
 */

export const DESCRIPTOR_MAGIC = Uint8Array.of(0x50, 0x58, 0x48, 0x53);
export const DESCRIPTOR_VERSION = 1;
export const DESCRIPTOR_MAX = 64 * 1024;
const MAX_MEMBERS = 64;

export interface SnapshotDescriptorData<M = unknown> {
  /** Raft index and term the snapshot covers. */
  readonly index: number;
  readonly term: number;
  /** The local log's last position as of `index` (0: no record yet). */
  readonly lastPosition: number;
  /** Batch id (hex) and epoch of the record at `lastPosition` ('' and 0 when there is none). */
  readonly lastBatchId: string;
  readonly lastEpoch: string;
  readonly members: readonly M[];
  /** Positions below this one may be compacted away on every member (agreed through Raft). Default 1. */
  readonly compactBelow?: number;
}

/** Builds the error for a descriptor above DESCRIPTOR_MAX (`too-large`) or data that is not one (`corrupt`). */
export type DescriptorRefusal = (reason: 'too-large' | 'corrupt', message: string) => Error;

export function encodeSnapshotDescriptor<M>(d: SnapshotDescriptorData<M>, refuse: DescriptorRefusal): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify({ v: DESCRIPTOR_VERSION, ...d }));
  const out = new Uint8Array(4 + json.length);
  out.set(DESCRIPTOR_MAGIC);
  out.set(json, 4);
  if (out.length > DESCRIPTOR_MAX) {
    throw refuse('too-large', `a snapshot descriptor of ${out.length} bytes is above ${DESCRIPTOR_MAX}`);
  }
  return out;
}

/** Decodes snapshot data; `undefined` for the empty data of a founding snapshot. Members come back unchecked. */
export function decodeSnapshotDescriptor(
  data: Uint8Array,
  refuse: DescriptorRefusal,
): SnapshotDescriptorData<unknown> | undefined {
  const corrupt = (why: string) =>
    refuse('corrupt', `the Raft snapshot's data is not a replicated-log descriptor: ${why}`);
  if (data.length === 0) return undefined;
  if (data.length > DESCRIPTOR_MAX) throw corrupt(`${data.length} bytes is above ${DESCRIPTOR_MAX}`);
  if (data.length < 4 || DESCRIPTOR_MAGIC.some((b, i) => data[i] !== b)) throw corrupt('no PXHS magic');
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(data.subarray(4))) as Record<string, unknown>;
  } catch (e) {
    throw corrupt(String(e));
  }
  const whole = (x: unknown) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
  if (v === null || typeof v !== 'object') throw corrupt('not a JSON object');
  if (v.v !== DESCRIPTOR_VERSION) throw corrupt(`version ${String(v.v)}`);
  if (!whole(v.index) || !whole(v.term) || !whole(v.lastPosition)) throw corrupt('index, term or position');
  if (typeof v.lastBatchId !== 'string' || !/^([0-9a-f]{32})?$/.test(v.lastBatchId)) throw corrupt('batch id');
  if (typeof v.lastEpoch !== 'string' || !/^\d{1,20}$/.test(v.lastEpoch)) throw corrupt('epoch');
  if (!Array.isArray(v.members) || v.members.length > MAX_MEMBERS) throw corrupt('members');
  if (v.compactBelow !== undefined && (!whole(v.compactBelow) || (v.compactBelow as number) < 1)) {
    throw corrupt('compactBelow');
  }
  return {
    ...(v.compactBelow !== undefined ? { compactBelow: v.compactBelow as number } : {}),
    index: v.index as number,
    term: v.term as number,
    lastPosition: v.lastPosition as number,
    lastBatchId: v.lastBatchId,
    lastEpoch: v.lastEpoch,
    members: v.members as unknown[],
  };
}
