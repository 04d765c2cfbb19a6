/** Shared by the tests that expect a call to be refused with a PlexusError (docs/errors.md). */
import { expect } from 'vitest';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';

/** The PlexusError `p` rejects with; any other rejection is rethrown, and success fails. */
export async function refusal(p: Promise<unknown>): Promise<PlexusError> {
  try {
    await p;
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  throw new Error('expected a refusal');
}

/** The PlexusError `f` throws; anything else thrown is rethrown, and returning fails. */
export function thrownRefusal(f: () => unknown): PlexusError {
  try {
    f();
  } catch (e) {
    if (isPlexusError(e)) return e;
    throw e;
  }
  throw new Error('expected a refusal');
}

/**
 * Asserts that `p` (a promise, or a function called here that throws or returns a promise) is
 * refused with a PlexusError whose code is `code` (or matches it); resolves with the error for
 * further assertions on its message and details. Success, or any other error, fails the test
 * with a message that names the code expected.
 */
export async function expectRefusal(
  p: Promise<unknown> | (() => unknown),
  code: string | RegExp,
): Promise<PlexusError> {
  let outcome: { ok: true } | { ok: false; err: unknown };
  try {
    await (typeof p === 'function' ? p() : p);
    outcome = { ok: true };
  } catch (e) {
    outcome = { ok: false, err: e };
  }
  if (outcome.ok) throw new Error(`expected a refusal with ${String(code)}, and it succeeded`);
  const { err } = outcome;
  if (!isPlexusError(err)) {
    const what = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    throw new Error(`expected a PlexusError with ${String(code)}, got ${what}`, { cause: err });
  }
  const matches = typeof code === 'string' ? err.code === code : code.test(err.code);
  if (!matches) {
    throw new Error(`expected a refusal with ${String(code)}, got ${err.code}: ${err.message}`, { cause: err });
  }
  return err;
}

/** How a command run to its end ended (`runNode`/`runPlexus` in processes.ts, or `spawnSync`). */
export interface CommandRun {
  readonly status?: number | null;
  readonly code?: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Asserts that a command was refused as a user sees it: it ended by itself (no signal) with
 * exit status `status` (1; 2 for a usage mistake), `code` (a PLX_* code, or the usage hint) on
 * standard error, and neither a stack trace nor "unexpected failure".
 */
export function expectCommandRefusal(r: CommandRun, code: string, status = 1): void {
  const what = `stdout: ${r.stdout}\nstderr: ${r.stderr}`;
  expect(r.signal, `killed by the test's timeout: it did not end by itself\n${what}`).toBeNull();
  expect(r.status ?? r.code, what).toBe(status);
  expect(r.stderr, what).toContain(code);
  expect(r.stderr, what).not.toMatch(/^ {4}at /m);
  expect(r.stderr, what).not.toContain('unexpected failure');
}
