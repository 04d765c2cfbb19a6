/**
 * FileLog's `inlineWrites` (fsync `never` only): groups are written with synchronous writes
 * on the calling thread. The files hold the same bytes as with writes through the thread
 * pool, groups still form, the records read back after reopen, and a bad value is refused.
 * `inlineSyncWrites` does the same in the durable modes through the O_DSYNC descriptor.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isPlexusError } from '../../ts/core/errors.js';
import { type FileLog, type FileLogOptions, openLog } from '../../ts/storage/file-log.js';
import { RECORD_HEADER_BYTES } from '../../ts/storage/format.js';

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-inline-'));
  dirs.push(d);
  return d;
}
afterEach(async () => {
  while (dirs.length > 0) await rm(dirs.pop() as string, { recursive: true, force: true });
});

const id = (n: number) => new Uint8Array(16).fill(n);
const payload = (i: number) => new TextEncoder().encode(`record ${i} `.repeat((i % 7) + 1));

/** The same appends on any log: single calls, calls made together (one group), a framed batch. */
async function fill(log: FileLog): Promise<void> {
  let n = 0;
  for (let i = 0; i < 5; i++) await log.append([payload(n++)], { batchId: id(i) });
  await Promise.all(
    Array.from({ length: 20 }, (_, i) => log.append([payload(n++), payload(n++)], { batchId: id(10 + i) })),
  );
  const ps = [payload(n++), payload(n++), payload(n++)];
  const bytes = new Uint8Array(ps.reduce((s, p) => s + RECORD_HEADER_BYTES + p.length, 0));
  let off = 0;
  for (const p of ps) {
    bytes.set(p, off + RECORD_HEADER_BYTES);
    off += RECORD_HEADER_BYTES + p.length;
  }
  await log.appendFramed?.({ bytes, lengths: ps.map((p) => p.length) }, { batchId: id(99) });
}

async function files(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const f of (await readdir(dir)).sort()) {
    if (f.endsWith('.seg')) out.set(f, (await readFile(join(dir, f))).toString('hex'));
  }
  return out;
}

describe('FileLog inlineWrites', () => {
  it('stores the same bytes as writes through the thread pool, in groups, and reads them back after reopen', async () => {
    const opts: FileLogOptions = { fsync: 'never', segmentBytes: 2048 };
    const a = await tempDir();
    const b = await tempDir();
    const inline = await openLog(a, { ...opts, inlineWrites: true });
    const pooled = await openLog(b, opts);
    await fill(inline);
    await fill(pooled);
    const stats = inline.stats;
    expect(stats.appends).toBe(26);
    expect(stats.writes).toBeLessThan(stats.appends); // the 20 calls made together share writes
    expect(stats.syncs).toBe(0);
    await inline.close();
    await pooled.close();
    const fa = await files(a);
    expect(fa.size).toBeGreaterThan(1); // rolled over: several segments
    expect(fa).toEqual(await files(b));

    const again = await openLog(a, { ...opts, inlineWrites: true });
    expect(again.last).toBe(48n);
    const recs = await again.read(1n, { maxBytes: 1 << 20 });
    expect(recs.map((r) => new TextDecoder().decode(r.payload))).toEqual(
      Array.from({ length: 48 }, (_, i) => new TextDecoder().decode(payload(i))),
    );
    await again.append([payload(48)]);
    expect(again.last).toBe(49n);
    await again.close();
  });

  it('is ignored in durable modes (the write waits for the disk) and refuses a value that is not a boolean', async () => {
    const d = await tempDir();
    const log = await openLog(d, { fsync: 'batch', inlineWrites: true });
    await Promise.all([log.append([payload(1)]), log.append([payload(2)])]);
    expect(log.last).toBe(2n);
    await log.close();
    const e = await openLog(await tempDir(), { inlineWrites: 'yes' as unknown as boolean }).catch((x: unknown) => x);
    expect(isPlexusError(e, 'PLX_STORAGE_BAD_INPUT')).toBe(true);
  });

  it('inlineSyncWrites: durable groups written on the calling thread hold the same bytes, one flush per write', async () => {
    for (const fsync of ['batch', 'always'] as const) {
      const opts: FileLogOptions = { fsync, segmentBytes: 2048 };
      const a = await tempDir();
      const b = await tempDir();
      const inline = await openLog(a, { ...opts, inlineSyncWrites: true });
      const pooled = await openLog(b, opts);
      await fill(inline);
      await fill(pooled);
      const stats = inline.stats;
      expect(stats.appends).toBe(26);
      if (fsync === 'batch') expect(stats.writes).toBeLessThan(stats.appends);
      else expect(stats.writes).toBe(stats.appends);
      expect(stats.syncs).toBe(stats.writes); // every write is durable when it returns
      await inline.close();
      await pooled.close();
      expect(await files(a)).toEqual(await files(b));
      const again = await openLog(a, { ...opts, inlineSyncWrites: true });
      expect(again.last).toBe(48n);
      const recs = await again.read(1n, { maxBytes: 1 << 20 });
      expect(recs.map((r) => new TextDecoder().decode(r.payload))).toEqual(
        Array.from({ length: 48 }, (_, i) => new TextDecoder().decode(payload(i))),
      );
      await again.close();
    }
    const e = await openLog(await tempDir(), { inlineSyncWrites: 1 as unknown as boolean }).catch((x: unknown) => x);
    expect(isPlexusError(e, 'PLX_STORAGE_BAD_INPUT')).toBe(true);
  });

  it('setInlineSyncWrites switches between inline and thread-pool writes from the next group on', async () => {
    const opts: FileLogOptions = { fsync: 'batch', segmentBytes: 2048 };
    const a = await tempDir();
    const b = await tempDir();
    const switched = await openLog(a, { ...opts, inlineSyncWrites: true });
    const pooled = await openLog(b, opts);
    for (const log of [switched, pooled]) {
      for (let i = 0; i < 30; i++) {
        if (log === switched) log.setInlineSyncWrites(i % 3 !== 0);
        await Promise.all([
          log.append([payload(2 * i)], { batchId: id(2 * i) }),
          log.append([payload(2 * i + 1)], { batchId: id(2 * i + 1) }),
        ]);
      }
    }
    expect(switched.stats.syncs).toBe(switched.stats.writes);
    await switched.close();
    await pooled.close();
    expect((await files(a)).size).toBeGreaterThan(1);
    expect(await files(a)).toEqual(await files(b));
    const again = await openLog(a, opts);
    expect(again.last).toBe(60n);
    await again.close();
  });
});
