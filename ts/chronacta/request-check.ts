/**
 * Checks of the requests that go through protobufjs (every method but Append, which has its
 * own decoder in wire.ts) for what protobufjs lets through:
 *
 * - a string field that is not UTF-8: protobufjs decodes it with U+FFFD in place of the bad
 *   bytes, so `ReadStream` of the bytes `a\xffb` would read the stream "a\uFFFDb". Append
 *   refuses such a name (wire.ts); so do the others now, before protobufjs decodes them;
 * - an enum number the schema does not define: protobufjs keeps the number (`direction = 99`),
 *   which the server must not take for the default.
 *
 * Refusals are PLX_CHRONACTA_BAD_INPUT (gRPC INVALID_ARGUMENT). The walk is length-first:
 * every length is checked against the bytes left before anything is read.
 */
import { badInput } from './errors.js';
import type { Direction } from './types.js';

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The top-level string fields (number to name) of the requests checked here. */
export const TEXT_FIELDS: Readonly<Record<string, Readonly<Record<number, string>>>> = {
  ReadStream: { 1: 'stream', 5: 'types' },
  ReadAll: { 4: 'streamPrefix', 5: 'types' },
  Delete: { 1: 'stream' },
  Truncate: { 1: 'stream' },
};

/**
 * Refuses a request of `method` whose top-level string fields in `fields` are not UTF-8, or
 * whose bytes do not parse as protobuf fields (protobufjs would refuse those too, later).
 */
export function checkTextFields(request: Uint8Array, method: string, fields: Readonly<Record<number, string>>): void {
  let pos = 0;
  const end = request.length;
  const varint = (): number => {
    let result = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      if (pos >= end) throw badInput(`the ${method} request: a varint runs past the end`);
      const b = request[pos++] as number;
      result += (b & 0x7f) * mul;
      if (b < 0x80) return result;
      mul *= 128;
    }
    throw badInput(`the ${method} request: a varint longer than 10 bytes`);
  };
  const skip = (n: number) => {
    if (n > end - pos) throw badInput(`the ${method} request: a field of ${n} bytes runs past the end`);
    pos += n;
  };
  while (pos < end) {
    const key = varint();
    const wireType = key % 8;
    const field = Math.floor(key / 8);
    switch (wireType) {
      case 0:
        varint();
        break;
      case 1:
        skip(8);
        break;
      case 5:
        skip(4);
        break;
      case 2: {
        const n = varint();
        const start = pos;
        skip(n);
        const name = fields[field];
        if (name !== undefined) {
          try {
            utf8.decode(request.subarray(start, pos));
          } catch {
            throw badInput(`the ${method} request: ${name} is not UTF-8`, { field: name });
          }
        }
        break;
      }
      default:
        throw badInput(`the ${method} request: wire type ${wireType} (groups or unknown) is not taken`);
    }
  }
}

/**
 * The direction of a read request as protobufjs decodes it (`enums: String`): FORWARDS or
 * BACKWARDS (an absent field is FORWARDS, proto3's default); any other value is refused.
 */
export function directionOf(v: unknown, method: string): Direction {
  if (v === undefined || v === null || v === 'FORWARDS') return 'forwards';
  if (v === 'BACKWARDS') return 'backwards';
  throw badInput(`the ${method} request: direction ${String(v)} is neither FORWARDS (0) nor BACKWARDS (1)`, {
    field: 'direction',
    value: typeof v === 'number' ? v : String(v),
  });
}
