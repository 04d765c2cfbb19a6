/** The test kit itself: waiting, refusals, the manual clock, and processes from dist/. */
import { afterAll, describe, expect, it } from 'vitest';
import { PlexusError } from '../../ts/core/errors.js';
import {
  built,
  expectRefusal,
  ManualClock,
  runPlexus,
  StopWaiting,
  startNode,
  stillRunning,
  stopStarted,
  until,
} from './index.js';

afterAll(() => stopStarted());

describe('until', () => {
  it('resolves with the first value the probe gives', async () => {
    let n = 0;
    const v = await until(() => (++n >= 3 ? { n } : undefined), { what: 'three probes' });
    expect(v).toEqual({ n: 3 });
  });

  it('takes async probes and keeps 0 as a value', async () => {
    let n = 0;
    expect(await until(async () => (n++ < 2 ? false : 0))).toBe(0);
  });

  it('fails naming what it waited for and the last error', async () => {
    await expect(until(() => false, { timeoutMs: 30, what: 'the leader' })).rejects.toThrow(
      /timed out after 30 ms waiting for the leader$/,
    );
    await expect(
      until(
        () => {
          throw new Error('connection refused');
        },
        { timeoutMs: 30, what: 'a reply' },
      ),
    ).rejects.toThrow('waiting for a reply (last error: connection refused)');
  });
});

describe('until and StopWaiting', () => {
  it('fails at once when the probe throws StopWaiting', async () => {
    const t0 = Date.now();
    await expect(
      until(
        () => {
          throw new StopWaiting('the process exited (1)');
        },
        { timeoutMs: 5_000, what: 'the serving line' },
      ),
    ).rejects.toThrow('stopped waiting for the serving line: the process exited (1)');
    expect(Date.now() - t0).toBeLessThan(1_000);
  });
});

describe('expectRefusal', () => {
  const refuse = () => {
    throw new PlexusError('PLX_CODEC_BAD_FORMAT', 'no');
  };

  it('returns the PlexusError with the code, from a promise or a function', async () => {
    expect(
      (await expectRefusal(Promise.reject(new PlexusError('PLX_CODEC_BAD_FORMAT', 'no')), 'PLX_CODEC_BAD_FORMAT'))
        .message,
    ).toBe('no');
    expect((await expectRefusal(refuse, /^PLX_CODEC_/)).code).toBe('PLX_CODEC_BAD_FORMAT');
  });

  it('fails on success, on another code and on a plain Error', async () => {
    await expect(expectRefusal(Promise.resolve(1), 'PLX_CODEC_BAD_FORMAT')).rejects.toThrow('it succeeded');
    await expect(expectRefusal(refuse, 'PLX_TEST_OTHER')).rejects.toThrow('got PLX_CODEC_BAD_FORMAT');
    await expect(expectRefusal(Promise.reject(new Error('plain')), 'PLX_CODEC_BAD_FORMAT')).rejects.toThrow(
      'got Error: plain',
    );
  });
});

describe('ManualClock', () => {
  it('is the clock of ts/core/clock.ts: time moves only when told', () => {
    const c = new ManualClock(100);
    const fired: number[] = [];
    c.setTimeout(() => fired.push(c.now()), 50);
    c.advance(49);
    expect(fired).toEqual([]);
    c.advance(1);
    expect(fired).toEqual([150]);
  });
});

describe.skipIf(!built)('processes from dist/', () => {
  it('runs the plexus command and reports its exit and output', async () => {
    const r = await runPlexus(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout + r.stderr).toMatch(/plexus/);
  });

  it('tracks a started process by PID and stops it', async () => {
    const q = startNode('cli/main.js', ['--help']);
    expect(q.pid).toBeGreaterThan(0);
    await q.exited;
    const r = startNode(new URL('../fixtures/wait-forever.mjs', import.meta.url).pathname, []);
    expect(await r.line(/^ready$/, { what: 'the ready line' })).toBe('ready');
    expect(stillRunning()).toContain(r);
    await stopStarted();
    expect(r.running()).toBe(false);
    expect((await r.exited).signal).toBe('SIGKILL');
    expect(stillRunning()).toEqual([]);
  });

  it('fails a wait for a line at once when the process exits without it', async () => {
    const p = startNode('cli/main.js', ['--help']);
    await expect(p.line(/never printed/, { timeoutMs: 20_000 })).rejects.toThrow(/stopped waiting.*exited \(0\)/);
  });
});
