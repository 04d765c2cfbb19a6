/**
 * The seam between plexus/core and its two backends. Every kernel exists twice: as
 * WebAssembly (ts/core/wasm/) and as a pure TypeScript twin (ts/core/js/); both
 * implement `Kernel` and must give bit-identical results (golden/ pins them).
 *
 * Arguments reaching a Kernel are already validated by ts/core/index.ts; kernels do no
 * argument checking of their own beyond what keeps memory safe.
 */
import type { HeaderSchema, HeaderVerdicts } from './header-schema.js';

export type BackendName = 'js' | 'wasm';

export interface Sha256Stream {
  update(data: Uint8Array): Sha256Stream;
  /** Returns the 32-byte digest; the stream cannot be updated afterwards. */
  digest(): Uint8Array;
}

export interface Kernel {
  readonly name: BackendName;

  /** FNV-1a 64 over bytes. */
  fnv1a64(data: Uint8Array): bigint;
  /** FNV-1a 64 over the UTF-8 encoding of a string (lone surrogates become U+FFFD). */
  fnv1a64String(s: string): bigint;
  /** FNV-1a 64 of each string's UTF-8 encoding. */
  fnv1a64Batch(items: readonly string[]): BigUint64Array;
  /** Shard hash version 1 of each string: FNV-1a 64 mod shardCount (a power of two). */
  shardBatch(items: readonly string[], shardCount: number): Uint32Array;

  sha256(data: Uint8Array): Uint8Array;
  sha256Stream(): Sha256Stream;
  /**
   * Digests of many messages: message i is data[offsets[i] .. offsets[i+1]).
   * `offsets` has count + 1 entries. Returns count * 32 bytes.
   */
  sha256Batch(data: Uint8Array, offsets: Uint32Array): Uint8Array;

  /** CRC-32C (Castagnoli), continuing from `prev` (0 for a fresh checksum). */
  crc32c(data: Uint8Array, prev: number): number;

  /**
   * Element-wise a[i] = a[i] op b[i] over `type` elements, in place into `a`.
   * a and b are byte views of equal length, a whole number of elements, any alignment.
   */
  combine(a: Uint8Array, b: Uint8Array, op: number, type: number): void;

  /**
   * Verdict of the header at data[0 ..] under `schema` (0 accepted, -1 fewer bytes than
   * a header, otherwise the verdict of the first failing check, length first).
   */
  headerCheck(schema: HeaderSchema, data: Uint8Array): number;
  /** Walks many frames laid end to end; see header-schema.ts. */
  headerDecodeBatch(schema: HeaderSchema, data: Uint8Array, maxFrames: number): HeaderVerdicts;
  /** Writes one header from per-field values (see HeaderSchema.normalize) into out[0 .. size). */
  headerEncode(schema: HeaderSchema, values: readonly (bigint | Uint8Array)[], out: Uint8Array): void;
}
