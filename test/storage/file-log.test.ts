import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLog } from '../../ts/storage/file-log.js';
import { logStorageSuite } from '../compliance/log-storage.suite.js';

const quiet = { warn: () => {} };

logStorageSuite('FileLog', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-log-'));
  return {
    open: (opts) => openLog(dir, { ...opts, logger: quiet }),
    teardown: () => rm(dir, { recursive: true, force: true }),
  };
});

logStorageSuite('FileLog, dense index, fsync always', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'plexus-log-'));
  return {
    open: (opts) => openLog(dir, { ...opts, logger: quiet, indexEvery: 1, fsync: 'always' }),
    teardown: () => rm(dir, { recursive: true, force: true }),
  };
});
