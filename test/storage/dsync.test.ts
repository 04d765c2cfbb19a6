/**
 * With a durable fsync mode, FileLog writes its segment files through a descriptor opened
 * with O_DSYNC (one system call per group instead of a write and an fdatasync); with
 * `fsync: 'never'` it does not. Checked on Linux through /proc/self/fdinfo, which shows the
 * flags a descriptor was opened with.
 */
import { constants } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type FileLog, type FileLogOptions, openLog } from '../../ts/storage/file-log.js';

const quiet = { warn: () => {} };
const linux = process.platform === 'linux' && constants.O_DSYNC !== undefined;

/** The open flags of the log's segment writer, from /proc/self/fdinfo. */
async function writerFlags(log: FileLog): Promise<number> {
  const fd = (log as unknown as { writer: { fd: number } }).writer.fd;
  const info = await readFile(`/proc/self/fdinfo/${fd}`, 'utf8');
  const m = /^flags:\s+([0-7]+)$/m.exec(info);
  if (!m) throw new Error(`no flags in /proc/self/fdinfo/${fd}: ${info}`);
  return Number.parseInt(m[1] as string, 8);
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'plexus-dsync-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.skipIf(!linux)('segment writes through O_DSYNC', () => {
  const cases: [FileLogOptions['fsync'], boolean][] = [
    ['batch', true],
    ['always', true],
    ['never', false],
  ];
  for (const [fsync, dsync] of cases) {
    it(`fsync '${fsync}': O_DSYNC ${dsync ? 'on' : 'off'}, on the first segment, after rollover and after reopen`, async () => {
      const open = () => openLog(dir, { fsync, segmentBytes: 1000, logger: quiet });
      let log = await open();
      const has = async () => ((await writerFlags(log)) & constants.O_DSYNC) !== 0;
      expect(await has()).toBe(dsync);
      // 148 bytes a record: the 7th append rolls over to a second segment.
      for (let i = 0; i < 8; i++) await log.append([new Uint8Array(100).fill(i)]);
      expect(log.segmentFiles).toHaveLength(2);
      expect(await has()).toBe(dsync);
      expect(log.stats.syncs).toBe(fsync === 'never' ? 0 : 8);
      await log.close();
      log = await open();
      expect(await has()).toBe(dsync);
      // A truncation back into the first segment reopens the writer on it.
      await log.truncateAfter(3n);
      expect(log.segmentFiles).toHaveLength(1);
      expect(await has()).toBe(dsync);
      await log.append([new Uint8Array(5)]);
      expect(log.last).toBe(4n);
      expect((await log.read(1n)).map((r) => r.payload[0])).toEqual([0, 1, 2, 0]);
      await log.close();
    });
  }
});
