import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/paths.js';

// vectors/sperli-vectors.txt is written by scripts/sperli-vectors.py, an implementation of
// docs/sperli.md in Python's standard library, independent of the TypeScript codecs (which
// test/codec checks against the same file). Here the script checks the file against itself.
// python3 is not plexus: it runs directly, to its end (spawnSync), not through test/helpers/processes.ts.
const python = spawnSync('python3', ['--version'], { encoding: 'utf8' });
const hasPython = python.status === 0;
const script = join(ROOT, 'scripts/sperli-vectors.py');
const file = join(ROOT, 'vectors/sperli-vectors.txt');
const tmp = mkdtempSync(join(tmpdir(), 'plexus-vectors-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe.skipIf(!hasPython)('vectors/sperli-vectors.txt against scripts/sperli-vectors.py (needs python3)', () => {
  it('the script re-derives every record of the file', () => {
    const r = spawnSync('python3', [script, '--check'], { encoding: 'utf8' });
    expect(r.stderr + r.stdout).toContain('ok,');
    expect(r.status).toBe(0);
  });

  it('a single changed byte in the file fails the check', () => {
    const copy = join(tmp, 'copy.txt');
    copyFileSync(file, copy);
    const text = readFileSync(copy, 'utf8');
    const at = text.indexOf('\tbytes=') + 7 + 60; // inside the first frame's bytes
    const ch = text[at] === '0' ? '1' : '0';
    writeFileSync(copy, text.slice(0, at) + ch + text.slice(at + 1));
    const r = spawnSync('python3', [script, '--check', '--file', copy], { encoding: 'utf8' });
    expect(r.status).not.toBe(0);
  });
});
