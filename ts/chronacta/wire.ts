/**
 * The hand-written protobuf codec of the hot messages of proto/chronacta.proto (their schemas;
 * the protobuf reader and varint writer are ts/codec/protobuf.ts, the gRPC prefix ts/codec/grpc-frame.ts):
 * `AppendRequest` (decoded) and `AppendResponse` (encoded). Every other message goes
 * through protobufjs (proto-loader); test/chronacta/wire.test.ts holds this codec to the
 * protobufjs encoding of the same messages.
 *
 * The decoder is length-first: every length is checked against the bytes left before
 * anything is read or allocated, the events are counted (at most MAX_BATCH_EVENTS) before
 * their table is made, and the events' bytes are not copied: the table holds offsets into
 * the request, which the store's record encoder reads from directly (batch.ts).
 *
 * Wire rules followed (proto3): unknown fields are skipped; a field that appears twice
 * takes its last value (a message field too); a known field with the wrong wire type, a
 * group, a cut varint or length, or a string that is not UTF-8 is refused with
 * PLX_CHRONACTA_BAD_INPUT.
 */

import { EV_SLOTS } from '../codec/chronacta-batch.js';
import { GRPC_HEADER_BYTES, putGrpcPrefix } from '../codec/grpc-frame.js';
import { ProtoReader, putVarint, varintSize, WT_LEN, WT_VARINT } from '../codec/protobuf.js';
import { badInput, tooLarge } from './errors.js';
import type { ExpectedVersion } from './types.js';
import { MAX_BATCH_EVENTS, MAX_KEY_BYTES, MAX_NUMBER, MAX_STREAM_NAME_BYTES } from './validate.js';

/** An AppendRequest as the decoder leaves it: the events stay in `buf`. */
export interface AppendWire {
  readonly stream: string;
  readonly expected: ExpectedVersion;
  /** Absent when the request's key is empty. */
  readonly key: string | undefined;
  readonly buf: Uint8Array;
  readonly count: number;
  /** EV_SLOTS numbers per event: offset and length in `buf` of its id, type, data, metadata. */
  readonly ev: Uint32Array;
}

/** Chronacta's refusal of bad protobuf input. */
const fail = (message: string): Error => badInput(message);

/**
 * Decodes an AppendRequest from `buf` (the message bytes, without the gRPC prefix). Names
 * and the key are checked for size here (their bytes are read only below the limits);
 * everything else about the events is checked by the store.
 */
export function decodeAppendRequest(buf: Uint8Array): AppendWire {
  const what = 'AppendRequest';
  // Pass 1: count the events, so their table is sized by what is really there.
  const c = new ProtoReader(buf, 0, buf.length, what, fail);
  let count = 0;
  while (c.more) {
    const tag = c.varint();
    if (tag >>> 3 === 2 && (tag & 7) === WT_LEN) {
      count++;
      if (count > MAX_BATCH_EVENTS) {
        throw tooLarge(`an append holds at most ${MAX_BATCH_EVENTS} events`, { events: count });
      }
    }
    c.skip(tag & 7);
  }
  const ev = new Uint32Array(count * EV_SLOTS);
  let stream = '';
  let key: string | undefined;
  let expected: ExpectedVersion = 'any';
  let i = 0;
  c.pos = 0;
  // One cursor for every event, moved from one to the next.
  const ec = new ProtoReader(buf, 0, 0, 'AppendRequest', fail, 0);
  while (c.more) {
    const tag = c.varint();
    const field = tag >>> 3;
    const wt = tag & 7;
    switch (field) {
      case 1: {
        if (wt !== WT_LEN) throw c.wrongType(field, wt);
        const n = c.len();
        if (n > MAX_STREAM_NAME_BYTES) {
          throw badInput(`stream name is longer than ${MAX_STREAM_NAME_BYTES} bytes of UTF-8`, { bytes: n });
        }
        stream = c.text(n, 'the stream name');
        break;
      }
      case 2: {
        if (wt !== WT_LEN) throw c.wrongType(field, wt);
        const n = c.len();
        ec.pos = c.pos;
        ec.end = c.pos + n;
        ec.event = i;
        decodeEventData(ec, ev, i * EV_SLOTS);
        c.pos += n;
        i++;
        break;
      }
      case 3: {
        if (wt !== WT_LEN) throw c.wrongType(field, wt);
        const n = c.len();
        expected = decodeExpected(buf, c.pos, c.pos + n);
        c.pos += n;
        break;
      }
      case 4: {
        if (wt !== WT_LEN) throw c.wrongType(field, wt);
        const n = c.len();
        if (n > MAX_KEY_BYTES) throw badInput(`idempotencyKey must be valid Unicode of at most ${MAX_KEY_BYTES} bytes`);
        const k = c.text(n, 'the idempotency key');
        key = k === '' ? undefined : k;
        break;
      }
      default:
        c.skip(wt);
    }
  }
  return { stream, expected, key, buf, count, ev };
}

/** Reads one EventData message, the span `c` is set to, into its slots of `ev` from `at`. */
function decodeEventData(c: ProtoReader, ev: Uint32Array, at: number): void {
  // Absent fields are empty: offset anywhere, length 0.
  while (c.more) {
    const tag = c.varint();
    const field = tag >>> 3;
    const wt = tag & 7;
    if (field >= 1 && field <= 4) {
      if (wt !== WT_LEN) throw c.wrongType(field, wt);
      const n = c.len();
      // id 1 -> slot 0, type 2 -> slot 2, data 3 -> slot 4, metadata 4 -> slot 6
      const slot = at + (field - 1) * 2;
      ev[slot] = c.pos;
      ev[slot + 1] = n;
      c.pos += n;
    } else c.skip(wt);
  }
}

function decodeExpected(buf: Uint8Array, start: number, end: number): ExpectedVersion {
  const c = new ProtoReader(buf, start, end, 'AppendRequest: expected_version', fail);
  let out: ExpectedVersion = 'any';
  while (c.more) {
    const tag = c.varint();
    const field = tag >>> 3;
    const wt = tag & 7;
    if (field >= 1 && field <= 3) {
      if (wt !== WT_LEN) throw c.wrongType(field, wt);
      const n = c.len(); // Empty: any content is skipped as unknown fields
      c.pos += n;
      out = field === 1 ? 'any' : field === 2 ? 'no_stream' : 'exists';
    } else if (field === 4) {
      if (wt !== WT_VARINT) throw c.wrongType(field, wt);
      const v = c.varint();
      if (v > MAX_NUMBER) {
        throw badInput(`expectedVersion must be 'any', 'no_stream', 'exists' or a version (a bigint from 0), got ${v}`);
      }
      out = BigInt(v);
    } else c.skip(wt);
  }
  return out;
}

// ------------------------------------------------------------------ AppendResponse

/** What an AppendResponse carries; numbers below 2^53. */
export interface AppendReply {
  readonly firstVersion: number;
  readonly lastVersion: number;
  readonly firstPosition: number;
  readonly lastPosition: number;
  /** 16 bytes, written as the UUID text. */
  readonly batchId: Uint8Array;
  readonly duplicate: boolean;
}

const HEX = '0123456789abcdef';

/** Writes the UUID text of 16 bytes at `pos` (36 bytes). */
export function putUuid(out: Uint8Array, pos: number, b: Uint8Array): number {
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) out[pos++] = 45; // '-'
    const x = b[i] as number;
    out[pos++] = HEX.charCodeAt(x >> 4);
    out[pos++] = HEX.charCodeAt(x & 15);
  }
  return pos;
}

/**
 * The gRPC message of an AppendResponse, with its 5-byte gRPC prefix in front (the frame
 * the server writes). Zero numbers and `false` are left out, as proto3 does.
 */
export function encodeAppendResponseFrame(r: AppendReply): Uint8Array {
  const nums = [r.firstVersion, r.lastVersion, r.firstPosition, r.lastPosition];
  let size = 2 + 36 + (r.duplicate ? 2 : 0);
  for (const v of nums) if (v !== 0) size += 1 + varintSize(v);
  const out = Buffer.allocUnsafe(GRPC_HEADER_BYTES + size);
  putGrpcPrefix(out, 0, size);
  let p = GRPC_HEADER_BYTES;
  for (let f = 0; f < 4; f++) {
    const v = nums[f] as number;
    if (v === 0) continue;
    out[p++] = ((f + 1) << 3) | WT_VARINT;
    p = putVarint(out, p, v);
  }
  out[p++] = (5 << 3) | WT_LEN;
  out[p++] = 36;
  p = putUuid(out, p, r.batchId);
  if (r.duplicate) {
    out[p++] = (6 << 3) | WT_VARINT;
    out[p++] = 1;
  }
  return out;
}
