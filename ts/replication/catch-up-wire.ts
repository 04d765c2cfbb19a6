/**
 * The catch-up stream of the replicated log (docs/chronacta-ha.md, "Snapshots and catch-up"):
 * the frames a member that installs a Raft snapshot exchanges with a member that holds the
 * records below it. Every frame is
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
 * The header is checked (magic, version, type, reserved, length against CATCH_UP_MAX_BODY)
 * before any body byte is read or held; every count and length in the body is checked
 * against the bytes left before anything is allocated; payloads are views into the input.
 */
import { PlexusError } from '../core/errors.js';
import { crc32c } from '../core/index.js';
import type { LogRecord } from '../storage/types.js';
import { ReplicationErrorCode } from './errors.js';

export const CATCH_UP_HEADER_BYTES = 16;
export const CATCH_UP_VERSION = 1;
/** The largest body: one record of the log's largest size (64 MiB) and room for its header. */
export const CATCH_UP_MAX_BODY = 64 * 1024 * 1024 + 4096;
/** The largest request body (FETCH: 20 bytes, QUERY: none) a source takes. */
export const CATCH_UP_MAX_REQUEST_BODY = 64;
const MAGIC = 0x55435850; // "PXCU" little endian
const RECORD_HEAD = 8 + 8 + 16 + 4;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

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

export type CatchUpFrame =
  | { readonly type: 'fetch'; readonly from: number; readonly to: number; readonly maxBytes: number }
  | {
      readonly type: 'records';
      readonly sourceFirst: number;
      readonly sourceLast: number;
      readonly records: readonly LogRecord[];
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

function bad(message: string, details: Record<string, unknown> = {}): PlexusError {
  return new PlexusError(ReplicationErrorCode.BAD_FRAME, `catch-up stream: ${message}; the stream is closed`, details);
}

function frame(type: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(CATCH_UP_HEADER_BYTES + body.length);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, MAGIC, true);
  dv.setUint8(4, CATCH_UP_VERSION);
  dv.setUint8(5, type);
  dv.setUint32(8, body.length, true);
  out.set(body, CATCH_UP_HEADER_BYTES);
  dv.setUint32(12, crc32c(body, crc32c(out.subarray(0, 12))), true);
  return out;
}

export function encodeFetch(from: number, to: number, maxBytes: number): Uint8Array {
  const b = new Uint8Array(20);
  const dv = new DataView(b.buffer);
  dv.setBigUint64(0, BigInt(from), true);
  dv.setBigUint64(8, BigInt(to), true);
  dv.setUint32(16, maxBytes, true);
  return frame(CATCH_UP_FETCH, b);
}

export function encodeRecords(sourceFirst: bigint, sourceLast: bigint, records: readonly LogRecord[]): Uint8Array {
  let size = 20;
  for (const r of records) size += RECORD_HEAD + r.payload.length;
  if (size > CATCH_UP_MAX_BODY) throw bad(`a RECORDS body of ${size} bytes is above ${CATCH_UP_MAX_BODY}`);
  const b = new Uint8Array(size);
  const dv = new DataView(b.buffer);
  dv.setBigUint64(0, sourceFirst, true);
  dv.setBigUint64(8, sourceLast, true);
  dv.setUint32(16, records.length, true);
  let at = 20;
  for (const r of records) {
    dv.setBigUint64(at, r.position, true);
    dv.setBigUint64(at + 8, r.epoch, true);
    b.set(r.batchId, at + 16);
    dv.setUint32(at + 32, r.payload.length, true);
    b.set(r.payload, at + RECORD_HEAD);
    at += RECORD_HEAD + r.payload.length;
  }
  return frame(CATCH_UP_RECORDS, b);
}

export function encodeRefused(sourceFirst: bigint, sourceLast: bigint, reason: number, text: string): Uint8Array {
  const t = new TextEncoder().encode(text.slice(0, 1000));
  const b = new Uint8Array(24 + t.length);
  const dv = new DataView(b.buffer);
  dv.setBigUint64(0, sourceFirst, true);
  dv.setBigUint64(8, sourceLast, true);
  dv.setUint32(16, reason, true);
  dv.setUint32(20, t.length, true);
  b.set(t, 24);
  return frame(CATCH_UP_REFUSED, b);
}

export function encodeQuery(): Uint8Array {
  return frame(CATCH_UP_QUERY, new Uint8Array(0));
}

export function encodeHolding(first: bigint, last: bigint, durable: bigint): Uint8Array {
  if (durable > last) throw bad(`the durable position ${durable} is above the last one ${last}`);
  const b = new Uint8Array(24);
  const dv = new DataView(b.buffer);
  dv.setBigUint64(0, first, true);
  dv.setBigUint64(8, last, true);
  dv.setBigUint64(16, durable, true);
  return frame(CATCH_UP_HOLDING, b);
}

function position(dv: DataView, at: number, what: string): number {
  const v = dv.getBigUint64(at, true);
  if (v > MAX_SAFE) throw bad(`${what} ${v} is above 2^53 - 1`);
  return Number(v);
}

/**
 * Decodes one frame at the start of `bytes`: `incomplete` with the bytes needed to go on, or
 * the frame and the bytes it took. Refusals throw PLX_REPLICATION_BAD_FRAME.
 */
export function decodeCatchUp(
  bytes: Uint8Array,
): { kind: 'incomplete'; need: number } | { kind: 'frame'; frame: CatchUpFrame; consumed: number } {
  if (bytes.length < CATCH_UP_HEADER_BYTES) return { kind: 'incomplete', need: CATCH_UP_HEADER_BYTES };
  const hv = new DataView(bytes.buffer, bytes.byteOffset, CATCH_UP_HEADER_BYTES);
  if (hv.getUint32(0, true) !== MAGIC) throw bad('the frame does not start with PXCU');
  const version = hv.getUint8(4);
  if (version !== CATCH_UP_VERSION) throw bad(`version ${version} is not ${CATCH_UP_VERSION}`, { version });
  const type = hv.getUint8(5);
  if (type < CATCH_UP_FETCH || type > CATCH_UP_HOLDING) throw bad(`frame type ${type} is unknown`, { type });
  if (hv.getUint16(6, true) !== 0) throw bad('the reserved bytes are not zero');
  const length = hv.getUint32(8, true);
  if (length > CATCH_UP_MAX_BODY) throw bad(`a body of ${length} bytes is above ${CATCH_UP_MAX_BODY}`, { length });
  const size = CATCH_UP_HEADER_BYTES + length;
  if (bytes.length < size) return { kind: 'incomplete', need: size };
  const body = bytes.subarray(CATCH_UP_HEADER_BYTES, size);
  if (crc32c(body, crc32c(bytes.subarray(0, 12))) !== hv.getUint32(12, true)) throw bad('the CRC-32C does not match');
  const dv = new DataView(body.buffer, body.byteOffset, body.length);
  const need = (n: number, what: string) => {
    if (body.length < n) throw bad(`the body of ${body.length} bytes is too short for ${what}`);
  };
  if (type === CATCH_UP_FETCH) {
    if (body.length !== 20) throw bad(`a FETCH body is 20 bytes, not ${body.length}`);
    const from = position(dv, 0, 'from');
    const to = position(dv, 8, 'to');
    return { kind: 'frame', frame: { type: 'fetch', from, to, maxBytes: dv.getUint32(16, true) }, consumed: size };
  }
  if (type === CATCH_UP_QUERY) {
    if (body.length !== 0) throw bad(`a QUERY body is empty, not ${body.length} bytes`);
    return { kind: 'frame', frame: { type: 'query' }, consumed: size };
  }
  if (type === CATCH_UP_HOLDING) {
    if (body.length !== 24) throw bad(`a HOLDING body is 24 bytes, not ${body.length}`);
    const first = position(dv, 0, 'first');
    const last = position(dv, 8, 'last');
    const durable = position(dv, 16, 'durable');
    if (durable > last) throw bad(`the durable position ${durable} is above the last one ${last}`);
    return { kind: 'frame', frame: { type: 'holding', first, last, durable }, consumed: size };
  }
  if (type === CATCH_UP_REFUSED) {
    need(24, 'a REFUSED frame');
    const n = dv.getUint32(20, true);
    if (n !== body.length - 24) throw bad(`the text length ${n} does not match the ${body.length - 24} bytes left`);
    let text: string;
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(body.subarray(24));
    } catch {
      throw bad('the refusal text is not UTF-8');
    }
    return {
      kind: 'frame',
      frame: {
        type: 'refused',
        sourceFirst: position(dv, 0, 'sourceFirst'),
        sourceLast: position(dv, 8, 'sourceLast'),
        reason: dv.getUint32(16, true),
        text,
      },
      consumed: size,
    };
  }
  need(20, 'a RECORDS frame');
  const count = dv.getUint32(16, true);
  // Every record takes at least its 36-byte head: refuse a count the body cannot hold before allocating.
  if (count > Math.floor((body.length - 20) / RECORD_HEAD)) {
    throw bad(`${count} records do not fit in ${body.length - 20} bytes`, { count });
  }
  const records: LogRecord[] = [];
  let at = 20;
  for (let i = 0; i < count; i++) {
    if (body.length - at < RECORD_HEAD) throw bad(`record ${i} is cut`);
    const len = dv.getUint32(at + 32, true);
    if (len > body.length - at - RECORD_HEAD) throw bad(`record ${i} claims ${len} payload bytes; fewer are left`);
    records.push({
      position: BigInt(position(dv, at, 'a record position')),
      epoch: dv.getBigUint64(at + 8, true),
      batchId: body.subarray(at + 16, at + 32),
      payload: body.subarray(at + RECORD_HEAD, at + RECORD_HEAD + len),
    });
    at += RECORD_HEAD + len;
  }
  if (at !== body.length) throw bad(`${body.length - at} bytes follow the last record`);
  return {
    kind: 'frame',
    frame: {
      type: 'records',
      sourceFirst: position(dv, 0, 'sourceFirst'),
      sourceLast: position(dv, 8, 'sourceLast'),
      records,
    },
    consumed: size,
  };
}

/**
 * A byte-fed decoder for one catch-up connection: `push` takes the bytes that arrived and
 * returns the frames they complete; bytes are held only up to one frame (its length checked
 * first). A refused frame throws; close the connection then.
 */
export class CatchUpStream {
  private pending: Uint8Array[] = [];
  private held = 0;
  private want = CATCH_UP_HEADER_BYTES;

  /**
   * @param maxBody the largest body accepted (at most CATCH_UP_MAX_BODY): a header announcing
   * more is refused before its body is held. A source reading requests takes
   * CATCH_UP_MAX_REQUEST_BODY.
   */
  constructor(private readonly maxBody = CATCH_UP_MAX_BODY) {}

  push(chunk: Uint8Array): CatchUpFrame[] {
    if (chunk.length > 0) {
      this.pending.push(chunk);
      this.held += chunk.length;
    }
    const out: CatchUpFrame[] = [];
    while (this.held >= this.want) {
      const buf = this.join();
      const d = decodeCatchUp(buf);
      if (d.kind === 'incomplete') {
        if (d.need - CATCH_UP_HEADER_BYTES > this.maxBody) {
          throw bad(`a body of ${d.need - CATCH_UP_HEADER_BYTES} bytes is above ${this.maxBody} here`, {
            length: d.need - CATCH_UP_HEADER_BYTES,
          });
        }
        this.want = d.need;
        break;
      }
      out.push(d.frame);
      // Payloads are views into `buf`: copy the rest so a later join never overwrites them.
      const rest = buf.slice(d.consumed);
      this.pending = rest.length > 0 ? [rest] : [];
      this.held = rest.length;
      this.want = CATCH_UP_HEADER_BYTES;
    }
    return out;
  }

  get buffered(): number {
    return this.held;
  }

  private join(): Uint8Array {
    if (this.pending.length === 1) return this.pending[0] as Uint8Array;
    const all = new Uint8Array(this.held);
    let at = 0;
    for (const p of this.pending) {
      all.set(p, at);
      at += p.length;
    }
    this.pending = [all];
    return all;
  }
}
