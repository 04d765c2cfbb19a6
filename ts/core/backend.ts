/**
 * Backend selection for the whole process: PLEXUS_BACKEND=js|wasm (default wasm).
 * `js` runs every kernel's TypeScript twin and nothing else (the reference mode);
 * `wasm` runs the WebAssembly kernels, and lets sha256() use node:crypto at sizes
 * where that is faster.
 */
import { PlexusError } from './errors.js';
import { jsKernel } from './js/index.js';
import type { BackendName, Kernel } from './types.js';
import { wasmKernel } from './wasm/index.js';

function fromEnv(): BackendName {
  const env = typeof process !== 'undefined' ? process.env.PLEXUS_BACKEND : undefined;
  if (env === undefined || env === '' || env === 'wasm') return 'wasm';
  if (env === 'js') return 'js';
  throw new PlexusError(
    'PLX_CORE_BAD_BACKEND',
    `PLEXUS_BACKEND="${env}" is not a backend: use "wasm" (the default) or "js".`,
    { value: env },
  );
}

let current: Kernel = fromEnv() === 'js' ? jsKernel : wasmKernel;

/** The kernel set in use. */
export function backend(): Kernel {
  return current;
}

/** Both kernel sets, the WebAssembly one first (for tests and benchmarks). */
export function kernels(): readonly Kernel[] {
  return [wasmKernel, jsKernel];
}

/** Switches the whole process to another backend. */
export function useBackend(name: BackendName): void {
  if (name !== 'js' && name !== 'wasm') {
    throw new PlexusError('PLX_CORE_BAD_BACKEND', `"${String(name)}" is not a backend: use "wasm" or "js".`);
  }
  current = name === 'js' ? jsKernel : wasmKernel;
}
