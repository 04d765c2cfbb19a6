import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type FileLog, type FileLogOptions, openLog } from '../../ts/storage/file-log.js';
import type { SuiteFactory } from '../compliance/_kit.js';
import { type LogStorageHarness, logStorageSuite, truncatableLogSuite } from '../compliance/log-storage.suite.js';

const quiet = { warn: () => {} };

function fileLogs(extra: FileLogOptions = {}): SuiteFactory<LogStorageHarness<FileLog> & { dir: string }> {
  return {
    setup: async () => {
      const dir = await mkdtemp(join(tmpdir(), 'plexus-log-'));
      return { dir, open: (opts) => openLog(dir, { ...opts, logger: quiet, ...extra }) };
    },
    teardown: (h) => rm(h.dir, { recursive: true, force: true }),
  };
}

for (const [name, extra] of [
  ['FileLog', {}],
  ['FileLog, dense index, fsync always', { indexEvery: 1, fsync: 'always' }],
] as const) {
  logStorageSuite(name, fileLogs(extra));
  truncatableLogSuite(name, fileLogs(extra));
}
