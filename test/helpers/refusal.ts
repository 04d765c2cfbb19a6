/** Shared by the tests that expect a call to be refused with a PlexusError. */
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
