/**
 * The catch-up stream of the replicated log (docs/chronacta-ha.md, "Snapshots and catch-up";
 * docs/formats.md): the frames a member that installs a Raft snapshot exchanges with a member
 * that holds the records below it. Every frame is
 *
 *   0 u32 magic "PXCU" | 4 u8 version (1) | 5 u8 type | 6 u16 reserved (0)
 *   8 u32 body length  | 12 u32 CRC-32C of bytes 0..11 and the body | 16 body
 *
 * (integers little endian) and the body is, by type:
 *
 *   1 FETCH    u64 from | u64 to | u32 maxBytes               (the records from..to, at most maxBytes)
 *   2 RECORDS  u64 sourceFirst | u64 sourceLast | u32 count,
 *              then per record: u64 position | u64 epoch | 16 batch id | u32 length | payload
 *   3 REFUSED  u64 sourceFirst | u64 sourceLast | u32 reason | u32 text length | UTF-8 text
 *   4 QUERY    (empty)                                   (where does your local log stand?)
 *   5 HOLDING  u64 first | u64 last | u64 durable        (the answer: the local log's first and
 *              last positions, and the last one known to be on disk; durable <= last)
 *
 * A leader asks every member with QUERY before it proposes a compaction cutoff
 * (docs/chronacta-ha.md, "Compaction in cluster mode").
 * The header is checked (magic, version, type, reserved, length against CATCH_UP_MAX_BODY and
 * the connection's maximum) before any body byte is read or held (`CatchUpStream` is a
 * `FrameAssembler`); every count and length in the body is checked against the bytes left
 * before anything is allocated; payloads are views into the input.
 *
 * The refusals are the replicated log's: every function that refuses takes a `CatchUpRefusal`
 * that builds the error (ts/replication/errors.ts passes one that throws
 * PLX_REPLICATION_BAD_FRAME), so this module names no code of a layer above it.
 */
import { crc32c } from '../core/index.js';
import { type ByteFail, ByteReader, ByteWriter } from './bytes.js';
import { FrameAssembler } from './frames.js';

export const CATCH_UP_HEADER_BYTES = 16;
export const CATCH_UP_VERSION = 1;
/** The largest body: one record of the log's largest size (64 MiB) and room for its header. */
export const CATCH_UP_MAX_BODY = 64 * 1024 * 1024 + 4096;
/** The largest request body (FETCH: 20 bytes, QUERY: none) a source takes. */
export const CATCH_UP_MAX_REQUEST_BODY = 64;
const CATCH_UP_MAGIC = 0x55435850; // "PXCU" little endian
const RECORD_HEAD = 8 + 8 + 16 + 4;

export const CATCH_UP_FETCH = 1;
export const CATCH_UP_RECORDS = 2;
export const CATCH_UP_REFUSED = 3;
export const CATCH_UP_QUERY = 4;
export const CATCH_UP_HOLDING = 5;

/** Why a source does not serve a fetch. */
export const RefusedReason = {
  /** The source's local log no longer holds `from` (compacted below it). */
  COMPACTED: 1,
  /** The source's local log does not reach `from` yet. */
  BEHIND: 2,
  /** The request itself is wrong (from 0, to below from). */
  BAD_REQUEST: 3,
} as const;

/** Builds the error for a frame that cannot be sent or does not decode; the stream is closed then. */
export type CatchUpRefusal = (message: string, details: Record<string, unknown>) => Error;

/** One record of the local log as a RECORDS frame carries it (the log engine's `LogRecord` shape). */
export interface CatchUpRecord {
  readonly position: bigint;
  readonly epoch: bigint;
  /** 16 bytes. */
  readonly batchId: Uint8Array;
  readonly payload: Uint8Array;
}

export type CatchUpFrame =
  | { readonly type: 'fetch'; readonly from: number; readonly to: number; readonly maxBytes: number }
  | {
      readonly type: 'records';
      readonly sourceFirst: number;
      readonly sourceLast: number;
      readonly records: readonly CatchUpRecord[];
    }
  | {
      readonly type: 'refused';
      readonly sourceFirst: number;
      readonly sourceLast: number;
      readonly reason: number;
      readonly text: string;
    }
  | { readonly type: 'query' }
  | { readonly type: 'holding'; readonly first: number; readonly last: number; readonly durable: number };

function badFrame(refuse: CatchUpRefusal) {
  return (message: string, details: Record<string, unknown> = {}): Error =>
    refuse(`catch-up stream: ${message}; the stream is closed`, details);
}

function frame(type: number, body: (w: ByteWriter) => void, bodyBytes: number): Uint8Array {
  const out = new Uint8Array(CATCH_UP_HEADER_BYTES + bodyBytes);
  const w = new ByteWriter(out);
  w.u32(CATCH_UP_MAGIC).u8(CATCH_UP_VERSION).u8(type).u16(0).u32(bodyBytes);
  w.at = CATCH_UP_HEADER_BYTES;
  body(w);
  new ByteWriter(out, 12).u32(crc32c(out.subarray(CATCH_UP_HEADER_BYTES), crc32c(out.subarray(0, 12))));
  return out;
}

export function encodeFetch(from: number, to: number, maxBytes: number): Uint8Array {
  return frame(CATCH_UP_FETCH, (w) => w.u64n(BigInt(from)).u64n(BigInt(to)).u32(maxBytes), 20);
}

export function encodeRecords(
  sourceFirst: bigint,
  sourceLast: bigint,
  records: readonly CatchUpRecord[],
  refuse: CatchUpRefusal,
): Uint8Array {
  let size = 20;
  for (const r of records) size += RECORD_HEAD + r.payload.length;
  if (size > CATCH_UP_MAX_BODY) throw badFrame(refuse)(`a RECORDS body of ${size} bytes is above ${CATCH_UP_MAX_BODY}`);
  return frame(
    CATCH_UP_RECORDS,
    (w) => {
      w.u64n(sourceFirst).u64n(sourceLast).u32(records.length);
      for (const r of records) {
        w.u64n(r.position).u64n(r.epoch);
        const id = w.at;
        w.bytes(r.batchId);
        w.at = id + 16;
        w.lenBytes(r.payload);
      }
    },
    size,
  );
}

export function encodeRefused(sourceFirst: bigint, sourceLast: bigint, reason: number, text: string): Uint8Array {
  const t = new TextEncoder().encode(text.slice(0, 1000));
  return frame(CATCH_UP_REFUSED, (w) => w.u64n(sourceFirst).u64n(sourceLast).u32(reason).lenBytes(t), 24 + t.length);
}

export function encodeQuery(): Uint8Array {
  return frame(CATCH_UP_QUERY, () => undefined, 0);
}

export function encodeHolding(first: bigint, last: bigint, durable: bigint, refuse: CatchUpRefusal): Uint8Array {
  if (durable > last) throw badFrame(refuse)(`the durable position ${durable} is above the last one ${last}`);
  return frame(CATCH_UP_HOLDING, (w) => w.u64n(first).u64n(last).u64n(durable), 24);
}

/**
 * The whole frame's length from its 16 header bytes: magic, version, type, reserved and the
 * body length (against CATCH_UP_MAX_BODY) are checked here, before any body byte.
 */
function frameLength(header: Uint8Array, bad: ReturnType<typeof badFrame>): number {
  const r = new ByteReader(header);
  if (r.u32() !== CATCH_UP_MAGIC) throw bad('the frame does not start with PXCU');
  const version = r.u8();
  if (version !== CATCH_UP_VERSION) throw bad(`version ${version} is not ${CATCH_UP_VERSION}`, { version });
  const type = r.u8();
  if (type < CATCH_UP_FETCH || type > CATCH_UP_HOLDING) throw bad(`frame type ${type} is unknown`, { type });
  if (r.u16() !== 0) throw bad('the reserved bytes are not zero');
  const length = r.u32();
  if (length > CATCH_UP_MAX_BODY) throw bad(`a body of ${length} bytes is above ${CATCH_UP_MAX_BODY}`, { length });
  return CATCH_UP_HEADER_BYTES + length;
}

/** The frame of `bytes`, a whole frame whose header `frameLength` accepted. */
function decodeFrame(bytes: Uint8Array, bad: ReturnType<typeof badFrame>): CatchUpFrame {
  const type = bytes[5] as number;
  const body = bytes.subarray(CATCH_UP_HEADER_BYTES);
  const crc = new ByteReader(bytes, undefined, 12).u32();
  if (crc32c(body, crc32c(bytes.subarray(0, 12))) !== crc) throw bad('the CRC-32C does not match');
  const fail: ByteFail = (_reason, _what, message) => bad(message);
  const r = new ByteReader(body, fail);
  const position = (what: string): number => {
    const v = r.u64n(what);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw bad(`${what} ${v} is above 2^53 - 1`);
    return Number(v);
  };
  if (type === CATCH_UP_FETCH) {
    if (body.length !== 20) throw bad(`a FETCH body is 20 bytes, not ${body.length}`);
    const from = position('from');
    const to = position('to');
    return { type: 'fetch', from, to, maxBytes: r.u32() };
  }
  if (type === CATCH_UP_QUERY) {
    if (body.length !== 0) throw bad(`a QUERY body is empty, not ${body.length} bytes`);
    return { type: 'query' };
  }
  if (type === CATCH_UP_HOLDING) {
    if (body.length !== 24) throw bad(`a HOLDING body is 24 bytes, not ${body.length}`);
    const first = position('first');
    const last = position('last');
    const durable = position('durable');
    if (durable > last) throw bad(`the durable position ${durable} is above the last one ${last}`);
    return { type: 'holding', first, last, durable };
  }
  if (type === CATCH_UP_REFUSED) {
    if (body.length < 24) throw bad(`the body of ${body.length} bytes is too short for a REFUSED frame`);
    const sourceFirst = position('sourceFirst');
    const sourceLast = position('sourceLast');
    const reason = r.u32();
    const n = r.u32();
    if (n !== body.length - 24) throw bad(`the text length ${n} does not match the ${body.length - 24} bytes left`);
    let text: string;
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(r.rest());
    } catch {
      throw bad('the refusal text is not UTF-8');
    }
    return { type: 'refused', sourceFirst, sourceLast, reason, text };
  }
  if (body.length < 20) throw bad(`the body of ${body.length} bytes is too short for a RECORDS frame`);
  const sourceFirst = position('sourceFirst');
  const sourceLast = position('sourceLast');
  const count = r.u32();
  // Every record takes at least its 36-byte head: refuse a count the body cannot hold before allocating.
  if (count > Math.floor((body.length - 20) / RECORD_HEAD)) {
    throw bad(`${count} records do not fit in ${body.length - 20} bytes`, { count });
  }
  const records: CatchUpRecord[] = [];
  for (let i = 0; i < count; i++) {
    if (r.left < RECORD_HEAD) throw bad(`record ${i} is cut`);
    const len = new ByteReader(body, fail, r.at + 32).u32();
    if (len > r.left - RECORD_HEAD) throw bad(`record ${i} claims ${len} payload bytes; fewer are left`);
    const p = BigInt(position('a record position'));
    const epoch = r.u64n('epoch');
    const batchId = r.bytes(16, 'batch id');
    records.push({ position: p, epoch, batchId, payload: r.lenBytes('payload') });
  }
  if (r.left !== 0) throw bad(`${r.left} bytes follow the last record`);
  return { type: 'records', sourceFirst, sourceLast, records };
}

/**
 * Decodes one frame at the start of `bytes`: `incomplete` with the bytes needed to go on, or
 * the frame and the bytes it took. Refusals throw what `refuse` builds.
 */
export function decodeCatchUp(
  bytes: Uint8Array,
  refuse: CatchUpRefusal,
): { kind: 'incomplete'; need: number } | { kind: 'frame'; frame: CatchUpFrame; consumed: number } {
  if (bytes.length < CATCH_UP_HEADER_BYTES) return { kind: 'incomplete', need: CATCH_UP_HEADER_BYTES };
  const bad = badFrame(refuse);
  const size = frameLength(bytes.subarray(0, CATCH_UP_HEADER_BYTES), bad);
  if (bytes.length < size) return { kind: 'incomplete', need: size };
  return { kind: 'frame', frame: decodeFrame(bytes.subarray(0, size), bad), consumed: size };
}

/**
 * A byte-fed decoder for one catch-up connection (a `FrameAssembler` with the 16-byte header):
 * `push` takes the bytes that arrived and returns the frames they complete; bytes are held only
 * up to one frame, its length checked against `maxBody` first. A refused frame throws (and every
 * later push throws it again); close the connection then. Payloads are views of the chunks
 * pushed: a chunk must not change after it is pushed.
 */
export class CatchUpStream {
  private readonly frames: FrameAssembler;
  private readonly bad: ReturnType<typeof badFrame>;

  /**
   * @param refuse builds the refusal of a frame that does not decode.
   * @param maxBody the largest body accepted (at most CATCH_UP_MAX_BODY): a header announcing
   * more is refused before its body is held. A source reading requests takes
   * CATCH_UP_MAX_REQUEST_BODY.
   */
  constructor(refuse: CatchUpRefusal, maxBody = CATCH_UP_MAX_BODY) {
    const bad = badFrame(refuse);
    this.bad = bad;
    this.frames = new FrameAssembler({
      headerBytes: CATCH_UP_HEADER_BYTES,
      maxFrame: CATCH_UP_HEADER_BYTES + Math.min(maxBody, CATCH_UP_MAX_BODY),
      frameLength: (header) => frameLength(header, bad),
      tooLarge: (length) =>
        bad(`a body of ${length - CATCH_UP_HEADER_BYTES} bytes is above ${maxBody} here`, {
          length: length - CATCH_UP_HEADER_BYTES,
        }),
    });
  }

  private failure: Error | undefined;

  push(chunk: Uint8Array): CatchUpFrame[] {
    if (this.failure) throw this.failure;
    const whole = this.frames.push(chunk);
    try {
      return whole.map((f) => decodeFrame(f, this.bad));
    } catch (e) {
      this.failure = e as Error;
      throw e;
    }
  }

  /** Bytes held of a frame not yet whole. */
  get buffered(): number {
    return this.frames.buffered;
  }
}
