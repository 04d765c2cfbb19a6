/**
 * Loads the plexus WebAssembly module (build/plexus.wasm, made by `npm run build:asm`)
 * once per process, synchronously, on first use.
 */
import { readFileSync } from 'node:fs';
import { PlexusError } from '../errors.js';

/** The raw exports of build/plexus.wasm. Pointers and lengths are byte offsets/counts. */
export interface WasmExports {
  readonly memory: WebAssembly.Memory;
  heapBase(): number;
  // FNV-1a 64
  fnv1a64(ptr: number, len: number): bigint;
  fnv1a64Utf8Batch(bytesPtr: number, bytesLen: number, unitLensPtr: number, count: number, outPtr: number): number;
  shardUtf8Batch(
    bytesPtr: number,
    bytesLen: number,
    unitLensPtr: number,
    count: number,
    mask: number,
    outPtr: number,
  ): number;
  // CRC-32C
  crc32c(ptr: number, len: number, prev: number): number;
  // SHA-256
  sha256(ptr: number, len: number, outPtr: number): void;
  sha256Init(statePtr: number): void;
  sha256Update(statePtr: number, ptr: number, len: number): void;
  sha256Final(statePtr: number, outPtr: number): void;
  sha256Batch(dataPtr: number, offsetsPtr: number, count: number, outPtr: number): void;
  // reduce
  combine(aPtr: number, bPtr: number, byteLen: number, op: number, type: number): number;
  // frame headers
  headerDecode(schemaPtr: number, dataPtr: number, dataLen: number, outPtr: number): number;
  headerDecodeBatch(schemaPtr: number, dataPtr: number, dataLen: number, outPtr: number, maxFrames: number): number;
  headerEncode(schemaPtr: number, valuesPtr: number, outPtr: number): void;
}

let cached: WasmExports | undefined;

export function wasmModuleUrl(): URL {
  // ts/core/wasm/module.ts and dist/core/wasm/module.js are both three levels below the
  // package root, so one relative path serves the sources and the build.
  return new URL('../../../build/plexus.wasm', import.meta.url);
}

export function loadWasm(): WasmExports {
  if (cached) return cached;
  let bytes: Uint8Array;
  const url = wasmModuleUrl();
  try {
    bytes = readFileSync(url);
  } catch (cause) {
    throw new PlexusError(
      'PLX_CORE_WASM_MISSING',
      `The WebAssembly core ${url.pathname} could not be read; run "npm run build:asm" (or "npm install", which builds it).`,
      { path: url.pathname },
      { cause },
    );
  }
  const module = new WebAssembly.Module(bytes);
  const instance = new WebAssembly.Instance(module, {});
  cached = instance.exports as unknown as WasmExports;
  return cached;
}
