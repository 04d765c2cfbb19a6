// Polling while a rank waits for a frame (ts/sperli/spin.ts): the spinner's holds and
// window, the default policy, the queues' holds and releases, and real jobs with polling
// on, off and refused.
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PlexusError } from '../../ts/core/errors.js';
import { FrameQueue, Mailbox } from '../../ts/sperli/comm-queues.js';
import {
  DEFAULT_SPIN_MS,
  MAX_SIT_OUT,
  MIN_CPU_SHARE,
  ranksOnMachine,
  SAMPLE_MS,
  Spinner,
  spinWindowMs,
} from '../../ts/sperli/spin.js';
import { ROOT } from '../helpers/paths.js';
import { runPlexus, stopStarted } from '../helpers/processes.js';
import { until } from '../helpers/until.js';

const JOB = join(ROOT, 'test/fixtures/sperli/spin-job.mjs');
const turn = () => new Promise((r) => setImmediate(r));
/** Resolves once the spinner has stopped polling (its window ran out, or it lost the CPU). */
const stopsPolling = (s: Spinner, timeoutMs = 10_000) =>
  until(() => !s.polling, { timeoutMs, what: 'the spinner to stop polling' });

describe('Spinner', () => {
  it('polls while something waits and stops once nothing does', async () => {
    const s = new Spinner(1000);
    expect(s.polling).toBe(false);
    s.hold();
    s.hold();
    expect(s.polling).toBe(true);
    s.release();
    await turn();
    await turn();
    expect(s.polling).toBe(true);
    s.release();
    expect(s.waiting).toBe(0);
    await turn();
    await turn();
    expect(s.polling).toBe(false);
    s.release(); // an extra release never goes below zero
    expect(s.waiting).toBe(0);
  });

  it('stops polling after its window even while a wait goes on, then sits out 1, 2, 4 ... wait starts', async () => {
    const s = new Spinner(2);
    s.hold();
    await stopsPolling(s);
    expect(s.waiting).toBe(1);
    expect(s.polling).toBe(false);
    expect(s.sittingOut).toBe(1);
    s.hold(); // sat out
    expect(s.polling).toBe(false);
    expect(s.sittingOut).toBe(0);
    s.hold(); // polls again, and runs out again: 2 to sit out
    expect(s.polling).toBe(true);
    await stopsPolling(s);
    expect(s.sittingOut).toBe(2);
    s.hold();
    s.hold();
    s.hold();
    expect(s.polling).toBe(true);
    await stopsPolling(s);
    expect(s.sittingOut).toBe(4);
  });

  it('a frame that comes while polling starts the sit-out count at 1 again', async () => {
    const s = new Spinner(2);
    s.hold();
    await stopsPolling(s); // runs out: sits out 1, next time 2
    s.hold();
    s.hold();
    expect(s.polling).toBe(true);
    s.release(); // came while polling
    await stopsPolling(s); // the other wait runs out: 1 to sit out, not 2
    expect(s.sittingOut).toBe(1);
  });

  it(`stops when it gets less than ${MIN_CPU_SHARE} of the wall time while it polls`, async () => {
    const s = new Spinner(500);
    s.hold();
    expect(s.polling).toBe(true);
    // Block this thread without using the CPU, as a rank does when other work has the core.
    setImmediate(() => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, SAMPLE_MS * 4));
    // Well inside the 500 ms window: only the CPU share can have stopped it by then.
    await stopsPolling(s, 400);
    expect(s.polling).toBe(false);
    expect(s.waiting).toBe(1);
    expect(s.sittingOut).toBe(1);
  });

  it(`sits out at most ${MAX_SIT_OUT} wait starts`, async () => {
    const s = new Spinner(0.5);
    for (let i = 0; i < 12; i++) {
      while (s.sittingOut > 0) s.hold();
      s.hold();
      await stopsPolling(s);
    }
    expect(s.sittingOut).toBe(MAX_SIT_OUT);
  });

  it('a window of 0 never polls', () => {
    const s = new Spinner(0);
    s.hold();
    expect(s.polling).toBe(false);
    expect(s.waiting).toBe(0);
  });
});

describe('the polling window', () => {
  it('defaults to DEFAULT_SPIN_MS when the ranks fit the cores and to 0 when they do not', () => {
    expect(DEFAULT_SPIN_MS).toBeGreaterThan(0);
    expect(spinWindowMs(undefined, 2, 2)).toBe(DEFAULT_SPIN_MS);
    expect(spinWindowMs('', 1, 8)).toBe(DEFAULT_SPIN_MS);
    expect(spinWindowMs(undefined, 3, 2)).toBe(0);
  });

  it('takes a given window, from an option or the environment, whatever the cores', () => {
    expect(spinWindowMs(0, 1, 8)).toBe(0);
    expect(spinWindowMs('0.25', 4, 2)).toBe(0.25);
    expect(spinWindowMs(1000, 1, 1)).toBe(1000);
  });

  it.each([['abc'], ['-1'], [1001], [Number.NaN], ['Infinity']])('refuses %s with PLX_SPERLI_BAD_ARGUMENT', (v) => {
    let err: unknown;
    try {
      spinWindowMs(v as string | number, 1, 2);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PlexusError);
    expect((err as PlexusError).code).toBe('PLX_SPERLI_BAD_ARGUMENT');
    expect((err as PlexusError).details.reason).toBe('spin');
    expect((err as PlexusError).message).toMatch(/SPERLI_SPIN_MS/);
  });

  it('counts the ranks on one machine: every loopback name is this machine', () => {
    const hosts = [
      { name: '127.0.0.1', port: 1 },
      { name: '127.0.0.2', port: 2 },
      { name: 'localhost', port: 3 },
      { name: 'node-a', port: 4 },
      { name: 'node-a', port: 5 },
      { name: 'node-b', port: 6 },
    ];
    expect(ranksOnMachine(hosts, 0)).toBe(3);
    expect(ranksOnMachine(hosts, 2)).toBe(3);
    expect(ranksOnMachine(hosts, 3)).toBe(2);
    expect(ranksOnMachine(hosts, 5)).toBe(1);
  });
});

describe('the queues hold the spinner exactly while a consumer waits', () => {
  const failure = new PlexusError('H1612', 'the job ended', { reason: 'abort' });

  it('FrameQueue: next, wait, and fail', async () => {
    const s = new Spinner(1000);
    const q = new FrameQueue<number>(s);
    const p = q.next(undefined);
    expect(s.waiting).toBe(1);
    q.push(1);
    expect(await p).toBe(1);
    expect(s.waiting).toBe(0);
    q.push(2);
    await expect(q.next(undefined)).resolves.toBe(2); // queued: no wait, no hold
    expect(s.waiting).toBe(0);
    const got: number[] = [];
    q.wait({ item: (v) => got.push(v), fail: () => got.push(-1) }, undefined);
    expect(s.waiting).toBe(1);
    q.push(3);
    expect(got).toEqual([3]);
    expect(s.waiting).toBe(0);
    q.wait({ item: (v) => got.push(v), fail: () => got.push(-1) }, failure); // stopped: fails at once
    expect(s.waiting).toBe(0);
    const waiting = q.next(undefined);
    q.wait({ item: (v) => got.push(v), fail: () => got.push(-2) }, undefined);
    expect(s.waiting).toBe(2);
    q.fail(failure);
    await expect(waiting).rejects.toBe(failure);
    expect(got).toEqual([3, -1, -2]);
    expect(s.waiting).toBe(0);
  });

  it('Mailbox: a posted receive holds until its message comes or the job fails', async () => {
    const s = new Spinner(1000);
    const m = new Mailbox(s);
    const r1 = m.take(1, 5, undefined);
    const r2 = m.take(-1, -1, undefined);
    expect(s.waiting).toBe(2);
    m.deliver({ source: 1, tag: 5, data: new Uint8Array([1]) });
    expect((await r1).data[0]).toBe(1);
    expect(s.waiting).toBe(1);
    m.deliver({ source: 2, tag: 9, data: new Uint8Array([2]) });
    expect((await r2).source).toBe(2);
    expect(s.waiting).toBe(0);
    m.deliver({ source: 3, tag: 1, data: new Uint8Array([3]) });
    expect((await m.take(3, 1, undefined)).data[0]).toBe(3); // arrived first: no hold
    expect(s.waiting).toBe(0);
    const r3 = m.take(1, 1, undefined);
    const r4 = m.take(2, 2, undefined);
    m.fail(failure);
    await expect(r3).rejects.toBe(failure);
    await expect(r4).rejects.toBe(failure);
    expect(s.waiting).toBe(0);
  });
});

/** `plexus sperli launch -n <n> [...opts] -- node spin-job.mjs` to its end. */
function launch(n: number, env: NodeJS.ProcessEnv, opts: readonly string[] = [], timeoutMs = 120_000) {
  return runPlexus(['sperli', 'launch', '-n', String(n), ...opts, '--', process.execPath, JOB], {
    timeoutMs,
    cwd: ROOT,
    env,
  });
}

function windows(stdout: string): number[] {
  const out: number[] = [];
  for (const m of stdout.matchAll(/spin (\{.*\})/g)) out.push(JSON.parse(m[1] as string).spinMs);
  return out;
}

describe('jobs with polling on, off and refused (real processes)', () => {
  afterEach(() => stopStarted());
  const cores = availableParallelism();

  it.each([2, 3])('%i ranks on this machine: the default window, and the same answers', async (n) => {
    const { SPERLI_SPIN_MS: _, ...env } = process.env;
    const r = await launch(n, env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('[rank 0] spin ok');
    expect(windows(r.stdout)).toEqual(new Array(n).fill(n <= cores ? DEFAULT_SPIN_MS : 0));
  });

  it('SPERLI_SPIN_MS sets the window of every rank (0 turns polling off)', async () => {
    for (const v of ['0', '0.5']) {
      const r = await launch(2, { ...process.env, SPERLI_SPIN_MS: v });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain('[rank 0] spin ok');
      expect(windows(r.stdout)).toEqual([Number(v), Number(v)]);
    }
  });

  it('--spin-ms sets the window of every rank, and a bad one is a usage error', async () => {
    const r = await launch(2, process.env, ['--spin-ms', '0.25']);
    expect(r.code, r.stderr).toBe(0);
    expect(windows(r.stdout)).toEqual([0.25, 0.25]);
    for (const bad of ['x', '-1', '1001']) {
      const u = await launch(2, process.env, [`--spin-ms=${bad}`], 60_000);
      expect(u.code).toBe(2);
      expect(u.stderr).toContain(`--spin-ms takes a number of milliseconds from 0 to 1000, got "${bad}"`);
    }
  });

  it('a bad SPERLI_SPIN_MS fails the job with PLX_SPERLI_BAD_ARGUMENT before any message', async () => {
    const r = await launch(2, { ...process.env, SPERLI_SPIN_MS: 'fast' });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/PLX_SPERLI_BAD_ARGUMENT/);
    expect(r.stderr).toMatch(/SPERLI_SPIN_MS/);
    expect(r.stdout).not.toContain('spin ok');
  });
});
