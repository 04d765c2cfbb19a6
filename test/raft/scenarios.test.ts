/**
 * Scenario scripts with expected traces (test/raft/testdata/*.txt; format in interaction.ts).
 * Regenerate with RAFT_REWRITE=1 and review the diff.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { runScript } from './interaction.js';

const dir = join(import.meta.dirname, 'testdata');

describe('raft scenario scripts', () => {
  for (const f of readdirSync(dir)
    .filter((n) => n.endsWith('.txt'))
    .sort()) {
    it(f, () => runScript(join(dir, f)));
  }
});
