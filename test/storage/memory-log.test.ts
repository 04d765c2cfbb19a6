import { describe, expect, it } from 'vitest';
import { MemoryLog, MemoryLogState } from '../../ts/storage/memory-log.js';
import { logStorageSuite, truncatableLogSuite } from '../compliance/log-storage.suite.js';

const memoryLogs = {
  setup: async () => {
    const state = new MemoryLogState();
    return { open: async () => new MemoryLog(state) };
  },
  teardown: async () => {},
};
logStorageSuite('MemoryLog', memoryLogs);
truncatableLogSuite('MemoryLog', memoryLogs);

describe('MemoryLog', () => {
  it('keeps its records in the state it was given, across a new log on it', async () => {
    const state = new MemoryLogState();
    const a = new MemoryLog(state);
    await a.append([new Uint8Array([1]), new Uint8Array([2])], { epoch: 2n });
    await a.close();
    const b = new MemoryLog(state);
    expect(b.last).toBe(2n);
    expect(b.highestEpoch).toBe(2n);
  });
});
