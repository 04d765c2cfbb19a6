/** Shared by the tests that expect a call to be refused with a PlexusError (docs/errors.md). */
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
