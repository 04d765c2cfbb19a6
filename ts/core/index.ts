/**
 * plexus/core: the WebAssembly kernels and their TypeScript twins.
 *
 * Every function checks its arguments once, here, and then runs on the backend chosen
 * for the process (PLEXUS_BACKEND=js|wasm, default wasm). Refusals are PlexusError
 * with a stable `code` (docs/errors.md).
 */
import { backend } from './backend.js';
import {
  ELEMENT_TYPE_NAMES,
  ELEMENT_WIDTH,
  ElementType,
  type ElementTypeName,
  elementTypeOf,
  REDUCE_OP_NAMES,
  ReduceOp,
  type ReduceOpName,
  reduceAllowed,
} from './codes.js';
import { PlexusError } from './errors.js';
import type { HeaderSchema, HeaderVerdicts, Int } from './header-schema.js';
import { NATIVE_SHA256_MIN, nativeSha256, nativeSha256Stream } from './native.js';
import type { Sha256Stream } from './types.js';

export { backend, kernels, useBackend } from './backend.js';
export {
  type Clock,
  type ClockTimers,
  ManualClock,
  monotonicClock,
  systemClock,
  type TimerHandle,
  type Timers,
} from './clock.js';
export {
  ELEMENT_TYPE_NAMES,
  ELEMENT_WIDTH,
  ElementType,
  type ElementTypeCode,
  type ElementTypeName,
  elementTypeOf,
  REDUCE_OP_NAMES,
  ReduceOp,
  type ReduceOpCode,
  type ReduceOpName,
  reduceAllowed,
} from './codes.js';
export {
  type CodeSuffix,
  codeFromPeer,
  isPlexusCode,
  isPlexusError,
  PLEXUS_CODE_ALIASES,
  PLX_CODES,
  type PlexusCode,
  type PlexusDetails,
  type PlexusDetailsMap,
  PlexusError,
  SPERLI_H_CODES,
} from './errors.js';
export {
  defineHeader,
  type HeaderCheckDef,
  type HeaderDef,
  type HeaderFieldDef,
  HeaderSchema,
  type HeaderVerdicts,
  VERDICT_INCOMPLETE,
} from './header-schema.js';
export { allocShared, SharedBytes } from './shared.js';
export type { BackendName, Kernel, Sha256Stream } from './types.js';

/** The largest shard count: 2^20. */
export const MAX_SHARDS = 1 << 20;

function bytesOf(input: unknown, what: string): Uint8Array {
  if (input instanceof Uint8Array) return input;
  if (ArrayBuffer.isView(input)) return new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
  if (input instanceof ArrayBuffer) return new Uint8Array(input);
  throw new PlexusError(
    'PLX_CORE_BAD_INPUT',
    `${what} takes bytes (a Uint8Array, another typed array or an ArrayBuffer), got ${describe(input)}`,
  );
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return `a ${(v as object).constructor?.name ?? 'object'}`;
  return `a ${typeof v}`;
}

function checkShardCount(n: unknown): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_SHARDS || (n & (n - 1)) !== 0) {
    throw new PlexusError(
      'PLX_CORE_BAD_SHARD_COUNT',
      `shard count ${String(n)} is not allowed: use a power of two from 1 to ${MAX_SHARDS} (1, 2, 4, ... 1048576)`,
      { shardCount: n },
    );
  }
  return n;
}

function checkStrings(items: unknown, what: string): readonly string[] {
  if (!Array.isArray(items)) {
    throw new PlexusError('PLX_CORE_BAD_INPUT', `${what} takes an array of strings, got ${describe(items)}`);
  }
  for (let i = 0; i < items.length; i++) {
    if (typeof items[i] !== 'string') {
      throw new PlexusError('PLX_CORE_BAD_INPUT', `${what}: item ${i} is ${describe(items[i])}, not a string`, {
        index: i,
      });
    }
  }
  return items as readonly string[];
}

/** FNV-1a 64 of bytes, or of a string's UTF-8 encoding. */
export function fnv1a64(input: string | Uint8Array): bigint {
  if (typeof input === 'string') return backend().fnv1a64String(input);
  return backend().fnv1a64(bytesOf(input, 'fnv1a64'));
}

/** FNV-1a 64 of each string's UTF-8 encoding, in one call. */
export function fnv1a64Batch(items: readonly string[]): BigUint64Array {
  return backend().fnv1a64Batch(checkStrings(items, 'fnv1a64Batch'));
}

/**
 * Shard hash version 1: FNV-1a-64(UTF-8 of the IRI) mod shardCount, where shardCount
 * is a power of two from 1 to 2^20.
 */
export function shardOf(iri: string, shardCount: number): number {
  if (typeof iri !== 'string') {
    throw new PlexusError('PLX_CORE_BAD_INPUT', `shardOf takes an IRI string, got ${describe(iri)}`);
  }
  const n = checkShardCount(shardCount);
  return Number(backend().fnv1a64String(iri) & BigInt(n - 1));
}

/** Shard hash version 1 of many IRIs in one call. */
export function shardOfBatch(iris: readonly string[], shardCount: number): Uint32Array {
  const items = checkStrings(iris, 'shardOfBatch');
  return backend().shardBatch(items, checkShardCount(shardCount));
}

const utf8 = new TextEncoder();

/**
 * SHA-256 (FIPS 180-4) of bytes or of a string's UTF-8 encoding. With the wasm backend,
 * inputs of NATIVE_SHA256_MIN (512) bytes and more go to node:crypto where it exists
 * (faster there, with the CPU's SHA instructions); smaller ones to the WASM kernel.
 * The result is a Uint8Array (a Buffer where node:crypto made it).
 */
export function sha256(input: Uint8Array | string): Uint8Array {
  const data =
    input instanceof Uint8Array ? input : typeof input === 'string' ? utf8.encode(input) : bytesOf(input, 'sha256');
  const k = backend();
  if (data.length >= NATIVE_SHA256_MIN && nativeSha256 !== undefined && k.name === 'wasm') return nativeSha256(data);
  return k.sha256(data);
}

/**
 * A streaming SHA-256: update() any number of times, then digest() once. Like sha256(), with
 * the wasm backend on Node.js a stream that grows past NATIVE_SHA256_MIN bytes continues on
 * node:crypto (the bytes before are held until then); a shorter one is hashed by the kernel.
 */
export function createSha256(): Sha256Stream {
  const k = backend();
  const canGoNative = k.name === 'wasm' && nativeSha256Stream !== undefined;
  let held: Uint8Array[] = [];
  let heldBytes = 0;
  let native: { update(d: Uint8Array): unknown; digest(): Uint8Array } | undefined;
  const kernel = canGoNative ? undefined : k.sha256Stream();
  let done = false;
  const stream: Sha256Stream = {
    update(data: Uint8Array) {
      if (done) throw new PlexusError('PLX_CORE_DIGESTED', 'this SHA-256 stream was already digested');
      const bytes = bytesOf(data, 'sha256 update');
      if (kernel) kernel.update(bytes);
      else if (native) native.update(bytes);
      else if (heldBytes + bytes.length < NATIVE_SHA256_MIN) {
        held.push(bytes.slice());
        heldBytes += bytes.length;
      } else {
        native = (nativeSha256Stream as () => { update(d: Uint8Array): unknown; digest(): Uint8Array })();
        for (const h of held) native.update(h);
        held = [];
        native.update(bytes);
      }
      return stream;
    },
    digest() {
      if (done) throw new PlexusError('PLX_CORE_DIGESTED', 'this SHA-256 stream was already digested');
      done = true;
      if (kernel) return kernel.digest();
      if (native) return native.digest();
      const all = new Uint8Array(heldBytes);
      let at = 0;
      for (const h of held) {
        all.set(h, at);
        at += h.length;
      }
      return k.sha256(all);
    },
  };
  return stream;
}

/**
 * SHA-256 of many messages in one call: message i is data[offsets[i] .. offsets[i+1]).
 * Returns offsets.length - 1 digests back to back (32 bytes each). Zero copy when `data`
 * lives in a SharedBytes block.
 */
export function sha256BatchPacked(data: Uint8Array, offsets: Uint32Array): Uint8Array {
  const bytes = bytesOf(data, 'sha256BatchPacked');
  if (!(offsets instanceof Uint32Array) || offsets.length < 1) {
    throw new PlexusError(
      'PLX_CORE_BAD_INPUT',
      'sha256BatchPacked: offsets must be a Uint32Array of count + 1 entries',
    );
  }
  for (let i = 0; i < offsets.length; i++) {
    const o = offsets[i] as number;
    if (o > bytes.length || (i > 0 && o < (offsets[i - 1] as number))) {
      throw new PlexusError(
        'PLX_CORE_BAD_INPUT',
        `sha256BatchPacked: offset ${i} (${o}) is out of order or past the end of ${bytes.length} bytes`,
        { index: i },
      );
    }
  }
  return backend().sha256Batch(bytes, offsets);
}

/** SHA-256 of each message; returns one 32-byte digest per message. */
export function sha256Batch(messages: readonly Uint8Array[]): Uint8Array[] {
  if (!Array.isArray(messages)) {
    throw new PlexusError('PLX_CORE_BAD_INPUT', `sha256Batch takes an array of Uint8Array, got ${describe(messages)}`);
  }
  let total = 0;
  for (let i = 0; i < messages.length; i++) {
    total += bytesOf(messages[i], `sha256Batch item ${i}`).length;
  }
  if (total > 0xffffffff) {
    throw new PlexusError('PLX_CORE_BAD_INPUT', 'sha256Batch: more than 4 GiB in one batch; split it');
  }
  const packed = new Uint8Array(total);
  const offsets = new Uint32Array(messages.length + 1);
  let o = 0;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as Uint8Array;
    packed.set(m, o);
    o += m.length;
    offsets[i + 1] = o;
  }
  const out = backend().sha256Batch(packed, offsets);
  const digests: Uint8Array[] = [];
  for (let i = 0; i < messages.length; i++) digests.push(out.subarray(i * 32, i * 32 + 32));
  return digests;
}

/** CRC-32C (Castagnoli) of bytes, continuing from `prev` (default 0: a fresh checksum). */
export function crc32c(data: Uint8Array, prev = 0): number {
  const bytes = bytesOf(data, 'crc32c');
  if (typeof prev !== 'number' || !Number.isInteger(prev) || prev < 0 || prev > 0xffffffff) {
    throw new PlexusError('PLX_CORE_BAD_INPUT', `crc32c: prev must be a 32-bit unsigned integer, got ${String(prev)}`);
  }
  return backend().crc32c(bytes, prev);
}

function opCode(op: unknown): number {
  if (typeof op === 'string') {
    const c = (ReduceOp as Record<string, number>)[op];
    if (c === undefined) {
      throw new PlexusError(
        'PLX_CORE_BAD_OP',
        `"${op}" is not a reduce operation: use one of ${REDUCE_OP_NAMES.join(', ')} (or codes 1..10)`,
        { op },
      );
    }
    return c;
  }
  if (typeof op !== 'number' || !Number.isInteger(op) || op < 1 || op > 10) {
    throw new PlexusError(
      'PLX_CORE_BAD_OP',
      `reduce operation ${String(op)} is not defined: use codes 1..10 (${REDUCE_OP_NAMES.join(', ')})`,
      { op },
    );
  }
  return op;
}

function typeCode(type: unknown, a: ArrayBufferView): number {
  if (type === undefined) {
    const t = elementTypeOf(a);
    if (t !== undefined) return t;
    throw new PlexusError(
      'PLX_CORE_BAD_TYPE',
      `combine: cannot tell the element type of ${describe(a)}; pass it (${ELEMENT_TYPE_NAMES.join(', ')})`,
    );
  }
  if (typeof type === 'string') {
    const c = (ElementType as Record<string, number>)[type];
    if (c === undefined) {
      throw new PlexusError(
        'PLX_CORE_BAD_TYPE',
        `"${type}" is not an element type: use one of ${ELEMENT_TYPE_NAMES.join(', ')} (or codes 0..6)`,
        { type },
      );
    }
    return c;
  }
  if (typeof type !== 'number' || !Number.isInteger(type) || type < 0 || type > 6) {
    throw new PlexusError(
      'PLX_CORE_BAD_TYPE',
      `element type ${String(type)} is not defined: use codes 0..6 (${ELEMENT_TYPE_NAMES.join(', ')})`,
      { type },
    );
  }
  return type;
}

/**
 * Element-wise a[i] = a[i] op b[i], in place into `a`. `op` is a name (sum, prod, min,
 * max, land, lor, lxor, band, bor, bxor) or code 1..10; `type` a name (u8, i32, u32,
 * i64, u64, f32, f64) or code 0..6, taken from `a`'s array type when omitted. Every
 * refusal happens before any element is touched. Zero copy when both live in
 * SharedBytes blocks.
 */
export function combine(
  a: ArrayBufferView,
  b: ArrayBufferView,
  op: ReduceOpName | number,
  type?: ElementTypeName | number,
): void {
  if (!ArrayBuffer.isView(a) || !ArrayBuffer.isView(b)) {
    throw new PlexusError(
      'PLX_CORE_BAD_INPUT',
      `combine takes two typed arrays (or byte views), got ${describe(a)} and ${describe(b)}`,
    );
  }
  const o = opCode(op);
  const t = typeCode(type, a);
  if (!reduceAllowed(o, t)) {
    const on = REDUCE_OP_NAMES[o - 1];
    const tn = ELEMENT_TYPE_NAMES[t];
    const hint =
      t === ElementType.u8 ? 'bytes take band, bor and bxor only' : 'floats take sum, prod, min and max only';
    throw new PlexusError('PLX_CORE_OP_NOT_ALLOWED', `reduce operation ${on} is not defined on ${tn}: ${hint}`, {
      op: o,
      type: t,
    });
  }
  const width = ELEMENT_WIDTH[t] as number;
  if (a.byteLength % width !== 0 || b.byteLength % width !== 0) {
    throw new PlexusError(
      'PLX_CORE_BAD_LENGTH',
      `combine: ${a.byteLength} and ${b.byteLength} bytes must both be whole ${width}-byte ${ELEMENT_TYPE_NAMES[t]} elements`,
      { a: a.byteLength, b: b.byteLength, width },
    );
  }
  if (a.byteLength !== b.byteLength) {
    throw new PlexusError(
      'PLX_CORE_LENGTH_MISMATCH',
      `combine: the arrays differ in length (${a.byteLength / width} and ${b.byteLength / width} elements)`,
      { a: a.byteLength, b: b.byteLength },
    );
  }
  backend().combine(
    new Uint8Array(a.buffer, a.byteOffset, a.byteLength),
    new Uint8Array(b.buffer, b.byteOffset, b.byteLength),
    o,
    t,
  );
}

/**
 * Verdict of one header under `schema`: 0 accepted, VERDICT_INCOMPLETE (-1) when fewer
 * bytes than a header are given, else the first failing check's verdict, length first.
 */
export function checkHeader(schema: HeaderSchema, data: Uint8Array): number {
  return backend().headerCheck(schema, bytesOf(data, 'checkHeader'));
}

/**
 * Walks frames laid end to end and returns each one's offset, payload length and
 * verdict. Stops at `maxFrames`, at an incomplete frame, or after a refused length.
 */
export function decodeHeaders(schema: HeaderSchema, data: Uint8Array, maxFrames = 0x7fffffff): HeaderVerdicts {
  if (!Number.isInteger(maxFrames) || maxFrames < 0) {
    throw new PlexusError('PLX_CORE_BAD_INPUT', `decodeHeaders: maxFrames must be a non-negative integer`);
  }
  return backend().headerDecodeBatch(schema, bytesOf(data, 'decodeHeaders'), maxFrames);
}

/** Encodes a header from named field values (missing fields are 0); length-checked. */
export function encodeHeader(
  schema: HeaderSchema,
  values: Readonly<Record<string, Int | Uint8Array>>,
  out: Uint8Array = new Uint8Array(schema.size),
): Uint8Array {
  if (out.length < schema.size) {
    throw new PlexusError(
      'PLX_CORE_BAD_INPUT',
      `encodeHeader: the output needs ${schema.size} bytes, has ${out.length}`,
    );
  }
  backend().headerEncode(schema, schema.normalize(values), out);
  return out;
}
