/**
 * `plexus chronacta` in real processes: serve (stopped with SIGTERM), append, read and
 * subscribe through it with JSON output, verify on the data directory, and the exit codes
 * of bad usage and refused calls.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileForChild, runCli, serveChild, tempDir } from './helpers.js';

let compiled: { commandUrl: string; remove: () => Promise<void> };
let tmp: { dir: string; remove: () => Promise<void> };

beforeAll(async () => {
  compiled = await compileForChild();
  tmp = await tempDir('cli');
});
afterAll(async () => {
  await compiled?.remove();
  await tmp?.remove();
});

const lines = (s: string) =>
  s
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('plexus chronacta', () => {
  it('serves, appends, reads, subscribes and verifies', async () => {
    const data = join(tmp.dir, 'data');
    const cli = (...args: string[]) => runCli(compiled.commandUrl, args);
    const server = await serveChild(compiled.commandUrl, ['--data', data, '--port', '0', '--metrics-port', '0']);
    try {
      const at = ['--server', server.address];
      const a = await cli(
        'append',
        'orders-1',
        '--type',
        'placed',
        '--data',
        '{"total":3}',
        '--expected-version',
        'no_stream',
        ...at,
      );
      expect(a.code, a.stderr).toBe(0);
      expect(lines(a.stdout)[0]).toMatchObject({
        stream: 'orders-1',
        firstVersion: 0,
        firstPosition: 1,
        duplicate: false,
      });
      const file = join(tmp.dir, 'events.json');
      await writeFile(
        file,
        JSON.stringify([
          { type: 'paid', data: { amount: 3 } },
          { type: 'shipped', data: 'box 7' },
        ]),
      );
      const b = await cli(
        'append',
        'orders-1',
        '--events',
        file,
        '--expected-version',
        '0',
        '--idempotency-key',
        'k',
        ...at,
      );
      expect(lines(b.stdout)[0]).toMatchObject({ firstVersion: 1, lastVersion: 2 });
      const fromStdin = await runCli(
        compiled.commandUrl,
        ['append', 'orders-2', '--events', '-', ...at],
        JSON.stringify([{ type: 'x' }]),
      );
      expect(lines(fromStdin.stdout)[0]).toMatchObject({ stream: 'orders-2', firstPosition: 4 });

      const r = await cli('read', 'orders-1', ...at);
      const out = lines(r.stdout);
      expect(out.slice(0, 3).map((e) => [e.version, e.type, e.data])).toEqual([
        [0, 'placed', '{"total":3}'],
        [1, 'paid', '{"amount":3}'],
        [2, 'shipped', 'box 7'],
      ]);
      expect(out[3]).toMatchObject({ end: true, lastVersion: 2 });
      const back = lines((await cli('read', '--all', '--backwards', '--max-count', '2', ...at)).stdout);
      expect(back.slice(0, 2).map((e) => e.position)).toEqual([4, 3]);
      const typed = lines((await cli('read', '--all', '--type', 'paid', '--type', 'x', ...at)).stdout);
      expect(typed.slice(0, -1).map((e) => e.type)).toEqual(['paid', 'x']);

      const sub = await cli('subscribe', '--all', '--from', '2', '--count', '3', ...at);
      expect(sub.code, sub.stderr).toBe(0);
      expect(lines(sub.stdout).map((e) => e.position)).toEqual([2, 3, 4]);

      const wrong = await cli('append', 'orders-1', '--type', 't', '--expected-version', '0', ...at);
      expect(wrong.code).toBe(1);
      expect(wrong.stderr).toContain('PLX_CHRONACTA_WRONG_EXPECTED_VERSION');
      expect(wrong.stderr).toContain('last version is 2');
    } finally {
      server.child.kill('SIGTERM');
    }
    const { code } = await server.exited;
    expect(code).toBe(0);
    expect(server.stdout()).toContain('"event":"stopped"');
    const v = await runCli(compiled.commandUrl, ['verify', data]);
    expect(v.code, v.stderr).toBe(0);
    expect(lines(v.stdout)[0]).toMatchObject({ ok: true, openable: true, records: 4, first: 1, last: 4 });
  }, 60_000);

  it('refuses bad usage with exit 2', async () => {
    const cli = (...args: string[]) => runCli(compiled.commandUrl, args);
    const results = await Promise.all([
      cli(),
      cli('frobnicate'),
      cli('append'),
      cli('append', 's'),
      cli('read'),
      cli('read', 's', '--all'),
      cli('append', 's', '--type', 't', '--expected-version', 'soon'),
      cli('serve', '--port', 'many'),
      cli('serve', '--heap-growing-percent', '1001'),
      cli('serve', '--heap-growing-percent', 'lots'),
      cli('verify'),
    ]);
    for (const r of results) {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain('plexus chronacta --help');
    }
  });

  it('sets the heap growing factor unless node was given one, and says so when it serves', async () => {
    const serving = async (args: string[], nodeArgs: string[] = []) => {
      const server = await serveChild(
        compiled.commandUrl,
        [
          '--data',
          join(tmp.dir, `heap-${args.join('')}-${nodeArgs.join('')}`),
          '--port',
          '0',
          '--metrics-port',
          '0',
          ...args,
        ],
        nodeArgs,
      );
      server.child.kill('SIGTERM');
      expect((await server.exited).code).toBe(0);
      return lines(server.stdout())[0]?.heapGrowingPercent;
    };
    expect(await serving([])).toBe(300);
    expect(await serving(['--heap-growing-percent', '150'])).toBe(150);
    expect(await serving(['--heap-growing-percent', '0'])).toBe('v8');
    expect(await serving([], ['--heap-growing-percent=50'])).toBe('node');
  }, 60_000);

  it('reports a server it cannot reach with the error code, exit 1', async () => {
    const r = await runCli(compiled.commandUrl, ['read', '--all', '--server', '127.0.0.1:1']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/PLX_CHRONACTA_(UNAVAILABLE|TIMEOUT)/);
  });
});
