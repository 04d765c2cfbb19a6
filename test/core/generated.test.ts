import { join } from 'node:path';
import { expect, it } from 'vitest';
import { ROOT } from '../helpers/paths.js';
import { runNode } from '../helpers/processes.js';

it('asm/sha256.ts is exactly what its generator gives (npm run gen:sha256)', async () => {
  const r = await runNode(join(ROOT, 'scripts/gen-sha256-asm.mjs'), ['--check']);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
});
