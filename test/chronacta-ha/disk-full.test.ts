/**
 * A full disk on a follower: its local log lives on a small tmpfs mounted for the test, so
 * ENOSPC comes from the kernel. The follower stops replicating (status().failure, the
 * leader's lag for it grows) while the leader and the other follower go on committing; once
 * space is freed and the follower restarts, it catches up. Mounting needs root; without it the
 * test is skipped and says why.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ReplicatedLog } from '../../ts/chronacta/cluster-log.js';
import { until } from '../helpers/until.js';
import { type Cluster, snapshot, startCluster, text } from './helpers.js';

let cluster: Cluster | undefined;
const mounts: string[] = [];
afterEach(async () => {
  await cluster?.close();
  for (const m of mounts.splice(0)) execFileSync('umount', [m]);
  if (cluster) rmSync(cluster.root, { recursive: true, force: true });
  cluster = undefined;
});

function tryMount(at: string): boolean {
  mkdirSync(at, { recursive: true });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', at], { stdio: 'pipe' });
    mounts.push(at);
    return true;
  } catch (e) {
    console.warn(`cannot mount a tmpfs here (${(e as Error).message.split('\n')[0]}); the full-disk test needs root`);
    return false;
  }
}

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

describe('replicated log: a full disk on a follower', () => {
  it('stops replication on the follower, keeps the quorum committing, and catches up once space is freed', async (ctx) => {
    const probe = mkdtempSync(join(tmpdir(), 'plexus-ha-mnt-'));
    const canMount = tryMount(join(probe, 'x'));
    if (canMount) execFileSync('umount', [mounts.pop() as string]);
    rmSync(probe, { recursive: true, force: true });
    if (!canMount) ctx.skip();

    const FULL = 3;
    let filler = '';
    const c = (cluster = await startCluster(3, {}, (id, dir) => {
      if (id === FULL && !filler) {
        const logDir = join(dir, 'log');
        if (!tryMount(logDir)) throw new Error('mount failed');
        filler = join(logDir, 'filler');
      }
      return {};
    }));
    const electable = [1, 2];
    // Keep member 3 a follower: transfer leadership away if it won.
    let leader = await c.waitLeader();
    if (leader === c.logs.get(FULL)) {
      await leader.transferLeadership(1);
      leader = await c.waitLeader(electable);
    }
    await leader.append([text('small')]);
    const full = c.logs.get(FULL) as ReplicatedLog;
    await until(() => full.last === 1n, { timeoutMs: 5000, what: 'the follower to apply' });
    await fill(filler, 64 * 1024);

    const big = new Uint8Array(32 * 1024).fill(0x61);
    for (let i = 0; i < 8; i++) await leader.append([big]); // 256 KiB: more than is left on member 3
    await until(() => full.status().failure !== undefined, { timeoutMs: 10_000, what: 'the follower to stop' });
    const st = full.status();
    expect(st.failure).toContain('PLX_STORAGE_DISK_FULL');
    expect(full.last).toBeLessThan(9n);
    // The quorum (leader + the other follower) goes on; the leader sees the lag.
    for (let i = 0; i < 5; i++) await leader.append([text(`more${i}`)]);
    expect(leader.last).toBe(14n);
    const lag = leader.status().followers?.find((f) => f.id === FULL);
    expect(lag?.lagPositions).toBeGreaterThan(0);

    // Space is freed; the member restarts and catches up on its own files.
    rmSync(filler);
    await c.stop(FULL);
    const back = await c.restart(FULL);
    await until(() => back.last === 14n, { timeoutMs: 10_000, what: 'the restarted follower to catch up' });
    expect(back.status().failure).toBeUndefined();
    const snaps = await Promise.all(c.ids.map((id) => snapshot(c.logs.get(id) as ReplicatedLog)));
    expect(snaps[2]).toEqual(snaps[0]);
    expect(snaps[1]).toEqual(snaps[0]);
  });
});
