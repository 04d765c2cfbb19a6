/**
 * Every `plexus` subcommand given bad arguments and bad files, as a user would: the real command
 * (dist/cli/main.js) in its own process, in a fresh working directory holding a few fixture files.
 * Each case must end within CASE_TIMEOUT_MS with the documented exit status (docs/cli.md: 2 for a
 * usage mistake, printed as PLX_CLI_USAGE; 1 for a refused input, with its PLX_* code), print no
 * stack trace and no `unexpected failure` or PLX_CLI_INTERNAL (a defect), and leave the working
 * directory exactly as it was (no file or directory made, none changed). Every `--help` answers.
 *
 * The cases run in a small pool of processes at once (in beforeAll); each `it` checks one.
 */
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commands } from '../../ts/cli/registry.js';
import { ROOT } from '../helpers/paths.js';
import { freePort } from '../helpers/ports.js';
import { runPlexus } from '../helpers/processes.js';

const BIN = join(ROOT, 'dist/cli/main.js');
/** Generous for a loaded 2-core machine (a case takes well under a second alone); a hang fails. */
const CASE_TIMEOUT_MS = 20_000;
const POOL = 4;

interface Case {
  name: string;
  args: string[];
  /** Expected exit status: 0 (help), 1 (refused input, coded) or 2 (usage mistake). */
  exit: 0 | 1 | 2;
  /** The code stderr must name (default PLX_CLI_USAGE for exit 2, any PLX_* but PLX_CLI_INTERNAL for 1). */
  code?: string;
}

/** A usage mistake. */
const usage = (name: string, ...args: string[]): Case => ({ name, args, exit: 2 });
/** A refused input (a bad file, a value refused past parsing). */
const refused = (name: string, code: string | undefined, ...args: string[]): Case => ({
  name,
  args,
  exit: 1,
  ...(code ? { code } : {}),
});
const help = (...args: string[]): Case => ({ name: `${args.join(' ')}`, args, exit: 0 });

const M = ['federation', 'mediator'];
const MP = [...M, '--port', '0'];
const L = ['sperli', 'launch'];
const C = ['chronacta'];
const S = ['--server', '127.0.0.1:1'];

const CASES: Case[] = [
  // Help answers everywhere.
  help('--help'),
  help('help'),
  help('help', 'chronacta'),
  ...commands.map((c) => help(c.name, '--help')),
  help('sperli', 'launch', '--help'),
  help('federation', 'mediator', '--help'),
  help('chronacta', 'serve', '--help'),
  help('chronacta', 'cluster', 'init', '--help'),
  help('cluster', 'init', '--help'),
  help('cluster', 'node', '-h'),

  usage('unknown command', 'frobnicate'),
  usage('unknown top-level option', '--bogus'),

  // demo
  usage('demo: unknown option', 'demo', '--bogus'),
  usage('demo: positional', 'demo', 'extra'),
  usage('demo: value for a flag', 'demo', '--quick=1'),

  // shard
  usage('shard: no --shards', 'shard', 'x'),
  usage('shard: --shards without value', 'shard', 'x', '--shards'),
  usage('shard: --shards abc', 'shard', 'x', '--shards', 'abc'),
  usage('shard: --shards -1', 'shard', 'x', '--shards', '-1'),
  usage('shard: no IRI', 'shard', '--shards', '4'),
  usage('shard: unknown option', 'shard', 'x', '-n', '4', '--bogus'),
  refused('shard: --shards 0', 'PLX_CORE_BAD_SHARD_COUNT', 'shard', 'x', '--shards', '0'),
  refused('shard: --shards 3', 'PLX_CORE_BAD_SHARD_COUNT', 'shard', 'x', '--shards', '3'),
  refused('shard: --shards 2^70', 'PLX_CORE_BAD_SHARD_COUNT', 'shard', 'x', '--shards', '1180591620717411303424'),

  // hash
  usage('hash: no file', 'hash'),
  usage('hash: --alg without value', 'hash', '--alg'),
  usage('hash: --alg md5', 'hash', '--alg', 'md5', 'afile'),
  usage('hash: unknown option', 'hash', '--bogus', 'afile'),
  refused('hash: missing file', 'PLX_CLI_IO', 'hash', 'missing'),
  refused('hash: a directory', 'PLX_CLI_IO', 'hash', 'adir'),

  // sperli launch
  usage('sperli: no subcommand', 'sperli'),
  usage('sperli: unknown subcommand', 'sperli', 'nope'),
  usage('sperli launch: no program', ...L),
  usage('sperli launch: program before --', ...L, '-n', '1', 'node'),
  usage('sperli launch: -n abc', ...L, '-n', 'abc', '--', 'node'),
  usage('sperli launch: -n -1', ...L, '-n', '-1', '--', 'node'),
  usage('sperli launch: --silence-ms abc', ...L, '-n', '1', '--silence-ms', 'abc', '--', 'node'),
  usage('sperli launch: --spin-ms 2000', ...L, '-n', '1', '--spin-ms', '2000', '--', 'node'),
  usage('sperli launch: --restart-max x', ...L, '-n', '1', '--restart-max', 'x', '--', 'node'),
  usage('sperli launch: unknown option', ...L, '--bogus', '--', 'node'),
  refused('sperli launch: -n 0', 'PLX_SPERLI_LAUNCH', ...L, '-n', '0', '--', 'node', '-e', '1'),
  refused('sperli launch: -n 5000', 'PLX_SPERLI_LAUNCH', ...L, '-n', '5000', '--', 'node', '-e', '1'),
  refused('sperli launch: --hosts missing', 'PLX_SPERLI_LAUNCH', ...L, '--hosts', 'missing', '--', 'node'),
  refused('sperli launch: --hosts a directory', 'PLX_SPERLI_LAUNCH', ...L, '--hosts', 'adir', '--', 'node'),
  refused('sperli launch: --hosts malformed', 'PLX_SPERLI_LAUNCH', ...L, '--hosts', 'bad.json', '--', 'node'),
  refused(
    'sperli launch: --deny-hosts missing',
    'PLX_SPERLI_DENY_FILE',
    ...L,
    '-n',
    '1',
    '--deny-hosts',
    'missing',
    '--',
    'node',
    '-e',
    '1',
  ),
  refused(
    'sperli launch: --checkpoint-dir a file',
    'PLX_SPERLI_LAUNCH',
    ...L,
    '-n',
    '1',
    '--checkpoint-dir',
    'afile',
    '--',
    'node',
    '-e',
    '1',
  ),

  // federation mediator
  usage('federation: no subcommand', 'federation'),
  usage('federation: unknown subcommand', 'federation', 'nope'),
  usage('mediator: no --port', ...M, '--data', 'd'),
  usage('mediator: --port 70000', ...M, '--port', '70000', '--data', 'd'),
  usage('mediator: --port -1', ...M, '--port', '-1', '--data', 'd'),
  usage('mediator: --port abc', ...M, '--port', 'abc', '--data', 'd'),
  usage('mediator: no --data', ...MP),
  usage('mediator: --fsync sometimes', ...MP, '--data', 'd', '--fsync', 'sometimes'),
  usage('mediator: --url ftp', ...MP, '--data', 'd', '--url', 'ftp://x'),
  usage('mediator: --host with a space', ...MP, '--data', 'd', '--host', 'bad host'),
  usage('mediator: --max-queue 0', ...MP, '--data', 'd', '--max-queue', '0'),
  usage('mediator: --max-message-bytes abc', ...MP, '--data', 'd', '--max-message-bytes', 'abc'),
  usage('mediator: --allow not-a-did', ...MP, '--data', 'd', '--allow', 'not-a-did'),
  usage('mediator: --allow a key id', ...MP, '--data', 'd', '--allow', 'did:example:alice#key-1'),
  usage('mediator: --key-file without --passphrase-env', ...MP, '--data', 'd', '--key-file', 'k'),
  usage(
    'mediator: passphrase variable not set',
    ...MP,
    '--data',
    'd',
    '--key-file',
    'k',
    '--passphrase-env',
    'PLX_TEST_UNSET',
  ),
  usage('mediator: --passphrase-env without --key-file', ...MP, '--data', 'd', '--passphrase-env', 'PLX_TEST_PASS'),
  usage('mediator: positional', ...MP, '--data', 'd', 'extra'),
  refused('mediator: --data a file', 'PLX_MEDIATOR_BAD_INPUT', ...MP, '--data', 'afile'),
  refused(
    'mediator: --data a file, no key file made',
    'PLX_MEDIATOR_BAD_INPUT',
    ...MP,
    '--data',
    'afile',
    '--key-file',
    'k',
    '--passphrase-env',
    'PLX_TEST_PASS',
  ),
  refused(
    'mediator: --key-file a directory',
    'PLX_KEYS_BAD_FILE',
    ...MP,
    '--data',
    'd',
    '--key-file',
    'adir',
    '--passphrase-env',
    'PLX_TEST_PASS',
  ),
  refused(
    'mediator: --key-file malformed',
    undefined,
    ...MP,
    '--data',
    'd',
    '--key-file',
    'bad.keys',
    '--passphrase-env',
    'PLX_TEST_PASS',
  ),

  // chronacta
  usage('chronacta: no subcommand', ...C),
  usage('chronacta: unknown subcommand', ...C, 'nope'),
  usage('chronacta serve: unknown option', ...C, 'serve', '--bogus'),
  usage('chronacta serve: positional', ...C, 'serve', 'extra'),
  usage('chronacta serve: --port abc', ...C, 'serve', '--data', 'd', '--port', 'abc'),
  usage('chronacta serve: --port -1', ...C, 'serve', '--data', 'd', '--port', '-1'),
  usage('chronacta serve: --port 70000', ...C, 'serve', '--data', 'd', '--port', '70000', '--metrics-port', '0'),
  usage(
    'chronacta serve: --metrics-port 70000',
    ...C,
    'serve',
    '--data',
    'd',
    '--port',
    '0',
    '--metrics-port',
    '70000',
  ),
  usage('chronacta serve: --fsync x', ...C, 'serve', '--data', 'd', '--fsync', 'x'),
  usage('chronacta serve: --tick-ms 0', ...C, 'serve', '--cluster', '--data', 'd', '--tick-ms', '0'),
  refused(
    'chronacta serve: --data a file',
    undefined,
    ...C,
    'serve',
    '--data',
    'afile',
    '--port',
    '0',
    '--metrics-port',
    '0',
  ),
  refused(
    'chronacta serve: --data /proc/nope',
    undefined,
    ...C,
    'serve',
    '--data',
    '/proc/nope',
    '--port',
    '0',
    '--metrics-port',
    '0',
  ),
  refused(
    'chronacta serve --cluster: --data not a member',
    undefined,
    ...C,
    'serve',
    '--cluster',
    '--data',
    'adir',
    '--metrics-port',
    '0',
  ),
  usage('chronacta verify: no directory', ...C, 'verify'),
  usage('chronacta verify: two directories', ...C, 'verify', 'a', 'b'),
  refused('chronacta verify: missing', undefined, ...C, 'verify', 'missing'),
  refused('chronacta verify: a file', undefined, ...C, 'verify', 'afile'),
  refused('chronacta verify: an empty directory', undefined, ...C, 'verify', 'adir'),
  usage('chronacta migrate: positional', ...C, 'migrate', 'extra'),
  refused('chronacta migrate: missing', 'PLX_CHRONACTA_BAD_DATA_DIR', ...C, 'migrate', '--data', 'missing'),
  refused('chronacta migrate: a file', 'PLX_CHRONACTA_BAD_DATA_DIR', ...C, 'migrate', '--data', 'afile'),
  usage('chronacta append: no stream', ...C, 'append'),
  usage('chronacta append: no --type', ...C, 'append', 's', ...S),
  usage(
    'chronacta append: --expected-version weird',
    ...C,
    'append',
    's',
    '--type',
    't',
    '--expected-version',
    'weird',
    ...S,
  ),
  usage('chronacta append: --events and --type', ...C, 'append', 's', '--type', 't', '--events', 'afile', ...S),
  refused('chronacta append: --events missing', undefined, ...C, 'append', 's', '--events', 'missing.json', ...S),
  refused('chronacta append: --events a directory', undefined, ...C, 'append', 's', '--events', 'adir', ...S),
  refused('chronacta append: --events malformed', undefined, ...C, 'append', 's', '--events', 'bad.json', ...S),
  refused('chronacta append: --events not events', undefined, ...C, 'append', 's', '--events', 'array.json', ...S),
  usage('chronacta read: no stream', ...C, 'read'),
  usage('chronacta read: stream and --all', ...C, 'read', 's', '--all'),
  usage('chronacta read: --max-count abc', ...C, 'read', '--all', '--max-count', 'abc'),
  usage('chronacta read: --consistency x', ...C, 'read', '--all', '--consistency', 'x'),
  usage('chronacta subscribe: no stream', ...C, 'subscribe'),
  usage('chronacta subscribe: --count abc', ...C, 'subscribe', '--all', '--count', 'abc'),
  usage('chronacta cluster: unknown subcommand', ...C, 'cluster', 'nope'),
  usage('chronacta cluster init: nothing', ...C, 'cluster', 'init'),
  usage('chronacta cluster init: --members 0', ...C, 'cluster', 'init', '--members', '0', '--root', 'r'),
  usage(
    'chronacta cluster init: --base-port 70000',
    ...C,
    'cluster',
    'init',
    '--members',
    '3',
    '--root',
    'r',
    '--base-port',
    '70000',
  ),
  usage(
    'chronacta cluster init: --base-port abc',
    ...C,
    'cluster',
    'init',
    '--members',
    '3',
    '--root',
    'r',
    '--base-port',
    'abc',
  ),
  refused(
    'chronacta cluster init: --root a file',
    undefined,
    ...C,
    'cluster',
    'init',
    '--members',
    '3',
    '--root',
    'afile',
  ),
  usage('chronacta cluster add: --id abc', ...C, 'cluster', 'add', ...S, '--id', 'abc'),
  usage('chronacta cluster join-files: no --id', ...C, 'cluster', 'join-files', '--data', 'd'),
  usage('chronacta cluster remove: no --id', ...C, 'cluster', 'remove'),
  usage('chronacta cluster transfer: --to 0', ...C, 'cluster', 'transfer', ...S, '--to', '0'),
  usage('chronacta cluster promote: --id -1', ...C, 'cluster', 'promote', '--id', '-1'),

  // cluster
  usage('cluster: unknown subcommand', 'cluster', 'nope'),
  usage('cluster init: nothing', 'cluster', 'init'),
  usage('cluster init: --shards abc', 'cluster', 'init', '--dir', 'c', '--id', 'x', '--shards', 'abc', '--nodes', 'a'),
  usage(
    'cluster init: --journal bogus',
    'cluster',
    'init',
    '--dir',
    'c',
    '--id',
    'x',
    '--shards',
    '4',
    '--nodes',
    'a',
    '--journal',
    'bogus',
  ),
  usage(
    'cluster init: --base-port 70000',
    'cluster',
    'init',
    '--dir',
    'c',
    '--id',
    'x',
    '--shards',
    '4',
    '--nodes',
    'a',
    '--base-port',
    '70000',
  ),
  usage(
    'cluster init: --base-port 0',
    'cluster',
    'init',
    '--dir',
    'c',
    '--id',
    'x',
    '--shards',
    '4',
    '--nodes',
    'a',
    '--base-port',
    '0',
  ),
  refused(
    'cluster init: --shards 3',
    undefined,
    'cluster',
    'init',
    '--dir',
    'c',
    '--id',
    'x',
    '--shards',
    '3',
    '--nodes',
    'a',
  ),
  refused(
    'cluster init: duplicate nodes',
    undefined,
    'cluster',
    'init',
    '--dir',
    'c',
    '--id',
    'x',
    '--shards',
    '4',
    '--nodes',
    'a,a',
  ),
  refused(
    'cluster init: --dir a file',
    undefined,
    'cluster',
    'init',
    '--dir',
    'afile',
    '--id',
    'x',
    '--shards',
    '4',
    '--nodes',
    'a',
  ),
  usage('cluster node: no --config', 'cluster', 'node'),
  usage('cluster node: unknown option', 'cluster', 'node', '--bogus'),
  refused('cluster node: config missing', undefined, 'cluster', 'node', '--config', 'missing.json'),
  refused('cluster node: config malformed', undefined, 'cluster', 'node', '--config', 'bad.json'),
  refused('cluster node: config a directory', undefined, 'cluster', 'node', '--config', 'adir'),
  refused('cluster node: config not an object', undefined, 'cluster', 'node', '--config', 'array.json'),
  refused('cluster node: TLS certificate missing', undefined, 'cluster', 'node', '--config', 'node-nocert.json'),
  refused('cluster node: duplicate member ids', undefined, 'cluster', 'node', '--config', 'node-dup.json'),
  refused('cluster node: port 70000', undefined, 'cluster', 'node', '--config', 'node-port.json'),
  refused('cluster node: journal bogus', undefined, 'cluster', 'node', '--config', 'node-journal.json'),
  refused('cluster node: unknown key', undefined, 'cluster', 'node', '--config', 'node-unknown.json'),
  usage('cluster status: no --config', 'cluster', 'status'),
  refused('cluster status: config missing', undefined, 'cluster', 'status', '--config', 'missing.json'),
  refused('cluster status: config malformed', undefined, 'cluster', 'status', '--config', 'bad.json'),
  usage('cluster dead-letters: no directory', 'cluster', 'dead-letters'),
  refused('cluster dead-letters: missing', undefined, 'cluster', 'dead-letters', 'missing'),
  refused('cluster dead-letters: a file', undefined, 'cluster', 'dead-letters', 'afile'),
  refused('cluster dead-letters: not a data directory', undefined, 'cluster', 'dead-letters', 'adir'),
];

/**
 * Cases that fail on this branch because of `plexus chronacta` and `plexus cluster`, which are
 * fixed separately; each is `it.fails` here until those fixes are merged, then moves back.
 */

interface Outcome {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  ms: number;
  changed: string[];
}

let shared: string;
let clusterFiles: string;
const outcomes = new Map<string, Outcome>();

/** name -> type and size of everything under dir (what a case may not change). */
function tree(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const p = join(e.parentPath, e.name);
    const st = statSync(p, { throwIfNoEntry: false });
    out.set(relative(dir, p), st ? (st.isDirectory() ? 'dir' : `file ${st.size}`) : 'gone');
  }
  return out;
}

/** The fixture files every case finds in its working directory. */
function fixtures(dir: string, nodePort: number): void {
  mkdirSync(join(dir, 'adir'));
  writeFileSync(join(dir, 'afile'), 'hello\n');
  writeFileSync(join(dir, 'bad.json'), '{ not json');
  writeFileSync(join(dir, 'array.json'), '[1, 2]');
  writeFileSync(join(dir, 'bad.keys'), '{ not a key file', { mode: 0o600 });
  for (const f of ['cert.pem', 'key.pem']) copyFileSync(join(clusterFiles, 'nodes/a', f), join(dir, f));
  copyFileSync(join(clusterFiles, 'ca.pem'), join(dir, 'ca.pem'));
  const node = {
    meta: { id: 't', shardCount: 4, hashVersion: 1, replicationFactor: 1 },
    self: 'a',
    members: [{ id: 'a', address: `127.0.0.1:${nodePort}` }],
    authority: 'a',
    dataDir: 'data',
    tls: { cert: 'cert.pem', key: 'key.pem', ca: 'ca.pem' },
    journal: 'per-node',
  };
  const variant = (file: string, v: object) => writeFileSync(join(dir, file), JSON.stringify({ ...node, ...v }));
  variant('node-nocert.json', { tls: { cert: 'missing-cert.pem', key: 'key.pem', ca: 'ca.pem' } });
  variant('node-dup.json', {
    members: [
      { id: 'a', address: `127.0.0.1:${nodePort}` },
      { id: 'a', address: `127.0.0.1:${nodePort === 65535 ? nodePort - 1 : nodePort + 1}` },
    ],
  });
  variant('node-port.json', { members: [{ id: 'a', address: '127.0.0.1:70000' }] });
  variant('node-journal.json', { journal: 'bogus' });
  variant('node-unknown.json', { surprise: true });
}

async function runCase(c: Case): Promise<Outcome> {
  const cwd = mkdtempSync(join(shared, 'case-'));
  // Each case's node configs name their own free ports (a node that does start must not collide).
  fixtures(cwd, await freePort());
  const before = tree(cwd);
  const t0 = Date.now();
  const r = await runPlexus(c.args, {
    cwd,
    env: { ...process.env, PLEXUS_DEBUG: '', PLX_TEST_PASS: 'correct horse battery staple', PLX_TEST_UNSET: '' },
    // A case still running then is killed by its PID: it hung.
    timeoutMs: CASE_TIMEOUT_MS,
  });
  const ms = Date.now() - t0;
  const timedOut = r.signal === 'SIGKILL' && ms >= CASE_TIMEOUT_MS;
  const after = tree(cwd);
  const changed = [...new Set([...before.keys(), ...after.keys()])]
    .filter((k) => before.get(k) !== after.get(k))
    .map((k) => `${k}: ${before.get(k) ?? 'absent'} -> ${after.get(k) ?? 'absent'}`)
    .sort();
  rmSync(cwd, { recursive: true, force: true });
  return { status: r.code, signal: r.signal, stdout: r.stdout, stderr: r.stderr, timedOut, ms, changed };
}

beforeAll(async () => {
  expect(existsSync(BIN), `${BIN} is missing: run npm run build`).toBe(true);
  shared = mkdtempSync(join(tmpdir(), 'plexus-bad-input-'));
  clusterFiles = join(shared, 'cluster');
  const init = await runPlexus(
    ['cluster', 'init', '--dir', clusterFiles, '--id', 't', '--shards', '4', '--nodes', 'a'],
    { timeoutMs: 60_000 },
  );
  expect(init.code, init.stderr).toBe(0);
  const queue = [...CASES];
  await Promise.all(
    Array.from({ length: POOL }, async () => {
      for (let c = queue.shift(); c !== undefined; c = queue.shift()) outcomes.set(c.name, await runCase(c));
    }),
  );
}, 900_000);

afterAll(() => {
  if (shared) rmSync(shared, { recursive: true, force: true });
});

function check(c: Case): void {
  const o = outcomes.get(c.name);
  expect(o, 'the case ran').toBeDefined();
  const r = o!;
  const seen = `exit ${r.status} signal ${r.signal} after ${r.ms} ms\nstderr: ${r.stderr.slice(0, 1500)}\nstdout: ${r.stdout.slice(0, 300)}`;
  expect(r.timedOut, `hung (killed after ${CASE_TIMEOUT_MS} ms): ${seen}`).toBe(false);
  expect(r.status, seen).toBe(c.exit);
  expect(r.stderr, seen).not.toMatch(/^\s+at\s/m);
  expect(r.stderr, seen).not.toContain('unexpected failure');
  expect(r.stderr, seen).not.toContain('PLX_CLI_INTERNAL');
  expect(r.changed, `files made or changed: ${seen}`).toEqual([]);
  if (c.exit === 0) {
    expect(r.stdout).toContain('Usage');
    return;
  }
  const code = c.code ?? (c.exit === 2 ? 'PLX_CLI_USAGE' : undefined);
  if (code !== undefined) expect(r.stderr, seen).toContain(code);
  else expect(r.stderr, seen).toMatch(/\b(PLX_[A-Z0-9_]+|H16\d\d)\b/);
}

describe('every plexus subcommand refuses bad arguments and bad files with a documented exit status and a code', () => {
  it('has distinct case names', () => {
    expect(new Set(CASES.map((c) => c.name)).size).toBe(CASES.length);
  });

  for (const c of CASES) {
    const title = `${c.name}: plexus ${c.args.join(' ')} -> exit ${c.exit}`;
    it(title, () => check(c));
  }
});

describe('the command registry', () => {
  it("lists each command with the command's own name and summary", async () => {
    for (const entry of commands) {
      const cmd = await entry.load();
      expect(cmd.name).toBe(entry.name);
      expect(cmd.summary).toBe(entry.summary);
    }
  });

  it('prints a stack trace only with PLEXUS_DEBUG=1', async () => {
    const r = await runPlexus(['shard', 'x', '--shards', '3'], {
      env: { ...process.env, PLEXUS_DEBUG: '1' },
      timeoutMs: 60_000,
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('PLX_CORE_BAD_SHARD_COUNT');
    expect(r.stderr).toMatch(/^\s+at\s/m);
  });
});
