/**
 * The records the replicated log puts in Raft entries besides EVFR frames (docs/formats.md;
 * docs/chronacta-ha.md, "Membership changes" and "Compaction in cluster mode"):
 *
 *   membership  4 bytes magic "PXHM" | UTF-8 JSON {"op":"member","member":{...}}   (at most META_MAX bytes)
 *   compaction  4 bytes magic "PXHC" | u64 below (little endian)                  (exactly 12 bytes)
 *
 * An entry is told apart by its first four bytes (an EVFR frame starts with "EVFR"). The
 * member inside a membership record is checked by the replicated log, which knows what a
 * member is; a record that does not decode is refused with what the caller's `refuse` builds.
 */
import { ByteReader, ByteWriter } from './bytes.js';

/** A membership record carried in a Raft entry: magic `PXHM`, then JSON. */
export const META_MAGIC = Uint8Array.of(0x50, 0x58, 0x48, 0x4d);
export const META_MAX = 4096;

/** A compaction record: magic `PXHC`, then the u64 position below which members may compact. */
export const COMPACT_MAGIC = Uint8Array.of(0x50, 0x58, 0x48, 0x43);
const COMPACT_BYTES = 12;

const startsWith = (data: Uint8Array, magic: Uint8Array): boolean =>
  data.length >= magic.length && magic.every((b, i) => data[i] === b);

export function isCompactMarker(data: Uint8Array): boolean {
  return data.length === COMPACT_BYTES && startsWith(data, COMPACT_MAGIC);
}

export function encodeCompactMarker(below: number): Uint8Array {
  return new ByteWriter(new Uint8Array(COMPACT_BYTES)).bytes(COMPACT_MAGIC).u64n(BigInt(below)).finish();
}

/** The position of a record `isCompactMarker` accepted. */
export function decodeCompactMarker(data: Uint8Array): number {
  return Number(new ByteReader(data, undefined, 4).u64n('compaction position'));
}

export function isMeta(data: Uint8Array): boolean {
  return startsWith(data, META_MAGIC);
}

export function encodeMeta(member: unknown): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify({ op: 'member', member }));
  return new ByteWriter(new Uint8Array(4 + json.length)).bytes(META_MAGIC).bytes(json).finish();
}

/**
 * The member of a membership record (unchecked). A record above META_MAX or of another op is
 * refused with `refuse(message)`; JSON that does not parse throws as JSON.parse does.
 */
export function decodeMeta(data: Uint8Array, refuse: (message: string) => Error): unknown {
  if (data.length > META_MAX) throw refuse(`membership record of ${data.length} bytes is above ${META_MAX}`);
  const v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(data.subarray(4))) as Record<string, unknown>;
  if (v.op !== 'member') throw refuse(`unknown membership record op ${String(v.op)}`);
  return v.member;
}
