/**
 * Every `plexus chronacta` subcommand with bad arguments and bad files, in real processes
 * (dist/cli/main.js; run `npm run build` first): each ends with its documented exit code (2 for
 * a usage mistake, 1 with a PLX_* code for a refused input or data directory), never with a
 * stack trace, an "unexpected failure", or a hang.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAIN } from '../chronacta-cluster/helpers.js';
import { runNode } from '../helpers/processes.js';

const tmp = mkdtempSync(join(tmpdir(), 'plexus-chronacta-errors-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const file = join(tmp, 'a-file');
writeFileSync(file, 'not a directory');
const notJson = join(tmp, 'not.json');
writeFileSync(notJson, '{bad');
const object = join(tmp, 'object.json');
writeFileSync(object, '{"type":"t"}');
const untyped = join(tmp, 'untyped.json');
writeFileSync(untyped, '[{"data":1}]');
const empty = join(tmp, 'empty');
mkdirSync(join(empty, 'log'), { recursive: true });
/** Nothing listens here: the cases below must be refused before any call goes out. */
const NOBODY = ['--server', '127.0.0.1:1'];

/** `plexus chronacta ...args`; SIGKILLed by its PID after 20 s (a hang fails the test). */
function run(args: readonly string[]): Promise<{ code: number | null; stderr: string; hung: boolean }> {
  // runNode SIGKILLs it by PID past timeoutMs: the signal then says it hung.
  return runNode(MAIN, ['chronacta', ...args], { timeoutMs: 20_000 }).then((r) => ({
    code: r.code,
    stderr: r.stderr,
    hung: r.signal === 'SIGKILL',
  }));
}

type Case = readonly [args: readonly string[], exit: 1 | 2, code: RegExp];
const USAGE = /PLX_CLI_USAGE|plexus chronacta --help/;

const cases: Case[] = [
  // serve: data directories that cannot be one, and numbers out of range.
  [['serve', '--data', file, '--port', '0', '--metrics-port', '0'], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  [['serve', '--data', join(file, 'sub'), '--port', '0', '--metrics-port', '0'], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  // Node's recursive mkdir spins forever under /proc; this must fail at once instead.
  [['serve', '--data', '/proc/nope', '--port', '0', '--metrics-port', '0'], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  [['serve', '--cluster', '--data', '/proc/nope'], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  [['serve', '--data', join(tmp, 'd'), '--port', '70000'], 2, USAGE],
  [['serve', '--data', join(tmp, 'd'), '--metrics-port', '99999'], 2, USAGE],
  [['serve', '--data', join(tmp, 'd'), '--segment-bytes', '1'], 2, USAGE],
  [['serve', '--data', join(tmp, 'd'), '--compact-every-ms', '0'], 2, USAGE],
  [['serve', '--data', join(tmp, 'd'), '--compact-every-ms', '99999999999'], 2, USAGE],
  [['serve', '--cluster', '--data', join(tmp, 'd'), '--tick-ms', '99999999999999999999'], 2, USAGE],
  [['serve', '--fsync', 'sometimes'], 2, USAGE],
  // append: --events files that are missing, a directory, not JSON, not events, endless.
  [['append', 's', '--events', join(tmp, 'missing.json'), ...NOBODY], 1, /PLX_CHRONACTA_BAD_INPUT/],
  [['append', 's', '--events', tmp, ...NOBODY], 1, /PLX_CHRONACTA_BAD_INPUT/],
  [['append', 's', '--events', notJson, ...NOBODY], 1, /PLX_CHRONACTA_BAD_INPUT/],
  [['append', 's', '--events', object, ...NOBODY], 1, /PLX_CHRONACTA_BAD_INPUT/],
  [['append', 's', '--events', untyped, ...NOBODY], 1, /PLX_CHRONACTA_BAD_INPUT/],
  [['append', 's', '--events', '/dev/zero', ...NOBODY], 1, /PLX_CHRONACTA_TOO_LARGE/],
  [['append', 's', '--type', 't', '--server', 'nohost'], 2, USAGE],
  [['append', 's', '--type', 't', '--server', '127.0.0.1:99999'], 2, USAGE],
  [['append', 's', '--type', 't', '--expected-version', 'soon', ...NOBODY], 2, USAGE],
  // read and subscribe: numbers beyond 2^53 - 1 and bad choices.
  [['read', 's', '--max-count', '99999999999999999999', ...NOBODY], 2, USAGE],
  [['read', '--all', '--consistency', 'eventual', ...NOBODY], 2, USAGE],
  [['subscribe', 's', '--count', '99999999999999999999', ...NOBODY], 2, USAGE],
  [['subscribe', 's', '--from', 'yesterday', ...NOBODY], 2, USAGE],
  // verify and migrate: not a data directory.
  [['verify', file], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  [['verify', join(tmp, 'missing')], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  [['verify', empty], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  [['verify'], 2, USAGE],
  [['migrate', '--data', file], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  // cluster subcommands.
  [['cluster', 'init', '--members', '3', '--root', file], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  [['cluster', 'init', '--members', '3', '--root', '/proc/nope'], 1, /PLX_CHRONACTA_BAD_DATA_DIR/],
  [['cluster', 'init', '--members', '3', '--root', join(tmp, 'c'), '--base-port', '70000'], 2, USAGE],
  [['cluster', 'init', '--members', '0', '--root', join(tmp, 'c')], 2, USAGE],
  [['cluster', 'init', '--members', '3', '--root', join(tmp, 'c'), '--raft', 'a,b,c'], 2, USAGE],
  [['cluster', 'status', '--server', 'nohost'], 2, USAGE],
  [
    ['cluster', 'add', ...NOBODY, '--id', '4', '--raft-address', '127.0.0.1:99999', '--advertise', '127.0.0.1:6'],
    2,
    USAGE,
  ],
  [['cluster', 'add', ...NOBODY, '--id', '4', '--raft-address', '127.0.0.1:5', '--advertise', '127.0.0.1:0'], 2, USAGE],
  [['cluster', 'remove', ...NOBODY, '--id', '0'], 2, USAGE],
  [['cluster', 'promote', ...NOBODY, '--id', '2', '--catch-up-ms', '0'], 2, USAGE],
  [['cluster', 'transfer', ...NOBODY, '--to', '0'], 2, USAGE],
  [['cluster', 'join-files', ...NOBODY, '--id', '4', '--raft-address', '127.0.0.1:5'], 2, USAGE],
  [['cluster', 'frob'], 2, USAGE],
];

describe('plexus chronacta with bad arguments and bad files', () => {
  it('ends every case with its exit code and error code, no stack trace, no hang', async () => {
    const failures: string[] = [];
    // A few at a time: the machine is shared.
    for (let i = 0; i < cases.length; i += 4) {
      const batch = cases.slice(i, i + 4);
      const results = await Promise.all(batch.map(([args]) => run(args)));
      batch.forEach(([args, exit, code], k) => {
        const r = results[k] as Awaited<ReturnType<typeof run>>;
        const what = `plexus chronacta ${args.join(' ')}`;
        if (r.hung) failures.push(`${what}: hung`);
        else if (r.code !== exit) failures.push(`${what}: exit ${r.code}, expected ${exit}: ${r.stderr}`);
        else if (!code.test(r.stderr)) failures.push(`${what}: stderr lacks ${code}: ${r.stderr}`);
        else if (/^\s+at /m.test(r.stderr) || r.stderr.includes('unexpected failure')) {
          failures.push(`${what}: a stack trace: ${r.stderr}`);
        }
      });
    }
    expect(failures).toEqual([]);
  }, 300_000);
});
