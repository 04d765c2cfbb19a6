/**
 * A PlexusError carries the brand `Symbol.for('plexus.error')`, so that a second copy of the
 * module (two installed versions of plexus, a bundle beside an import) recognises it:
 * `isPlexusError` and `instanceof PlexusError` hold across copies, in one process and from a
 * copy of dist/ under another path.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { isPlexusError, PlexusError } from '../../ts/core/errors.js';
import { ROOT } from '../helpers/paths.js';
import { runNode } from '../helpers/processes.js';

type ErrorsModule = typeof import('../../ts/core/errors.js');

describe('the PlexusError brand', () => {
  it('is recognised across two instances of the module in one process', async () => {
    const path = '../../ts/core/errors.ts?second-copy';
    const other = (await import(/* @vite-ignore */ path)) as ErrorsModule;
    // Two copies: two classes, two prototypes.
    expect(other.PlexusError).not.toBe(PlexusError);
    const theirs = new other.PlexusError('PLX_STORAGE_CORRUPT', 'from the other copy', { reason: 'test' });
    expect(Object.getPrototypeOf(theirs)).not.toBe(PlexusError.prototype);

    expect(isPlexusError(theirs)).toBe(true);
    expect(isPlexusError(theirs, 'PLX_STORAGE_CORRUPT')).toBe(true);
    expect(isPlexusError(theirs, 'PLX_STORAGE_IO')).toBe(false);
    expect(theirs instanceof PlexusError).toBe(true);
    expect(theirs).toBeInstanceOf(Error);

    const ours = new PlexusError('H1610', 'from this copy', { reason: 'length' });
    expect(other.isPlexusError(ours, 'H1610')).toBe(true);
    expect(ours instanceof other.PlexusError).toBe(true);
    expect(ours.details.reason).toBe('length');
  });

  it('is not claimed by plain errors, look-alikes or a string key of the same name', () => {
    const plain = Object.assign(new Error('not ours'), { code: 'PLX_STORAGE_CORRUPT' });
    expect(isPlexusError(plain)).toBe(false);
    expect(plain instanceof PlexusError).toBe(false);
    expect(isPlexusError({ code: 'PLX_STORAGE_CORRUPT', name: 'PlexusError', 'plexus.error': true })).toBe(false);
    expect(isPlexusError({ [Symbol('plexus.error')]: true })).toBe(false);
    expect(isPlexusError(null)).toBe(false);
    expect(isPlexusError('PLX_STORAGE_CORRUPT')).toBe(false);
  });

  it('keeps the prototype check for a subclass', () => {
    class Narrow extends PlexusError {}
    const n = new Narrow('PLX_CORE_BAD_INPUT', 'a subclass');
    const p = new PlexusError('PLX_CORE_BAD_INPUT', 'the base class');
    expect(n instanceof PlexusError).toBe(true);
    expect(n instanceof Narrow).toBe(true);
    expect(p instanceof Narrow).toBe(false);
  });

  describe('from a copy of dist/ under another path, in a separate process', () => {
    const dist = join(ROOT, 'dist/core');
    const tmp = mkdtempSync(join(tmpdir(), 'plexus-brand-'));
    afterAll(() => rmSync(tmp, { recursive: true, force: true }));

    it('dist/core/errors.js and its copy recognise each other', async () => {
      expect(existsSync(join(dist, 'errors.js')), 'dist/ is built (npm run build)').toBe(true);
      const copyDir = join(tmp, 'node_modules/plexus-copy/core');
      mkdirSync(copyDir, { recursive: true });
      writeFileSync(join(tmp, 'node_modules/plexus-copy/package.json'), '{"type":"module"}');
      for (const f of ['errors.js', 'codes-catalogue.js']) copyFileSync(join(dist, f), join(copyDir, f));
      const r = await runNode(
        join(ROOT, 'test/fixtures/core/error-brand-copies.mjs'),
        [pathToFileURL(join(dist, 'errors.js')).href, pathToFileURL(join(copyDir, 'errors.js')).href],
        { cwd: tmp },
      );
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toEqual({
        distinct: true,
        copyByDist: true,
        copyInstanceofDist: true,
        distByCopy: true,
        distInstanceofCopy: true,
        plainByDist: false,
        code: 'PLX_WIRE_BAD_FRAME',
        details: { reason: 'version' },
      });
    });
  });
});
