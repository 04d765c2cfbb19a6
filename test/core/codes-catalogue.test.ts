/**
 * ts/core/codes-catalogue.ts (the `PlexusCode` union) is generated from docs/errors.md and the
 * H-code table of docs/sperli.md by scripts/gen-error-codes.mjs: these tests fail while the two
 * disagree, and say which command brings them together.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  codeFromPeer,
  isPlexusCode,
  PLEXUS_CODE_ALIASES,
  PLX_CODES,
  PlexusError,
  SPERLI_H_CODES,
} from '../../ts/core/errors.js';
import { ROOT } from '../helpers/paths.js';
import { runNode } from '../helpers/processes.js';

const SCRIPT = join(ROOT, 'scripts/gen-error-codes.mjs');
const REGENERATE = 'node scripts/gen-error-codes.mjs';

function gen(...args: string[]) {
  return runNode(SCRIPT, args);
}

/** The codes in the first column of the tables of a markdown text. */
function firstColumnCodes(text: string, pattern: RegExp): Set<string> {
  const out = new Set<string>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('|')) continue;
    const first = line.split('|')[1] ?? '';
    for (const m of first.matchAll(/`([^`]+)`/g)) if (pattern.test(m[1] as string)) out.add(m[1] as string);
  }
  return out;
}

describe('the PlexusCode catalogue', () => {
  it(`ts/core/codes-catalogue.ts is what docs/errors.md gives (regenerate: ${REGENERATE})`, async () => {
    const r = await gen('--check');
    expect(r.code, `${r.stderr}\nThe catalogue and docs/errors.md disagree: run ${REGENERATE}`).toBe(0);
    expect(r.stderr).toBe('');
  });

  it('holds every code of the tables of docs/errors.md and every H-code of docs/sperli.md, and nothing else', () => {
    const errors = readFileSync(join(ROOT, 'docs/errors.md'), 'utf8');
    const documented = firstColumnCodes(errors, /^PLX_[A-Z0-9_]+$/);
    expect(documented.size).toBeGreaterThan(200);
    expect([...PLX_CODES].sort()).toEqual([...documented].sort());
    const sperli = readFileSync(join(ROOT, 'docs/sperli.md'), 'utf8');
    const hTable = sperli.slice(sperli.indexOf('### Error codes (H-codes)'));
    const hCodes = new Set(
      hTable
        .split('\n')
        .map((l) => /^\| (H\d{4}) \|/.exec(l)?.[1])
        .filter((c): c is string => c !== undefined),
    );
    expect([...SPERLI_H_CODES].sort()).toEqual([...hCodes].sort());
    expect(SPERLI_H_CODES).toContain('H1610');
    for (const [alias, target] of Object.entries(PLEXUS_CODE_ALIASES)) {
      expect(PLX_CODES, alias).toContain(alias);
      expect(PLX_CODES, alias).toContain(target);
    }
  });

  it('PlexusError takes only catalogue codes, and the details its code carries (checked by tsc)', () => {
    // @ts-expect-error a code outside the catalogue does not compile
    const unknown = new PlexusError('PLX_NOT_A_CODE', 'not in docs/errors.md');
    // @ts-expect-error an H-code's details name the check that failed (details.reason)
    const noReason = new PlexusError('H1610', 'refused', { peer: 1 });
    // @ts-expect-error a cluster frame refusal says which check (details.reason)
    const wire = new PlexusError('PLX_WIRE_BAD_FRAME', 'refused', { field: 'kind' });
    const ok = new PlexusError('H1610', 'refused', { reason: 'length', peer: 1 });
    const free = new PlexusError('PLX_STORAGE_IO', 'free-form details', { anything: 1 });
    // A peer's code is passed on as sent, listed or not.
    const relayed = new PlexusError(codeFromPeer('PLX_FROM_A_NEWER_PEER'), 'relayed');
    expect([unknown, noReason, wire, ok, free, relayed].map((e) => e.code)).toEqual([
      'PLX_NOT_A_CODE',
      'H1610',
      'PLX_WIRE_BAD_FRAME',
      'H1610',
      'PLX_STORAGE_IO',
      'PLX_FROM_A_NEWER_PEER',
    ]);
    expect(ok.details.reason).toBe('length');
    expect(new PlexusError('PLX_CORE_FREED', 'no details').details).toEqual({});
  });

  it('isPlexusCode takes the catalogue and refuses anything else', () => {
    expect(isPlexusCode('PLX_STORAGE_CORRUPT')).toBe(true);
    expect(isPlexusCode('H1612')).toBe(true);
    expect(isPlexusCode('H1613')).toBe(false);
    expect(isPlexusCode('PLX_STORAGE_CORRUPTED')).toBe(false);
    expect(isPlexusCode(1610)).toBe(false);
  });
});

describe('scripts/gen-error-codes.mjs on a changed copy of the docs', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  /** A directory with this checkout's docs and generated file, `errors.md` changed by `edit`. */
  function copy(edit: (errorsMd: string) => string): string {
    const dir = mkdtempSync(join(tmpdir(), 'plexus-codes-'));
    dirs.push(dir);
    mkdirSync(join(dir, 'docs'));
    mkdirSync(join(dir, 'ts/core'), { recursive: true });
    cpSync(join(ROOT, 'docs/sperli.md'), join(dir, 'docs/sperli.md'));
    cpSync(join(ROOT, 'ts/core/codes-catalogue.ts'), join(dir, 'ts/core/codes-catalogue.ts'));
    writeFileSync(join(dir, 'docs/errors.md'), edit(readFileSync(join(ROOT, 'docs/errors.md'), 'utf8')));
    return dir;
  }

  const addRows = (rows: string) => (md: string) =>
    md.replace('| `PLX_CORE_BAD_BACKEND` |', `${rows}\n| \`PLX_CORE_BAD_BACKEND\` |`);

  it('--check fails on a code the generated file lacks, names the command, and passes once regenerated', async () => {
    const dir = copy(addRows('| `PLX_CORE_NEW_REASON` | a refusal added to the docs only |'));
    const stale = await gen('--check', '--root', dir);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toContain(REGENERATE);

    const write = await gen('--root', dir);
    expect(write.code, write.stderr).toBe(0);
    const text = readFileSync(join(dir, 'ts/core/codes-catalogue.ts'), 'utf8');
    expect(text.split('\n')[0]).toMatch(/^\/\/ Generated by node scripts\/gen-error-codes\.mjs/);
    expect(text).toContain("'PLX_CORE_NEW_REASON',");
    expect((await gen('--check', '--root', dir)).code).toBe(0);
  });

  it('--check fails on a code the docs dropped', async () => {
    const dir = copy((md) => md.replace(/^\| `PLX_CORE_FREED` \|.*\n/m, ''));
    const r = await gen('--check', '--root', dir);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(REGENERATE);
  });

  it('an "alias of" row puts the old code in the union and in PLEXUS_CODE_ALIASES', async () => {
    const dir = copy(
      addRows('| `PLX_CORE_OLD_NAME` | alias of `PLX_CORE_BAD_INPUT`: the name before it was renamed |'),
    );
    expect((await gen('--root', dir)).code).toBe(0);
    const text = readFileSync(join(dir, 'ts/core/codes-catalogue.ts'), 'utf8');
    expect(text).toContain("'PLX_CORE_OLD_NAME',");
    expect(text).toContain("PLX_CORE_OLD_NAME: 'PLX_CORE_BAD_INPUT',");
  });

  it('refuses an alias of a code the docs do not list', async () => {
    const dir = copy(addRows('| `PLX_CORE_OLD_NAME` | alias of `PLX_CORE_NOWHERE` |'));
    const r = await gen('--root', dir);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('PLX_CORE_OLD_NAME is an alias of PLX_CORE_NOWHERE');
  });
});
