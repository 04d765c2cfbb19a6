/**
 * What every compliance suite in this folder shares. A suite is a function taking a name and
 * a `SuiteFactory`: `setup` makes a fresh subject (a harness over empty storage, a cluster of
 * members, ...) before each test and `teardown` releases it after, whatever the test did.
 * An implementation runs a suite from its own test file:
 *
 * ```ts
 * logStorageSuite('FileLog', {
 *   setup: async () => { const dir = await mkdtemp(...); return { dir, open: (o) => openLog(dir, o) }; },
 *   teardown: (h) => rm(h.dir, { recursive: true, force: true }),
 * });
 * ```
 */
import { afterEach, beforeEach } from 'vitest';

export interface SuiteFactory<T> {
  /** A fresh subject for one test. */
  setup(): Promise<T>;
  /** Releases what `setup` made (after the suite's own cleanup of the test). */
  teardown(subject: T): Promise<void>;
}

/**
 * Registers `setup` before and `teardown` after each test of the enclosing `describe`, and
 * returns the current subject's getter. `cleanup` runs first after each test (the suite
 * closing what the test opened), then `teardown`.
 */
export function eachTest<T>(factory: SuiteFactory<T>, cleanup?: () => Promise<void>): () => T {
  let subject: { value: T } | undefined;
  beforeEach(async () => {
    subject = { value: await factory.setup() };
  });
  afterEach(async () => {
    try {
      await cleanup?.();
    } finally {
      const s = subject;
      subject = undefined;
      if (s !== undefined) await factory.teardown(s.value);
    }
  });
  return () => {
    if (subject === undefined) throw new Error('the suite subject is used outside a test');
    return subject.value;
  };
}
