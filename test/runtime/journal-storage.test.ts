/** The JournalStorage compliance suite on the log-engine journal: files (fsync on) and memory. */
import { rm } from 'node:fs/promises';
import { memoryJournal, openJournal } from '../../ts/runtime/index.js';
import type { MemoryLogState } from '../../ts/storage/index.js';
import { journalStorageSuite } from '../compliance/journal-storage.suite.js';
import { tempDir } from './helpers.js';

journalStorageSuite('LogJournalStorage on FileLog (8 shards, fsync batch)', async () => {
  const dir = await tempDir('plexus-jsuite-');
  return {
    open: () => openJournal(dir, { shardCount: 8, log: { fsync: 'batch' } }),
    teardown: () => rm(dir, { recursive: true, force: true }),
  };
});

journalStorageSuite('LogJournalStorage on FileLog (1 shard, fsync always, small segments)', async () => {
  const dir = await tempDir('plexus-jsuite-');
  return {
    open: () => openJournal(dir, { shardCount: 1, log: { fsync: 'always', segmentBytes: 512 } }),
    teardown: () => rm(dir, { recursive: true, force: true }),
  };
});

journalStorageSuite('LogJournalStorage on MemoryLog', async () => {
  const states = new Map<number, MemoryLogState>();
  return { open: async () => memoryJournal(4, states), teardown: async () => {} };
});
