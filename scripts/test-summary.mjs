// Prints one closing line for the whole suite: the vitest tests (from .tmp/vitest.json,
// written by `npm test`) plus every golden check run so far (.tmp/golden-*.json: Node.js,
// Bun, arm64), as "tests: N passed, N failed, N skipped". Skipped tests are listed with
// their names so that none goes unnoticed.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const tmp = resolve(dirname(fileURLToPath(import.meta.url)), '..', '.tmp');
let passed = 0;
let failed = 0;
let skipped = 0;
const parts = [];
const vitestFile = resolve(tmp, 'vitest.json');
if (existsSync(vitestFile)) {
  const v = JSON.parse(readFileSync(vitestFile, 'utf8'));
  passed += v.numPassedTests;
  failed += v.numFailedTests;
  skipped += v.numPendingTests + v.numTodoTests;
  parts.push(`vitest ${v.numPassedTests}/${v.numTotalTests}`);
  for (const file of v.testResults ?? []) {
    for (const t of file.assertionResults ?? []) {
      if (t.status === 'pending' || t.status === 'skipped' || t.status === 'todo') {
        console.log(`skipped: ${t.fullName} (${file.name})`);
      }
    }
  }
} else {
  console.log('no vitest results found (.tmp/vitest.json)');
  failed += 1;
}
for (const f of existsSync(tmp) ? readdirSync(tmp).filter((n) => /^golden-.*\.json$/.test(n)) : []) {
  const g = JSON.parse(readFileSync(resolve(tmp, f), 'utf8'));
  passed += g.passed;
  failed += g.failed;
  parts.push(`golden ${g.runtime} ${g.passed}/${g.passed + g.failed}`);
}
console.log(`(${parts.join('; ')})`);
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 ? 1 : 0);
