import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package root. */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * The shared conformance material (`../shared/vectors` beside the checkout), read in
 * place so it cannot drift; PLEXUS_SHARED_DIR overrides the location of `shared/`.
 */
export function sharedVectors(file: string): string {
  const base = process.env.PLEXUS_SHARED_DIR ?? resolve(ROOT, '../shared');
  const p = resolve(base, 'vectors', file);
  if (!existsSync(p)) {
    throw new Error(
      `external vectors not found at ${p}: check out shared/ beside the project or set PLEXUS_SHARED_DIR`,
    );
  }
  return p;
}
