import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EXTERNAL_VECTORS, ROOT } from '../helpers/paths.js';

/** Every file below `dir`, as paths relative to it with `/` separators, sorted. */
function listFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p).split('\\').join('/'));
    }
  };
  walk(dir);
  return out.sort();
}

const digest = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

// The published set beside a checkout of the project, when there is one.
const upstream = resolve(process.env.PLEXUS_SHARED_DIR ?? resolve(ROOT, '../shared'), 'vectors');
const haveUpstream = existsSync(upstream);

describe('external conformance vectors (vectors/external/)', () => {
  it('are in the checkout, each set named in vectors/README.md with its source and license', () => {
    const files = listFiles(EXTERNAL_VECTORS);
    expect(files.length).toBeGreaterThan(0);
    const readme = readFileSync(resolve(ROOT, 'vectors/README.md'), 'utf8');
    const sets = new Set(files.map((f) => f.split('/')[0] as string));
    sets.delete('README.md');
    for (const set of sets) expect(readme, `vectors/README.md does not name ${set}`).toContain(`\`${set}`);
  });

  // Without the published set there is nothing to compare with: a user's clone has none.
  it.skipIf(!haveUpstream)(
    'are byte-identical to the published set beside the checkout (skipped when ../shared/vectors is absent)',
    () => {
      const ours = listFiles(EXTERNAL_VECTORS);
      const theirs = listFiles(upstream);
      const missing = theirs.filter((f) => !ours.includes(f));
      const extra = ours.filter((f) => !theirs.includes(f));
      const differing = theirs.filter(
        (f) => ours.includes(f) && digest(join(upstream, f)) !== digest(join(EXTERNAL_VECTORS, f)),
      );
      const fix = `copy them in: cp -a ${upstream}/. vectors/external/`;
      expect(missing, `files of ${upstream} missing from vectors/external/; ${fix}`).toEqual([]);
      expect(differing, `files of vectors/external/ that differ from ${upstream}; ${fix}`).toEqual([]);
      expect(extra, `files in vectors/external/ that ${upstream} does not have`).toEqual([]);
    },
  );
});
