import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { ROOT } from '../helpers/paths.js';

it('asm/sha256.ts is exactly what its generator gives (npm run gen:sha256)', () => {
  const r = spawnSync(process.execPath, [join(ROOT, 'scripts/gen-sha256-asm.mjs'), '--check'], { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
});
