/**
 * Step 8 of `plexus demo` (ts/cli/commands/demo-chronacta.ts): three real
 * `node dist/cli/main.js chronacta serve --cluster` processes, the leader SIGKILLed, the
 * failover timed and every acknowledged event read back exactly once; members that do not
 * start, do not serve or ignore SIGTERM, and a SIGINT to the demo: in every case no member
 * process is left and the temporary directory is gone. The members run the built CLI
 * (npm test builds it first; or npx tsc -p tsconfig.build.json).
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chronactaFailoverStep, exactlyOnceProblem } from '../../ts/cli/commands/demo-chronacta.js';
import { startNode } from '../helpers/processes.js';
import { until } from '../helpers/until.js';

const ROOT = resolve(import.meta.dirname, '../..');
const MAIN = join(ROOT, 'dist/cli/main.js');
const BUILT_STEP = join(ROOT, 'dist/cli/commands/demo-chronacta.js');

let scratch = '';

beforeAll(() => {
  if (!existsSync(MAIN) || !existsSync(BUILT_STEP)) {
    throw new Error(`${BUILT_STEP} is missing: run npx tsc -p tsconfig.build.json first`);
  }
  scratch = mkdtempSync(join(tmpdir(), 'plexus-demo-chronacta-test-'));
});

afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code !== 'ESRCH';
  }
}

/** A fresh, empty parent for the step's temporary directory, to check it is removed. */
function parentDir(name: string): string {
  return mkdtempSync(join(scratch, `${name}-`));
}

function fakeMember(name: string, body: string): string {
  const f = join(scratch, name);
  writeFileSync(f, body);
  return f;
}

async function runStep(opts: Parameters<typeof chronactaFailoverStep>[1]) {
  const lines: string[] = [];
  const pids: number[] = [];
  const ok = await chronactaFailoverStep((s = '') => lines.push(s), { ...opts, onSpawn: (p) => pids.push(p) });
  return { ok, lines, text: lines.join('\n'), pids };
}

describe('exactlyOnceProblem', () => {
  const acked = [
    { key: 'a', position: 1n },
    { key: 'b', position: 2n },
  ];
  it('accepts every acknowledged event once at its position', () => {
    expect(
      exactlyOnceProblem(acked, [
        { position: 1n, data: 'a' },
        { position: 2n, data: 'b' },
      ]),
    ).toBeUndefined();
  });
  it('names a missing, a doubled, a moved and an unacknowledged event', () => {
    expect(exactlyOnceProblem(acked, [{ position: 1n, data: 'a' }])).toContain('b (position 2) is missing');
    expect(
      exactlyOnceProblem(acked, [
        { position: 1n, data: 'a' },
        { position: 2n, data: 'b' },
        { position: 3n, data: 'b' },
      ]),
    ).toContain('b is there 2 times (positions 2, 3)');
    expect(
      exactlyOnceProblem(acked, [
        { position: 1n, data: 'a' },
        { position: 3n, data: 'b' },
      ]),
    ).toContain('at position 3, but was acknowledged at 2');
    expect(
      exactlyOnceProblem(acked, [
        { position: 1n, data: 'a' },
        { position: 2n, data: 'b' },
        { position: 3n, data: 'c' },
      ]),
    ).toContain('"c" at position 3 was never acknowledged');
  });
});

describe('plexus demo, step 8: a Chronacta cluster fails over', () => {
  it('kills the leader, times the failover, finds every acknowledged event once, and leaves nothing running', async () => {
    const tmpRoot = parentDir('ok');
    const r = await runStep({ main: MAIN, tmpRoot, appends: 10 });
    expect(r.ok, r.text).toBe(true);
    expect(r.pids).toHaveLength(3);
    expect(r.text).toMatch(
      /started 3 × plexus chronacta serve --cluster --tick-ms 20 --max-read-staleness-ms 1000 \(pids \d+, \d+, \d+\)/,
    );
    const led = /node (\d) leads term (\d+) \(ClusterService status\)/.exec(r.text);
    expect(led).not.toBeNull();
    const killed = /killed the leader, node (\d) \(pid (\d+), term (\d+)\), with SIGKILL while appending/.exec(r.text);
    expect(killed).not.toBeNull();
    expect(r.pids).toContain(Number(killed?.[2]));
    const next = /node (\d) leads term (\d+); the first append issued after the kill was acknowledged (\d+) ms/.exec(
      r.text,
    );
    expect(next).not.toBeNull();
    expect(next?.[1]).not.toBe(killed?.[1]);
    expect(Number(next?.[2])).toBeGreaterThan(Number(killed?.[3]));
    expect(Number(next?.[3])).toBeGreaterThan(0);
    const read = /read back all events from node (\d) \(leader\) and node (\d) \(follower\): (\d+) acknowledged/.exec(
      r.text,
    );
    expect(read?.[1]).toBe(next?.[1]);
    expect(Number(read?.[3])).toBeGreaterThanOrEqual(20);
    expect(r.text).toContain('each present exactly once at its position, nothing else');
    expect(r.text).toMatch(/with the default 100 ms tick an election waits 1\.0 to 2\.0 s/);
    expect(r.text).toContain('stopped the members by PID and removed the cluster directory');
    for (const pid of r.pids) expect(alive(pid), `pid ${pid}`).toBe(false);
    expect(readdirSync(tmpRoot)).toEqual([]);
  }, 60_000);

  it('fails with the reason and the members’ output when a member exits at start', async () => {
    const tmpRoot = parentDir('exit');
    const main = fakeMember(
      'exits.mjs',
      "process.stderr.write('cannot open the data directory\\n'); process.exit(3);\n",
    );
    const r = await runStep({ main, tmpRoot });
    expect(r.ok).toBe(false);
    expect(r.text).toMatch(/failed: node \d exited \(code 3\)/);
    expect(r.text).toMatch(/node \d> cannot open the data directory/);
    for (const pid of r.pids) expect(alive(pid)).toBe(false);
    expect(readdirSync(tmpRoot)).toEqual([]);
  }, 20_000);

  it('stops members that never serve and ignore SIGTERM with SIGKILL', async () => {
    const tmpRoot = parentDir('hang');
    const main = fakeMember('hangs.mjs', "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000);\n");
    const r = await runStep({ main, tmpRoot, phaseTimeoutMs: 1000 });
    expect(r.ok).toBe(false);
    expect(r.text).toContain('failed: no member serving within 1000 ms');
    expect(r.pids).toHaveLength(3);
    for (const pid of r.pids) expect(alive(pid)).toBe(false);
    expect(r.text).toContain('stopped the members by PID');
    expect(readdirSync(tmpRoot)).toEqual([]);
  }, 20_000);

  it('says how to build when the CLI is missing, and starts nothing', async () => {
    const r = await runStep({ main: join(scratch, 'no-such-main.js') });
    expect(r.ok).toBe(false);
    expect(r.text).toContain('is missing; build it with npx tsc -p tsconfig.build.json');
    expect(r.pids).toEqual([]);
  });

  it('on SIGINT stops the members, removes the directory and exits with 130', async () => {
    const tmpRoot = parentDir('sigint');
    const script = [
      `const { chronactaFailoverStep } = await import(${JSON.stringify(pathToFileURL(BUILT_STEP).href)});`,
      `await chronactaFailoverStep((s = '') => process.stdout.write(s + '\\n'),`,
      `  { main: ${JSON.stringify(MAIN)}, tmpRoot: ${JSON.stringify(tmpRoot)}, appends: 100000 });`,
    ].join('\n');
    // The step run as a script of its own (a module under the scratch directory importing dist/).
    const file = join(scratch, 'sigint-step.mjs');
    writeFileSync(file, `${script}\n`);
    const child = startNode(file);
    const out = () => `${child.stdout()}${child.stderr()}`;
    try {
      await until(() => /keyed appends|leads term|failed/.test(out()) || !child.running(), {
        timeoutMs: 30_000,
        what: 'the demo step to report its leader',
      }).catch(() => undefined); // the assertions below say what is missing
      const pids = (/\(pids (\d+), (\d+), (\d+)\)/.exec(out()) ?? []).slice(1).map(Number);
      expect(pids, out()).toHaveLength(3);
      expect(out()).toMatch(/leads term/);
      for (const pid of pids) expect(alive(pid)).toBe(true);
      process.kill(child.pid, 'SIGINT');
      const { code } = await child.ended;
      expect(code, out()).toBe(130);
      expect(out()).toContain('interrupted: stopping the members and removing the cluster directory');
      for (const pid of pids) expect(alive(pid), `pid ${pid}`).toBe(false);
      expect(readdirSync(tmpRoot)).toEqual([]);
    } finally {
      await child.stop('SIGKILL');
    }
  }, 40_000);
});
