/**
 * A full disk, for real: the log lives on a 2 MiB tmpfs mounted for the test, so ENOSPC
 * comes from the kernel. Mounting needs root (or CAP_SYS_ADMIN); without it these tests
 * are skipped and say why.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, open, readdir, rm, rmdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isPlexusError, type PlexusError } from '../../ts/core/errors.js';
import { type FileLog, openLog } from '../../ts/storage/file-log.js';
import { verifyLog } from '../../ts/storage/verify.js';
import { refusal } from '../helpers/refusal.js';

let mnt = '';
let mounted = false;
let why = '';

beforeAll(async () => {
  mnt = await mkdtemp(join(tmpdir(), 'plexus-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mnt], { stdio: 'pipe' });
    mounted = true;
  } catch (e) {
    why = `cannot mount a tmpfs here (${(e as Error).message.split('\n')[0]}); the full-disk tests need root`;
    console.warn(why);
  }
});

afterAll(async () => {
  if (mounted) execFileSync('umount', [mnt]);
  await rmdir(mnt).catch(() => {});
});

const quiet = { warn: () => {} };
let logDir = '';
let log: FileLog | undefined;

beforeEach(async (ctx) => {
  if (!mounted) ctx.skip();
  logDir = join(mnt, 'log');
});
afterEach(async () => {
  await log?.close();
  log = undefined;
  if (mounted) {
    for (const n of await readdir(mnt)) await rm(join(mnt, n), { recursive: true, force: true });
  }
});

/** Takes all the free space of the file system; returns the filler's path. */
async function fill(name: string): Promise<string> {
  const path = join(mnt, name);
  const fh = await open(path, 'w');
  const chunk = Buffer.alloc(4096, 0x55);
  try {
    let at = 0;
    for (;;) {
      try {
        const { bytesWritten } = await fh.write(chunk, 0, chunk.length, at);
        at += bytesWritten;
        if (bytesWritten < chunk.length) break;
      } catch (e) {
        if ((e as { code?: string }).code === 'ENOSPC') break;
        throw e;
      }
    }
  } finally {
    await fh.close();
  }
  return path;
}

function payload(position: number, size: number): Uint8Array {
  const b = new Uint8Array(size);
  for (let i = 0; i < size; i++) b[i] = (position * 31 + i) & 0xff;
  return b;
}

async function expectRecords(l: FileLog, count: number, size: number): Promise<void> {
  expect(l.last).toBe(BigInt(count));
  let pos = 1;
  while (pos <= count) {
    const recs = await l.read(BigInt(pos), { maxBytes: 256 * 1024 });
    for (const r of recs) {
      expect(r.position).toBe(BigInt(pos));
      expect(Buffer.from(r.payload).equals(Buffer.from(payload(pos, size)))).toBe(true);
      pos++;
    }
  }
}

describe('a full disk', () => {
  it('fails the append with PLX_STORAGE_DISK_FULL, keeps nothing of it, keeps serving, and recovers once space is freed', async () => {
    // 256 KiB of space to be freed later; the log gets the rest.
    const reserve = join(mnt, 'reserve');
    await (await open(reserve, 'w')).close();
    const fh = await open(reserve, 'r+');
    await fh.write(Buffer.alloc(256 * 1024, 1), 0, 256 * 1024, 0);
    await fh.close();

    log = await openLog(logDir, { segmentBytes: 256 * 1024, logger: quiet });
    const size = 4000;
    let acked = 0;
    let error: PlexusError | undefined;
    for (let i = 0; i < 1000 && !error; i++) {
      const batch = [0, 1, 2, 3].map((k) => payload(acked + 1 + k, size));
      try {
        const r = await log.append(batch);
        expect(r.first).toBe(BigInt(acked + 1));
        acked += 4;
      } catch (e) {
        if (!isPlexusError(e)) throw e;
        error = e;
      }
    }
    expect(error?.code).toBe('PLX_STORAGE_DISK_FULL');
    expect(error?.details.errno).toBe('ENOSPC');
    expect(acked).toBeGreaterThan(100);
    // Nothing of the failed batch is visible, on disk or through the log.
    expect(log.last).toBe(BigInt(acked));
    await expectRecords(log, acked, size);
    const report = await verifyLog(logDir);
    expect(report).toMatchObject({ ok: true, records: acked });

    // Still full: appends keep failing cleanly, concurrent ones included.
    const again = await Promise.allSettled([1, 2, 3].map(() => log!.append([payload(0, size), payload(0, size)])));
    expect(again.every((r) => r.status === 'rejected')).toBe(true);
    for (const r of again) expect((r as PromiseRejectedResult).reason.code).toBe('PLX_STORAGE_DISK_FULL');
    expect(log.last).toBe(BigInt(acked));

    await rm(reserve);
    const after = await log.append([payload(acked + 1, size)], { expectedLast: BigInt(acked) });
    expect(after.first).toBe(BigInt(acked + 1));
    acked++;
    await expectRecords(log, acked, size);
    await log.close();
    log = await openLog(logDir, { segmentBytes: 256 * 1024, logger: quiet });
    await expectRecords(log, acked, size);
    expect((await verifyLog(logDir)).ok).toBe(true);
  });

  it('fails cleanly when a new segment cannot be made, and rolls over once space is freed', async () => {
    log = await openLog(logDir, { segmentBytes: 64 * 1024, logger: quiet });
    const size = 8000;
    // Fill the first segment until the next record would start a new one.
    let n = Math.floor((64 * 1024 - 32) / (48 + size));
    for (let i = 1; i <= n; i++) await log.append([payload(i, size)], { epoch: 1n });
    expect(log.segmentFiles).toHaveLength(1);
    const filler = await fill('filler');
    const e = await refusal(log.append([payload(n + 1, size)]));
    expect(e.code).toBe('PLX_STORAGE_DISK_FULL');
    expect((await readdir(logDir)).filter((f) => f.endsWith('.seg'))).toHaveLength(1);
    expect(log.segmentFiles).toHaveLength(1);
    await expectRecords(log, n, size);

    // truncateAfter writes the meta file (the highest epoch) first: refused, and nothing changes.
    const t = await refusal(log.truncateAfter(1n));
    expect(log.highestEpoch).toBe(1n);
    expect(t.code).toBe('PLX_STORAGE_DISK_FULL');
    expect(log.last).toBe(BigInt(n));
    await expectRecords(log, n, size);

    await rm(filler);
    await log.append([payload(n + 1, size)]);
    n++;
    expect(log.segmentFiles).toHaveLength(2);
    await expectRecords(log, n, size);
    await log.close();
    log = await openLog(logDir, { segmentBytes: 64 * 1024, logger: quiet });
    await expectRecords(log, n, size);
    const files = await readdir(logDir);
    const sizes = await Promise.all(files.filter((f) => f.endsWith('.seg')).map((f) => stat(join(logDir, f))));
    expect(sizes.every((s) => s.size > 0)).toBe(true);
  });

  it('fails an append that must first drop the seals of truncated records from the meta file, keeping nothing of it', async () => {
    log = await openLog(logDir, { logger: quiet });
    const size = 100;
    await log.append([1, 2, 3].map((p) => payload(p, size)));
    await log.truncateAfter(2n); // seals 2
    await log.truncateAfter(1n); // seals 1; the seal of 2 stays until the next append
    const filler = await fill('filler');
    const e = await refusal(log.append([payload(2, size)]));
    expect(e.code).toBe('PLX_STORAGE_DISK_FULL');
    expect(e.details.file).toBe(join(logDir, 'log.meta'));
    expect(log.last).toBe(1n);
    await expectRecords(log, 1, size);
    await rm(filler);
    expect((await log.append([payload(2, size)], { expectedLast: 1n })).first).toBe(2n);
    await log.close();
    log = await openLog(logDir, { logger: quiet });
    await expectRecords(log, 2, size);
    expect((await verifyLog(logDir)).ok).toBe(true);
  });
});
