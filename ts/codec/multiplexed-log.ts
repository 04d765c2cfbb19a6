/**
 * The lane records of the multiplexed log (docs/storage.md, "Multiplexed log"): each is the
 * payload of one log-engine record in a lane, and carries one shard's record or a compaction
 * mark. Integers are little endian; the first u32 (the word) holds the shard (bits 0..29) and
 * the record's kind (bits 30 and 31):
 *
 * - first (legacy) format, 12 bytes of header: `[shard u32][epoch u64][record]`; its shard
 *   position is one after the shard's previous record in the lane.
 * - positioned, 20 bytes of header: `[shard | 0x80000000 u32][epoch u64][position u64][record]`.
 * - mark, 36 bytes: `[shard | 0x40000000 u32][highest epoch u64][start u64][last u64][old last u64]`.
 *
 * Both high bits set is not a lane record. The file handling (lanes, the index of runs,
 * compaction) is plexus/storage's (ts/storage/multiplexed-log.ts); this module is the byte
 * layout only, on codec/bytes' writer and field functions.
 */
import { ByteWriter, getU32, getU64n, putU32, putU64, putU64n } from './bytes.js';

/** The first (legacy) record header: shard u32, epoch u64. */
export const LANE_OLD_HEADER = 12;
/** A record with its shard position: shard | LANE_F_POSITION u32, epoch u64, position u64. */
export const LANE_HEADER = 20;
/** A compaction mark: shard | LANE_F_MARK u32, highest epoch u64, start u64, last u64, old last u64. */
export const LANE_MARK_BYTES = 36;
export const LANE_F_POSITION = 0x80000000;
export const LANE_F_MARK = 0x40000000;
/** The shard bits of the word: shards are 0 .. 2^30 - 1. */
export const LANE_SHARD_BITS = 0x3fffffff;

/** A lane record's header as `decodeLaneRecord` reads it. */
export type LaneRecord =
  | { readonly kind: 'old'; readonly shard: number; readonly epoch: bigint }
  | { readonly kind: 'positioned'; readonly shard: number; readonly epoch: bigint; readonly position: number }
  | {
      readonly kind: 'mark';
      readonly shard: number;
      readonly epoch: bigint;
      readonly start: number;
      readonly last: number;
      readonly oldLast: number;
    };

/** Why `decodeLaneRecord` refused a payload. */
export type LaneRefusal = 'short' | 'kind';

/**
 * The header of a lane record, or why it is not one: `short` (fewer bytes than its kind's
 * header) or `kind` (both kind bits set). Positions are read as numbers (a stored value
 * above 2^53 - 1 is not exact; the index treats it as any other position).
 */
export function decodeLaneRecord(b: Uint8Array): LaneRecord | LaneRefusal {
  if (b.length < LANE_OLD_HEADER) return 'short';
  const word = getU32(b, 0);
  const shard = word & LANE_SHARD_BITS;
  if ((word & LANE_F_POSITION) !== 0 && (word & LANE_F_MARK) !== 0) return 'kind';
  const epoch = getU64n(b, 4);
  if ((word & LANE_F_MARK) !== 0) {
    if (b.length < LANE_MARK_BYTES) return 'short';
    return {
      kind: 'mark',
      shard,
      epoch,
      start: Number(getU64n(b, 12)),
      last: Number(getU64n(b, 20)),
      oldLast: Number(getU64n(b, 28)),
    };
  }
  if ((word & LANE_F_POSITION) !== 0) {
    if (b.length < LANE_HEADER) return 'short';
    return { kind: 'positioned', shard, epoch, position: Number(getU64n(b, 12)) };
  }
  return { kind: 'old', shard, epoch };
}

/** The word of a lane record (the caller checked it has at least LANE_OLD_HEADER bytes). */
export function laneWord(b: Uint8Array): number {
  return getU32(b, 0);
}

/** The epoch of a shard record or the highest epoch of a mark (at least LANE_OLD_HEADER bytes). */
export function laneEpoch(b: Uint8Array): bigint {
  return getU64n(b, 4);
}

/** The stored shard position of a positioned record (at least LANE_HEADER bytes). */
export function lanePosition(b: Uint8Array): bigint {
  return getU64n(b, 12);
}

/** Where a shard record's own bytes start, by its word: after 20 bytes (positioned) or 12 (first format). */
export function lanePayloadOffset(word: number): number {
  return (word & LANE_F_POSITION) !== 0 ? LANE_HEADER : LANE_OLD_HEADER;
}

/** The word of a positioned record of `shard`. */
export function positionedWord(shard: number): number {
  return (shard | LANE_F_POSITION) >>> 0;
}

/**
 * Writes a positioned record's 20-byte header at out[at, at + 20) (a batch laid out as the
 * store keeps it; the caller sized `out`). `word` is `positionedWord(shard)`.
 */
export function writePositionedHeader(
  out: Uint8Array,
  at: number,
  word: number,
  epoch: bigint,
  position: number,
): void {
  if (at < 0 || at + LANE_HEADER > out.length) {
    throw new RangeError(`a lane record header at offset ${at} runs past ${out.length} bytes`);
  }
  putU32(out, at, word);
  putU64n(out, at + 4, epoch);
  putU64(out, at + 12, position);
}

/** A positioned lane record: the 20-byte header, then `payload`. */
export function encodePositioned(word: number, epoch: bigint, position: number, payload: Uint8Array): Uint8Array {
  const b = Buffer.allocUnsafe(LANE_HEADER + payload.length);
  writePositionedHeader(b, 0, word, epoch, position);
  b.set(payload, LANE_HEADER);
  return b;
}

/** A compaction mark of `shard`. */
export function encodeMark(
  shard: number,
  highestEpoch: bigint,
  start: number,
  last: number,
  oldLast: number,
): Uint8Array {
  const b = Buffer.allocUnsafe(LANE_MARK_BYTES);
  new ByteWriter(b)
    .u32((shard | LANE_F_MARK) >>> 0)
    .u64n(highestEpoch)
    .u64(start)
    .u64(last)
    .u64(oldLast);
  return b;
}
