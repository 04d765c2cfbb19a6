import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isLocalHost, launch, parseHostsFile } from '../../ts/sperli/launcher.js';
import { runPlexus, stopStarted } from '../helpers/processes.js';

const tmp = mkdtempSync(join(tmpdir(), 'plexus-launch-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterAll(() => stopStarted());
const plexus = (args: string[], env: Record<string, string> = {}) =>
  runPlexus(args, { timeoutMs: 60_000, env: { ...process.env, ...env } });

const code = async (p: Promise<unknown>) => {
  try {
    await p;
    return 'none';
  } catch (e) {
    return `${(e as { code: string }).code}:${(e as { details?: { reason?: string } }).details?.reason ?? ''}`;
  }
};

describe('hosts files', () => {
  it('parse host[:port] per line, skipping blanks and comments', () => {
    expect(parseHostsFile('127.0.0.1:7000\n\n# two\nnode-b.example\n127.0.0.3:7002 # three\n')).toEqual([
      { name: '127.0.0.1', port: 7000 },
      { name: 'node-b.example' },
      { name: '127.0.0.3', port: 7002 },
    ]);
    expect(() => parseHostsFile('a:b:c')).toThrow(/line 1/);
    expect(() => parseHostsFile('x\nhost:70000')).toThrow(/line 2.*port/);
  });

  it('know which hosts are this machine', () => {
    expect(isLocalHost('127.0.0.5')).toBe(true);
    expect(isLocalHost('localhost')).toBe(true);
    expect(isLocalHost('node-b.example')).toBe(false);
  });
});

describe('the launcher refuses before starting anything', () => {
  const cmd = [process.execPath, '-e', 'process.exit(9)'];
  it('a reserved or refused host, even when listed', async () => {
    expect(await code(launch({ command: cmd, hostsText: '127.0.0.1\nhost-a.invalid\n' }))).toBe('H1610:refused-host');
    expect(await code(launch({ command: cmd, hostsText: 'n1.HOST-B.invalid\n' }))).toBe('H1610:refused-host');
    expect(
      await code(
        launch({ command: cmd, hostsText: '127.0.0.1\n127.0.0.2\n', env: { SPERLI_REFUSED_HOSTS: '127.0.0.2' } }),
      ),
    ).toBe('H1610:refused-host');
    const deny = join(tmp, 'deny');
    writeFileSync(deny, '# lab machines\n127.0.0.3\n');
    expect(await code(launch({ command: cmd, hostsText: '127.0.0.1\n127.0.0.3\n', denyFile: deny }))).toBe(
      'H1610:refused-host',
    );
    // a missing deny file leaves the variable's names and the reserved names refused
    expect(
      await code(
        launch({
          command: cmd,
          hostsText: '127.0.0.2\n',
          denyFile: join(tmp, 'missing'),
          env: { SPERLI_REFUSED_HOSTS: '127.0.0.2' },
        }),
      ),
    ).toBe('H1610:refused-host');
  });

  it('too few hosts, a bad size, a remote host without a remote-start command', async () => {
    expect(await code(launch({ command: cmd, size: 3, hostsText: '127.0.0.1\n' }))).toBe('PLX_SPERLI_LAUNCH:');
    expect(await code(launch({ command: cmd, size: 0 }))).toBe('PLX_SPERLI_LAUNCH:');
    expect(await code(launch({ command: cmd, size: 5000 }))).toBe('PLX_SPERLI_LAUNCH:');
    expect(await code(launch({ command: cmd, hostsText: 'node-b.example\n' }))).toBe('PLX_SPERLI_LAUNCH:');
    expect(await code(launch({ command: [], size: 1 }))).toBe('PLX_SPERLI_LAUNCH:');
  });
});

describe('plexus sperli launch (command line)', () => {
  it('has a --help and refuses bad usage with exit 2', async () => {
    const h = await plexus(['sperli', '--help']);
    expect(h.code).toBe(0);
    expect(h.stdout).toContain('--deny-hosts');
    expect((await plexus(['sperli', 'launch', '-n', '2'])).code).toBe(2);
    expect((await plexus(['sperli', 'launch', '-n', 'two', '--', 'node'])).code).toBe(2);
    expect((await plexus(['sperli', 'frobnicate'])).code).toBe(2);
  });

  it('returns the status of a job whose ranks fail, naming the rank', async () => {
    const r = await plexus([
      'sperli',
      'launch',
      '-n',
      '2',
      '--',
      process.execPath,
      '-e',
      'process.exit(Number(process.env.X ?? 4))',
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/failed at rank \d: rank \d exited with status 4/);
  });

  it('forwards output with a [rank n] prefix and exits 0 when every rank does', async () => {
    const r = await plexus([
      'sperli',
      'launch',
      '-n',
      '3',
      '--',
      process.execPath,
      '-e',
      "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{console.log('line', s.trim().length > 100, /^[0-9a-f]+$/.test(s.trim()))})",
    ]);
    expect(r.code, r.stderr).toBe(0);
    for (const n of [0, 1, 2]) expect(r.stdout).toContain(`[rank ${n}] line true true`);
  });
});

describe('ranks on other hosts', () => {
  it('are started through the remote-start command with {host} replaced, the job line on stdin', async () => {
    const log = join(tmp, 'remote.log');
    // A stand-in for `ssh {host}`: records the host and the command line it was given and
    // the first bytes of its standard input, then fails so that the job ends. Each host writes
    // a file of its own: the two run at once, and their lines must not interleave.
    const remote = `sh -c 'f=${log}.$0; echo "host=$0 args=$*" >> $f; head -c 16 >> $f; echo >> $f; exit 7' {host}`;
    const out: string[] = [];
    const r = await launch({
      command: ['node', 'job.mjs', 'a b'],
      hostsText: 'node-a.example\nnode-b.example:9000\n',
      remote,
      silenceMs: 500,
      stdout: (t) => out.push(t),
      stderr: (t) => out.push(t),
    });
    expect(r.exitCode).toBe(1);
    expect(r.ranks.map((x) => x.code)).toEqual([7, 7]);
    const { readFileSync } = await import('node:fs');
    const text = ['node-a.example', 'node-b.example'].map((h) => readFileSync(`${log}.${h}`, 'utf8')).join('');
    expect(text).toContain('host=node-a.example args=env SPERLI_SILENCE_MS=500 node job.mjs a b');
    expect(text).toContain('host=node-b.example');
    expect(text).toMatch(/\n[0-9a-f]{16}\n/);
  });
});
