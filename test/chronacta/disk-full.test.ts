/**
 * A full disk through the gRPC API: the data directory lives on a small tmpfs mounted for
 * the test, so ENOSPC comes from the kernel. An append that does not fit ends with
 * RESOURCE_EXHAUSTED (PLX_CHRONACTA_DISK_FULL) and writes nothing; reads go on; /readyz
 * says not ready; once space is freed appends work again. Mounting needs root; without
 * it the test is skipped and says why.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, open, rm, rmdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serve } from './helpers.js';

let mnt = '';
let mounted = false;

beforeAll(async () => {
  mnt = await mkdtemp(join(tmpdir(), 'plexus-chronacta-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mnt], { stdio: 'pipe' });
    mounted = true;
  } catch (e) {
    console.warn(`cannot mount a tmpfs here (${(e as Error).message.split('\n')[0]}); the full-disk test needs root`);
  }
});

afterAll(async () => {
  if (mounted) execFileSync('umount', [mnt]);
  await rmdir(mnt).catch(() => {});
});

/** Takes all the free space but `leave` bytes. */
async function fill(path: string, leave: number): Promise<void> {
  const fh = await open(path, 'w');
  const chunk = Buffer.alloc(4096, 0x55);
  try {
    for (let at = 0; ; at += chunk.length) {
      try {
        await fh.write(chunk, 0, chunk.length, at);
      } catch (e) {
        if ((e as { code?: string }).code === 'ENOSPC') {
          await fh.truncate(Math.max(0, at - leave));
          return;
        }
        throw e;
      }
    }
  } finally {
    await fh.close();
  }
}

describe('a full disk', () => {
  it('refuses an append with RESOURCE_EXHAUSTED, keeps serving reads, and recovers once space is freed', async (ctx) => {
    if (!mounted) ctx.skip();
    const run = await serve(join(mnt, 'data'), { metricsPort: 0 });
    try {
      const c = run.client;
      const ok = await c.append('s', [{ type: 't', data: 'before' }]);
      await fill(join(mnt, 'filler'), 64 * 1024);
      const big = 'x'.repeat(512 * 1024);
      const err = await c.append('s', [{ type: 't', data: big }]).then(
        () => undefined,
        (e: unknown) => e as { code: string; details: Record<string, unknown> },
      );
      expect(err?.code).toBe('PLX_CHRONACTA_DISK_FULL');
      expect(err?.details.grpcStatus).toBe(grpc.status.RESOURCE_EXHAUSTED);
      // Nothing of it was kept; reads go on.
      const r = await c.readStream('s');
      expect(r.events.map((e) => Buffer.from(e.data).toString())).toEqual(['before']);
      expect((await c.readAll()).lastPosition).toBe(ok.lastPosition);
      const ready = await fetch(`http://${run.server.metricsAddress}/readyz`);
      expect(ready.status).toBe(503);
      await rm(join(mnt, 'filler'));
      const after = await c.append('s', [{ type: 't', data: big }], { expectedVersion: 0n });
      expect(after.firstPosition).toBe(ok.lastPosition + 1n);
      expect((await c.readStream('s')).events).toHaveLength(2);
    } finally {
      await run.stop();
    }
  });
});
