/**
 * What the engine knows about one segment file: its base position, how many records it
 * holds, where they end, and a sparse offset index (the offset of every `indexEvery`-th
 * record), so a position is found by arithmetic and at most `indexEvery - 1` record headers
 * are stepped over, never by scanning the segment.
 */
import { indexName, SEGMENT_HEADER_BYTES, type SegmentSummary, segmentName } from './format.js';

export class Segment {
  readonly name: string;
  readonly indexName: string;
  count = 0;
  /** Where the last record ends (the file's size once synced). */
  end = SEGMENT_HEADER_BYTES;
  maxEpoch = 0n;
  private offsets: Uint32Array;
  private entries = 0;

  constructor(
    readonly base: number,
    readonly indexEvery: number,
    summary?: SegmentSummary,
  ) {
    this.name = segmentName(base);
    this.indexName = indexName(base);
    if (summary) {
      this.offsets = summary.offsets.slice();
      this.entries = summary.offsets.length;
      this.count = summary.count;
      this.end = summary.end;
      this.maxEpoch = summary.maxEpoch;
    } else {
      this.offsets = new Uint32Array(16);
    }
  }

  /** Position of the last record, `base - 1` when it holds none. */
  get last(): number {
    return this.base + this.count - 1;
  }

  /** Records the next record (position `base + count`) stored at `offset`, `size` bytes in all. */
  push(offset: number, size: number, epoch: bigint): void {
    if (this.count % this.indexEvery === 0) {
      if (this.entries === this.offsets.length) {
        const grown = new Uint32Array(this.offsets.length * 2);
        grown.set(this.offsets);
        this.offsets = grown;
      }
      this.offsets[this.entries++] = offset;
    }
    this.count++;
    this.end = offset + size;
    if (epoch > this.maxEpoch) this.maxEpoch = epoch;
  }

  /** Where to start reading for `position`: an indexed offset and how many records to step over. */
  seek(position: number): { offset: number; skip: number } {
    const rel = position - this.base;
    const k = Math.floor(rel / this.indexEvery);
    return { offset: this.offsets[k] as number, skip: rel - k * this.indexEvery };
  }

  /** Keeps the first `count` records, which end at `end`. */
  truncate(count: number, end: number): void {
    this.count = count;
    this.end = end;
    this.entries = Math.ceil(count / this.indexEvery);
  }

  summary(): SegmentSummary {
    return {
      base: this.base,
      count: this.count,
      end: this.end,
      maxEpoch: this.maxEpoch,
      indexEvery: this.indexEvery,
      offsets: this.offsets.slice(0, this.entries),
    };
  }
}
