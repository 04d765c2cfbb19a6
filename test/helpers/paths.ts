import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package root. */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** The project's copy of the external conformance vectors (see `vectors/README.md`). */
export const EXTERNAL_VECTORS = resolve(ROOT, 'vectors/external');

/** A file of the external conformance vectors, read from the project's own copy. */
export function externalVectors(file: string): string {
  const p = resolve(EXTERNAL_VECTORS, file);
  if (!existsSync(p)) {
    throw new Error(`external vector file not found at ${p}: vectors/external/ is part of the checkout`);
  }
  return p;
}
