/**
 * `applyHeapGrowingPercent` (ts/cli/heap.ts) sets V8's heap growing factor in a running
 * process: V8 reads the flag each time it sets the old generation's limit after a full
 * collection. Checked in a child node process (the flag is process-wide) through V8's own
 * trace of the factor it uses. Uses dist/: build first (`npx tsc -p tsconfig.build.json`).
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/paths.js';
import { runNode } from '../helpers/processes.js';

const HEAP = resolve(__dirname, '../../dist/cli/heap.js');

const FIXTURE = join(ROOT, 'test/fixtures/cli/heap-growth.mjs');

/** Runs full collections in a child after applying `percent`; the factors V8 traced. */
async function factors(percent: number | undefined, nodeArgs: string[] = []): Promise<string[]> {
  const r = await runNode(FIXTURE, percent === undefined ? [] : [String(percent)], {
    nodeArgs: [...nodeArgs, '--expose-gc', '--trace-gc-verbose'],
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  expect(r.code, r.stderr).toBe(0);
  return [...r.stdout.matchAll(/\[HeapController\] Limit: .* \((\d+\.\d)\)/g)].map((m) => m[1] as string);
}

describe('heap growing percent', () => {
  it('makes V8 use 1 + percent/100 as its growing factor from the next full collection on', async () => {
    if (!existsSync(HEAP)) throw new Error(`${HEAP} is missing: build first`);
    const set = await factors(150);
    expect(set.length).toBeGreaterThan(0);
    expect(set.every((f) => f === '2.5')).toBe(true);
    expect((await factors(250)).every((f) => f === '3.5')).toBe(true);
    // Without it V8 picks its own factor (for a heap this small, its largest).
    const own = await factors(undefined);
    expect(own.length).toBeGreaterThan(0);
    expect(own.some((f) => f !== '2.5' && f !== '3.5')).toBe(true);
  });

  it('leaves a value given to node itself, and refuses values out of range', async () => {
    const given = await factors(300, ['--heap-growing-percent=100']);
    expect(given.length).toBeGreaterThan(0);
    expect(given.every((f) => f === '2.0')).toBe(true);
    const { applyHeapGrowingPercent } = await import(pathToFileURL(join(HEAP)).href);
    expect(() => applyHeapGrowingPercent(-1)).toThrow(RangeError);
    expect(() => applyHeapGrowingPercent(1001)).toThrow(RangeError);
    expect(() => applyHeapGrowingPercent(1.5)).toThrow(RangeError);
  });
});
