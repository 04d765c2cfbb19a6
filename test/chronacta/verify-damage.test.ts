/**
 * `plexus chronacta verify` and `serve` on damaged data directories, in real processes
 * (dist/cli/main.js; run `npm run build` first): a flipped byte in the last acknowledged
 * record is refused with the file and offset, not dropped as a torn write; a record cut short
 * is still cut; `--truncate-damaged-tail` repairs on purpose; a cluster member's replicated
 * log and Raft journal are the logs verify checks; a directory with no log is an error.
 */
import type { ChildProcess } from 'node:child_process';
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ChronactaClient } from '../../ts/chronacta/client.js';
import { cli, initOneMember, spawnServe, stopChild } from '../chronacta-cluster/helpers.js';
import { startPlexus } from '../helpers/processes.js';
import { until } from '../helpers/until.js';

const tmp = mkdtempSync(join(tmpdir(), 'plexus-verify-damage-'));
const children = new Set<ChildProcess>();
afterAll(async () => {
  for (const c of children) await stopChild(c, 'SIGKILL');
  rmSync(tmp, { recursive: true, force: true });
});

const STACK = /^\s+at /m;
const lines = (s: string) =>
  s
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

/** The byte offset of each record in a segment file, by walking the length fields from the 32-byte header. */
function recordOffsets(file: string): number[] {
  const b = readFileSync(file);
  const offs: number[] = [];
  for (let off = 32; off + 48 <= b.length; off += 48 + b.readUInt32LE(off)) offs.push(off);
  return offs;
}

function flip(file: string, offset: number): void {
  const b = readFileSync(file);
  b[offset] = (b[offset] as number) ^ 0x40;
  writeFileSync(file, b);
}

const segmentOf = (dir: string) => join(dir, readdirSync(dir).find((n) => n.endsWith('.seg')) as string);

/** A standalone `serve` child on free ports; resolves with its address once it serves. */
async function serveStandalone(data: string, flags: string[] = []) {
  const p = startPlexus(['chronacta', 'serve', '--data', data, '--port', '0', '--metrics-port', '0', ...flags]);
  const child = p.child;
  children.add(child);
  const exited = p.ended.then((e) => e.code);
  const line = await until(
    async () => {
      if (!p.running()) return { exited: await exited };
      const l = p
        .stdout()
        .split('\n')
        .find((x) => x.includes('"serving"'));
      return l ? (JSON.parse(l) as { address: string; lastPosition: number }) : undefined;
    },
    { timeoutMs: 20_000, what: 'serve', intervalMs: 25 },
  );
  return { child, line, exited, stderr: p.stderr, stdout: p.stdout };
}

describe('a damaged last record in a standalone store', () => {
  it('is refused by verify and serve with the file and offset; --truncate-damaged-tail cuts it on purpose', async () => {
    const data = join(tmp, 'standalone');
    const s = await serveStandalone(data);
    expect('address' in s.line).toBe(true);
    const address = (s.line as { address: string }).address;
    for (let i = 1; i <= 3; i++) {
      const a = await cli('append', 'orders', '--type', 't', '--data', `e${i}`, '--server', address);
      expect(a.code, a.stderr).toBe(0);
    }
    await stopChild(s.child);
    expect(await s.exited).toBe(0);
    const seg = segmentOf(join(data, 'log'));
    const last = recordOffsets(seg).at(-1) as number;
    const torn = join(tmp, 'standalone-torn');
    cpSync(data, torn, { recursive: true });
    flip(seg, last + 48 + 1); // a payload byte of the third acknowledged event

    const v = await cli('verify', data);
    expect(v.code).toBe(1);
    expect(v.stderr).toContain('PLX_STORAGE_CORRUPT');
    expect(v.stderr).toContain(`${seg} is damaged at byte offset ${last}`);
    expect(v.stderr).not.toMatch(STACK);
    expect(lines(v.stdout)).toEqual([
      expect.objectContaining({
        log: 'log',
        ok: false,
        openable: false,
        problems: [expect.objectContaining({ offset: last, severity: 'fatal', reason: 'damaged-tail' })],
      }),
    ]);

    // serve refuses too, and leaves the file as it was.
    const size = readFileSync(seg).length;
    const refused = await serveStandalone(data);
    expect(refused.line).toEqual({ exited: 1 });
    expect(refused.stderr()).toContain('PLX_CHRONACTA_CORRUPT');
    expect(refused.stderr()).toContain(`byte offset ${last}`);
    expect(refused.stderr()).not.toMatch(STACK);
    expect(readFileSync(seg).length).toBe(size);

    // On purpose: serve --truncate-damaged-tail drops it (saying so) and serves the other two.
    const repairedByServe = join(tmp, 'standalone-serve-repair');
    cpSync(data, repairedByServe, { recursive: true });
    const r = await serveStandalone(repairedByServe, ['--truncate-damaged-tail']);
    expect(r.line).toMatchObject({ lastPosition: 2 });
    expect(r.stderr()).toContain('damaged-tail');
    await stopChild(r.child);
    expect(await r.exited).toBe(0);

    // verify --truncate-damaged-tail: reports what it dropped, then a sound log.
    const fixed = await cli('verify', data, '--truncate-damaged-tail');
    expect(fixed.code, fixed.stderr).toBe(0);
    const out = lines(fixed.stdout);
    expect(out[0]).toMatchObject({
      event: 'truncated-damaged-tail',
      log: 'log',
      dropped: [expect.objectContaining({ offset: last, reason: 'damaged-tail' })],
    });
    expect(out[1]).toMatchObject({ log: 'log', ok: true, records: 2, last: 2 });

    // A record cut short by the end of the file is a torn write: cut with a warning, as before.
    const tornSeg = segmentOf(join(torn, 'log'));
    truncateSync(tornSeg, readFileSync(tornSeg).length - 3);
    const tv = await cli('verify', torn);
    expect(tv.code, tv.stderr).toBe(0);
    expect(lines(tv.stdout)[0]).toMatchObject({
      ok: false,
      openable: true,
      records: 2,
      problems: [expect.objectContaining({ offset: last, severity: 'repairable', reason: 'torn-tail' })],
    });
    const t = await serveStandalone(torn);
    expect(t.line).toMatchObject({ lastPosition: 2 });
    expect(t.stderr()).toContain('torn-tail');
    await stopChild(t.child);
  }, 120_000);
});

describe('verify on a cluster member', () => {
  it('checks the replicated log and the Raft journal, and fails naming a flipped byte in either', async () => {
    const root = join(tmp, 'cluster');
    const { init, data } = await initOneMember(root);
    expect(init.code, init.stderr).toBe(0);
    const m = await spawnServe(1, data, [], children);
    const client = new ChronactaClient(m.address, { deadlineMs: 5000 });
    try {
      await until(async () => ((await client.clusterStatus()).acceptingWrites ? true : undefined), {
        timeoutMs: 20_000,
        what: 'a leader',
        intervalMs: 25,
      });
      for (let i = 0; i < 5; i++) await client.append(`s-${i}`, [{ type: 't', data: `e${i}` }]);
    } finally {
      client.close();
    }
    await stopChild(m.child);

    const sound = await cli('verify', data);
    expect(sound.code, sound.stderr).toBe(0);
    const logs = lines(sound.stdout);
    // log/ is empty on a member: not checked. The member's logs are.
    expect(logs.map((l) => l.log)).toEqual(['raft-log', 'replica-log']);
    for (const l of logs) expect(l).toMatchObject({ ok: true, openable: true });
    expect(logs[1]).toMatchObject({ records: 5, last: 5 });

    for (const [kind, sub] of [
      ['replica-log', ['replica', 'log']],
      ['raft-log', ['replica', 'raft']],
    ] as const) {
      const copy = join(tmp, `cluster-${kind}`);
      cpSync(data, copy, { recursive: true });
      const seg = segmentOf(join(copy, ...sub));
      const offs = recordOffsets(seg);
      // A byte of an early record, then (in another copy) of the last one.
      flip(seg, (offs[1] as number) + 48);
      const v = await cli('verify', copy);
      expect(v.code, v.stdout).toBe(1);
      expect(v.stderr).toContain('PLX_STORAGE_CORRUPT');
      expect(v.stderr).toContain(seg);
      expect(v.stderr).toContain(`byte offset ${offs[1]}`);
      expect(v.stderr).not.toMatch(STACK);
      expect(lines(v.stdout).find((l) => l.log === kind)).toMatchObject({ ok: false, openable: false });

      const copyLast = join(tmp, `cluster-${kind}-last`);
      cpSync(data, copyLast, { recursive: true });
      const segLast = segmentOf(join(copyLast, ...sub));
      const lastOff = recordOffsets(segLast).at(-1) as number;
      flip(segLast, lastOff + 48);
      const vl = await cli('verify', copyLast);
      expect(vl.code).toBe(1);
      expect(vl.stderr).toContain(`${segLast} is damaged at byte offset ${lastOff} (damaged-tail)`);
    }
  }, 120_000);
});

describe('verify on what is not a data directory', () => {
  it('refuses an empty directory, a file and a missing path with PLX_CHRONACTA_BAD_DATA_DIR', async () => {
    const empty = join(tmp, 'empty');
    mkdirSync(join(empty, 'log'), { recursive: true });
    const file = join(tmp, 'a-file');
    writeFileSync(file, 'x');
    for (const dir of [empty, file, join(tmp, 'missing')]) {
      const v = await cli('verify', dir);
      expect(v.code, dir).toBe(1);
      expect(v.stderr).toContain('PLX_CHRONACTA_BAD_DATA_DIR');
      expect(v.stderr).not.toMatch(STACK);
      expect(v.stdout).toBe('');
    }
  });
});
