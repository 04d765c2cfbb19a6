import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { isPlexusError } from '../../ts/core/index.js';
import { ROOT } from './paths.js';

/**
 * Records of vectors/sperli-vectors.txt (written by scripts/sperli-vectors.py, independent
 * of the TypeScript codecs): `kind<TAB>name<TAB>key=value...`, split at the first `=`.
 */
export type VectorRecord = { readonly name: string; readonly f: Readonly<Record<string, string>> };

let vectorText: string | undefined;

export function vectors(kind: string): VectorRecord[] {
  vectorText ??= readFileSync(resolve(ROOT, 'vectors/sperli-vectors.txt'), 'utf8');
  const out: VectorRecord[] = [];
  for (const line of vectorText.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const [k, name, ...pairs] = line.split('\t');
    if (k !== kind) continue;
    const f: Record<string, string> = {};
    for (const p of pairs) f[p.slice(0, p.indexOf('='))] = p.slice(p.indexOf('=') + 1);
    out.push({ name: name as string, f });
  }
  return out;
}

/** The verdict a call gives, as the vectors write it: ok, or the code (and H1610's reason). */
export function verdictOf(f: () => unknown): string {
  try {
    f();
    return 'ok';
  } catch (e) {
    if (!isPlexusError(e)) throw e;
    return e.code === 'H1610' ? `H1610:${String(e.details.reason)}` : e.code;
  }
}
