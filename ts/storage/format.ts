/**
 * The files of a log directory (docs/storage.md): their names, and the byte layouts of the
 * segment, index and meta files, which live in ts/codec/log-segment.ts (docs/formats.md) and
 * are re-exported here for the log engine's modules.
 */
import { MAX_POSITION } from '../codec/log-segment.js';

export {
  BATCH_ID_BYTES,
  copyOut,
  decodeIndex,
  decodeMeta,
  decodeRecordHeader,
  decodeSegmentHeader,
  EMPTY_META,
  encodeBatch,
  encodeIndex,
  encodeMeta,
  encodeSegmentHeader,
  FLAG_BATCH_END,
  frameBatch,
  KNOWN_FLAGS,
  MAX_BATCH_BYTES,
  MAX_BATCH_RECORDS,
  MAX_POSITION,
  MAX_RECORD_BYTES,
  type Meta,
  RECORD_HEADER_BYTES,
  type RecordHeader,
  readU64,
  recordCrc,
  SEGMENT_HEADER_BYTES,
  type Seal,
  type SegmentSummary,
  writeU64,
} from '../codec/log-segment.js';

export const META_FILE = 'log.meta';
export const LOCK_FILE = 'LOCK';

const SEGMENT_NAME = /^(\d{20})\.seg$/;
const INDEX_NAME = /^(\d{20})\.idx$/;

export function segmentName(base: number): string {
  return `${String(base).padStart(20, '0')}.seg`;
}

export function indexName(base: number): string {
  return `${String(base).padStart(20, '0')}.idx`;
}

/** The base position a segment file's name states, or undefined for any other name. */
export function parseSegmentName(name: string): number | undefined {
  const m = SEGMENT_NAME.exec(name);
  if (!m) return undefined;
  const n = Number(m[1]);
  return n >= 1 && n <= MAX_POSITION ? n : undefined;
}

export function parseIndexName(name: string): number | undefined {
  const m = INDEX_NAME.exec(name);
  return m ? Number(m[1]) : undefined;
}
