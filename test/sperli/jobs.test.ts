// Whole SPERLI jobs: real processes started by `plexus sperli launch`, real TLS 1.3 on
// loopback. Every process is stopped by the launcher or by the test, by its PID.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/paths.js';
import { runPlexus, startPlexus, stopStarted } from '../helpers/processes.js';
import { StopWaiting, until } from '../helpers/until.js';

const FIX = join(ROOT, 'test/fixtures/sperli');
afterEach(() => stopStarted());

/** `plexus sperli launch -n <n> [...extra] -- node <file> [...args]` to its end. */
function launch(n: number, file: string, extra: string[] = [], args: string[] = []) {
  return runPlexus(['sperli', 'launch', '-n', String(n), ...extra, '--', process.execPath, file, ...args], {
    timeoutMs: 120_000,
    cwd: ROOT,
  });
}

describe('collectives across processes', () => {
  it.each([1, 2, 3, 8])('every collective and element type on %i ranks', async (n) => {
    const r = await launch(n, join(FIX, 'collectives-job.mjs'));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`\\[rank 0\\] collectives ok: \\d+ checks on ${n} ranks`));
  });

  it('an uneven scatter: H1618 at the root, H1612 on the others, the launcher exits non-zero', async () => {
    const r = await launch(3, join(FIX, 'scatter-uneven-job.mjs'), ['--json']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/\[rank 0\] failed: H1618/);
    expect(r.stderr).toMatch(/\[rank 1\] failed: H1612/);
    expect(r.stderr).toMatch(/\[rank 2\] failed: H1612/);
    expect(r.stdout).not.toContain('not reached');
  });
});

describe('the examples', () => {
  it('pi by integration', async () => {
    const r = await launch(4, join(ROOT, 'examples/sperli/pi.mjs'), [], ['200000']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/\[rank 0\] pi ~ 3\.14159/);
  });
  it('ping-pong', async () => {
    const r = await launch(2, join(ROOT, 'examples/sperli/ping-pong.mjs'), [], ['20']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/\[rank 0\] 8 bytes: [\d.]+ us per round trip/);
  });
  it('allreduce of a large Float64Array (split across frames)', async () => {
    const r = await launch(3, join(ROOT, 'examples/sperli/allreduce.mjs'), [], [String(3 * 1024 * 1024)]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/\[rank 0\] allreduce of 3145728 float64 .* result checked/);
  });
});

/** Starts a loop job, waits for every rank's pid, and hands back the pids and the launcher. */
async function loopJob(n: number, silenceMs: number) {
  const launcher = startPlexus(
    [
      'sperli',
      'launch',
      '-n',
      String(n),
      '--silence-ms',
      String(silenceMs),
      '--json',
      '--',
      process.execPath,
      join(FIX, 'loop-job.mjs'),
    ],
    { cwd: ROOT },
  );
  const pids = await until(
    () => {
      const m = new Map<number, number>();
      for (const x of launcher.stdout().matchAll(/\[rank (\d+)\] pid (\d+)/g)) m.set(Number(x[1]), Number(x[2]));
      if (m.size === n) return m;
      if (!launcher.running())
        throw new StopWaiting(`the launcher exited:\n${launcher.stdout()}\n${launcher.stderr()}`);
      return undefined;
    },
    { timeoutMs: 60_000, what: `the pids of ${n} ranks` },
  );
  const exited = launcher.ended.then((e) => {
    const last = launcher.stdout().trim().split('\n').pop() ?? '{}';
    return { code: e.code, result: JSON.parse(last) as { ranks: { rank: number; endedAt: number }[] } };
  });
  return { pids, exited, stderr: () => launcher.stderr() };
}

describe('a lost rank', () => {
  const silence = 1500;
  for (const signal of ['SIGKILL', 'SIGSTOP'] as const) {
    it(`${signal} on one rank: the others stop within the silence limit plus one second, the launcher names it`, async () => {
      const job = await loopJob(4, silence);
      const victim = job.pids.get(2) as number;
      const t0 = Date.now();
      process.kill(victim, signal);
      const { code, result } = await job.exited;
      if (signal === 'SIGSTOP') {
        try {
          process.kill(victim, 'SIGKILL');
        } catch {
          // already gone: the launcher stopped it
        }
      }
      expect(code).toBe(1);
      for (const r of result.ranks.filter((x) => x.rank !== 2)) {
        expect(r.endedAt - t0, `rank ${r.rank}`).toBeLessThanOrEqual(silence + 1000);
      }
      expect(job.stderr()).toMatch(/rank 2/);
    }, 60_000);
  }
});

describe('restarts', () => {
  it('a failed job starts again as the next incarnation, at most --restart-max times', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'plexus-restart-'));
    try {
      const marker = join(dir, 'marker');
      const r = await launch(3, join(FIX, 'fail-once-job.mjs'), ['--restart-max', '1', '--json'], [marker]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toMatch(/restart 1 of 1 as incarnation 2/);
      expect(r.stdout).toContain('[rank 0] sum 6');
      const result = JSON.parse(r.stdout.trim().split('\n').pop() as string);
      expect(result.incarnation).toBe(2);
      expect(result.restarts).toHaveLength(1);
      // without restarts the same job fails
      rmSync(marker);
      const once = await launch(3, join(FIX, 'fail-once-job.mjs'), [], [marker]);
      expect(once.code).toBe(1);
      // a lost rank moves to a spare host of the hosts file
      rmSync(marker);
      const hosts = join(dir, 'hosts');
      writeFileSync(hosts, '127.0.0.1\n127.0.0.2\n127.0.0.3\n127.0.0.4\n');
      const moved = await launch(
        3,
        join(FIX, 'fail-once-job.mjs'),
        ['--hosts', hosts, '--restart-max', '2', '--silence-ms', '1500'],
        [marker, 'kill'],
      );
      expect(moved.code, moved.stderr).toBe(0);
      expect(moved.stderr).toContain('rank 1 moves to 127.0.0.4');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('checkpoints across a lost rank', () => {
  it('SIGKILL mid-job: the launcher restarts it, it resumes from the last COMMIT and ends with the undisturbed result', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'plexus-ckpt-'));
    try {
      const clean = await launch(3, join(FIX, 'checkpoint-job.mjs'), ['--checkpoint-dir', join(dir, 'a')]);
      expect(clean.code, clean.stderr).toBe(0);
      const want = /\[rank 0\] result (.*)/.exec(clean.stdout)?.[1];
      expect(want).toBeDefined();
      const marker = join(dir, 'marker');
      const hit = await launch(
        3,
        join(FIX, 'checkpoint-job.mjs'),
        ['--checkpoint-dir', join(dir, 'b'), '--restart-max', '2', '--silence-ms', '1500'],
        [marker],
      );
      expect(hit.code, hit.stderr).toBe(0);
      expect(hit.stderr).toMatch(/restart 1 of 2 as incarnation 2/);
      expect(hit.stdout).toMatch(/\[rank \d\] resumed at step 20/);
      expect(/\[rank 0\] result (.*)/.exec(hit.stdout)?.[1]).toBe(want);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
