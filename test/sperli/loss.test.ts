// A rank that is lost, or leaves without saying goodbye, while another waits for it: whole
// jobs of real processes on loopback (TLS 1.3), started by the launcher (`launch()`, what
// `plexus sperli launch` runs, and the command itself for its message and exit status).
// Rank 0 waits in one call while rank 1 leaves: its program ends without finalize(), it
// calls process.exit(3), it SIGKILLs itself, or it finalizes. The rank program is
// test/sperli/fixtures/loss-job.mjs; it prints what rank 0's call settled with, and when.
// Every process is stopped by the launcher, or by the test by its PID.
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ANY_SOURCE, Comm } from '../../ts/sperli/comm.js';
import { type LaunchResult, launch } from '../../ts/sperli/launcher.js';
import { createMemoryTransports } from '../../ts/sperli/memory-transport.js';
import { ROOT } from '../helpers/paths.js';
import { runPlexus, stopStarted } from '../helpers/processes.js';

const JOB = join(ROOT, 'test/sperli/fixtures/loss-job.mjs');
/**
 * The silence limit of these jobs (the heartbeat is 1000 ms, mesh.ts): well above what a
 * starved rank on a loaded machine may go without running, while a close is found in
 * 200 ms whatever the limit.
 */
const SILENCE_MS = 4000;
const HEARTBEAT_MS = 1000;
/** Slack on top of silence + one heartbeat for a loaded machine: an upper bound, not a measurement. */
const SLACK_MS = 4000;

interface Outcome {
  readonly result: LaunchResult;
  readonly out: string;
  readonly err: string;
}

/** One job of two ranks through the launcher, its output kept. */
async function job(op: string, how: string, mode: string): Promise<Outcome> {
  let out = '';
  let err = '';
  const result = await launch({
    size: 2,
    command: [process.execPath, JOB, op, how, mode],
    silenceMs: SILENCE_MS,
    stdout: (t) => {
      out += t;
    },
    stderr: (t) => {
      err += t;
    },
  });
  return { result, out, err };
}

/** Runs `cases` a few at a time (each is a job of three processes' worth of start-up). */
async function inBatches<T, R>(cases: readonly T[], width: number, run: (c: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(cases.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < cases.length) {
      const i = next++;
      results[i] = await run(cases[i] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, cases.length) }, worker));
  return results;
}

/** When rank 1 left (ms since 1970), from its output. */
function leftAt(o: Outcome): number {
  const m = /\[rank 1\] leaving at (\d+)/.exec(o.out);
  expect(m, o.out + o.err).not.toBeNull();
  return Number(m?.[1]);
}

/**
 * What rank 0's call `name` settled with: the line `caught NAME: CODE REASON peer=P cause=C
 * at MS` and a `finally NAME` line (catch and finally ran), or a list of what is wrong.
 */
function settled(o: Outcome, name: string, cause: string, problems: string[]): void {
  const m = new RegExp(`\\[rank 0\\] caught ${name}: H1612 lost-peer peer=1 cause=${cause} at (\\d+)`).exec(o.out);
  if (m === null) {
    problems.push(`${name}: no H1612 lost-peer (peer 1, cause ${cause}) caught`);
    return;
  }
  if (!o.out.includes(`[rank 0] finally ${name}\n`)) problems.push(`${name}: finally did not run`);
  if (o.out.includes(`not reached: ${name}`)) problems.push(`${name}: completed`);
  const after = Number(m[1]) - leftAt(o);
  if (after > SILENCE_MS + HEARTBEAT_MS + SLACK_MS) problems.push(`${name}: settled ${after} ms after rank 1 left`);
}

/** The launcher's first failure names rank 1: its own exit, or rank 0's report of losing it. */
function namesRankOne(r: LaunchResult): boolean {
  return r.failure?.rank === 1 || r.failure?.details?.peer === 1;
}

const COLLECTIVES = ['barrier', 'bcast', 'reduce', 'allreduce', 'gather', 'scatter'] as const;
const HOWS = ['exit0', 'exit3', 'kill'] as const;

describe('a peer that is lost while calls wait for it', () => {
  // Every collective × every way of leaving, with a recv from rank 1 and one from any rank
  // pending beside each collective; the two onFailure modes alternate so that each
  // collective and each way of leaving meets both.
  const cases = COLLECTIVES.flatMap((op, i) =>
    HOWS.map((how, j) => ({ op, how, mode: (i + j) % 2 === 0 ? 'exit' : 'throw' })),
  );

  it(`settles every pending call of rank 0 with H1612 lost-peer within silence + one heartbeat (${cases.length} jobs)`, async () => {
    const outcomes = await inBatches(cases, 4, (c) => job(c.op, c.how, c.mode));
    const failures: string[] = [];
    outcomes.forEach((o, i) => {
      const c = cases[i] as (typeof cases)[number];
      const problems: string[] = [];
      // Each pending call rejected with the coded error naming rank 1; catch and finally ran.
      for (const name of [c.op, 'recv', 'recv-any']) settled(o, name, 'close', problems);
      // Rank 0 reported the failure for the launcher, in both modes.
      if (!/\[rank 0\] failed: H1612 rank 1 closed its connection without BYE/.test(o.err)) {
        problems.push('rank 0 did not report the failure');
      }
      // The job's status: the launcher exits 1 and names rank 1 first.
      if (o.result.exitCode !== 1) problems.push(`launcher status ${o.result.exitCode}`);
      if (!namesRankOne(o.result)) problems.push(`first failure ${JSON.stringify(o.result.failure)}`);
      const [r0, r1] = o.result.ranks;
      // onFailure 'exit': status 3; 'throw': the program went on after its catch and ended.
      if (r0?.code !== (c.mode === 'exit' ? 3 : 0)) problems.push(`rank 0 status ${r0?.code}`);
      if (c.how === 'kill' ? r1?.signal !== 'SIGKILL' : r1?.code !== (c.how === 'exit3' ? 3 : 0)) {
        problems.push(`rank 1 status ${r1?.code} signal ${r1?.signal}`);
      }
      // Rank 1's program ended without finalize(): the launcher names it, though its status was 0.
      if (
        c.how === 'exit0' &&
        !/\[rank 1\] failed: H1612 rank 1 exited with status 0 without finalize\(\)/.test(o.err)
      ) {
        problems.push('the launcher did not name rank 1 as exited without finalize()');
      }
      if (problems.length > 0)
        failures.push(`${c.op} / rank 1 ${c.how} / onFailure ${c.mode}: ${problems.join('; ')}\n${o.out}${o.err}`);
    });
    expect(failures, failures.join('\n\n')).toEqual([]);
  }, 240_000);
});

describe('a peer that has left with BYE', () => {
  it('calls that need it fail the job with H1612 lost-peer (cause left), naming it', async () => {
    const cases = [
      { op: 'barrier', mode: 'exit', waiting: 'a collective' },
      { op: 'scatter', mode: 'throw', waiting: 'a collective' },
    ];
    const outcomes = await inBatches(cases, 4, (c) => job(c.op, 'finalize', c.mode));
    outcomes.forEach((o, i) => {
      const c = cases[i] as (typeof cases)[number];
      const all = o.out + o.err;
      const problems: string[] = [];
      for (const name of [c.op, 'recv', 'recv-any']) settled(o, name, 'left', problems);
      expect(problems, all).toEqual([]);
      expect(o.result.exitCode, all).toBe(1);
      expect(o.result.failure, all).toMatchObject({
        rank: 0,
        code: 'H1612',
        reason: 'lost-peer',
        details: { peer: 1, cause: 'left' },
      });
      // Whichever of the three calls found it first is named.
      expect(o.result.failure?.message).toMatch(
        /rank 1 has left the job \(BYE\) while rank 0 still needs it \((a collective|a receive from rank 1|a receive from any rank)\)/,
      );
      // Rank 1 finalized and exited 0: not a failure of its own.
      expect(o.result.ranks.map((r) => r.code)).toEqual([c.mode === 'exit' ? 3 : 0, 0]);
      expect(o.err).not.toMatch(/\[rank 1\] failed/);
    });
  }, 120_000);

  it("with onFailure 'exit', a call the program does not catch ends the rank with status 3 and no stack trace", async () => {
    const o = await job('uncaught', 'kill', 'exit');
    const all = o.out + o.err;
    expect(o.err, all).toMatch(/\[rank 0\] failed: H1612 rank 1 closed its connection without BYE/);
    expect(o.out, all).not.toContain('not reached');
    expect(o.err, all).not.toMatch(/PlexusError|at sperliError|Node\.js v/);
    expect(o.result.ranks[0]?.code, all).toBe(3);
    expect(o.result.exitCode).toBe(1);
  }, 60_000);

  it('in one process: a receive from a rank that left fails, one from this rank itself does not', async () => {
    // The in-memory transport judges frames with the mesh's code (BYE included).
    const [a, b, c] = createMemoryTransports(3).map((t) => new Comm(t)) as [Comm, Comm, Comm];
    // A message rank 1 sent before it left is still received.
    await b.send(0, 1, new Uint8Array([9]));
    await b.finalize();
    expect((await a.recv(1, 1)).data).toEqual(new Uint8Array([9]));
    // A receive from ANY_SOURCE waits while rank 2 is still in the job.
    const any = a.recv(ANY_SOURCE, 5);
    await c.send(0, 5, new Uint8Array([5]));
    expect((await any).source).toBe(2);
    // A receive from itself waits for its own send.
    const self = a.recv(0, 3);
    await a.send(0, 3, new Uint8Array([3]));
    expect((await self).data).toEqual(new Uint8Array([3]));
    // Nothing more can come from rank 1.
    const e = await a.recv(1, 2).then(
      () => undefined,
      (x) => x,
    );
    expect(e).toMatchObject({ code: 'H1612', details: { reason: 'lost-peer', peer: 1, cause: 'left' } });
    expect(a.failed).toBe(e);
    // Rank 2 hears of it through the ABORT: lost rank 1.
    const onC = await c.barrier().then(
      () => undefined,
      (x) => x,
    );
    expect(onC).toMatchObject({ code: 'H1612', details: { reason: 'abort', abortReason: 1, rank: 1 } });
  });
});

afterAll(() => stopStarted());

/** `plexus sperli launch -n 2 -- node loss-job.mjs ...` as a user runs it. */
async function cli(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const r = await runPlexus(
    ['sperli', 'launch', '-n', '2', '--silence-ms', String(SILENCE_MS), '--', process.execPath, JOB, ...args],
    { cwd: ROOT, timeoutMs: 60_000 },
  );
  return { status: r.code, stdout: r.stdout, stderr: r.stderr };
}

describe('plexus sperli launch: ranks that do not say goodbye', () => {
  it('ranks whose programs end without finalize(), and a recv from a rank that finalized, end the job with status 1, naming the rank', async () => {
    const [idle, late] = await Promise.all([cli(['idle', 'exit0', 'exit']), cli(['recv-late', 'finalize', 'exit'])]);
    // Neither rank calls finalize(): both programs end, and the job fails instead of hanging.
    expect(idle.stdout).toContain('[rank 0] done without finalize');
    expect(idle.stdout).toContain('[rank 1] done without finalize');
    expect(idle.status, idle.stderr).toBe(1);
    expect(idle.stderr).toMatch(
      /plexus sperli: job [0-9a-f]{32} failed at rank (\d): H1612 rank \1 exited with status 0 without finalize\(\)/,
    );
    // Rank 0 calls recv(1) after rank 1 has finalized and exited.
    expect(late.stdout).toMatch(/\[rank 0\] caught recv-late: H1612 lost-peer peer=1 cause=left/);
    expect(late.stdout).toContain('[rank 0] finally recv-late');
    expect(late.status, late.stderr).toBe(1);
    expect(late.stderr).toMatch(
      /plexus sperli: job [0-9a-f]{32} failed at rank 0: H1612 rank 1 has left the job \(BYE\) while rank 0 still needs it \(a receive from rank 1\)/,
    );
    expect(late.stderr).not.toContain('status 13');
  }, 120_000);
});
