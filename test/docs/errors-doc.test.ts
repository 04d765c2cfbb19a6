import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/paths.js';

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
  });
}

describe('docs/errors.md', () => {
  it('lists every PLX_ error code the sources use', () => {
    const doc = readFileSync(join(ROOT, 'docs/errors.md'), 'utf8');
    const used = new Map<string, string>();
    for (const file of sources(join(ROOT, 'ts'))) {
      for (const m of readFileSync(file, 'utf8').matchAll(/'(PLX_[A-Z0-9_]*[A-Z0-9])'/g))
        used.set(m[1] as string, file);
    }
    expect(used.size).toBeGreaterThan(100);
    const missing = [...used].filter(([code]) => !doc.includes(`\`${code}\``)).map(([c, f]) => `${c} (${f})`);
    expect(missing).toEqual([]);
  });
});
