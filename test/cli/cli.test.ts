import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fnv1a64 } from '../../ts/core/index.js';
import { PLEXUS_BIN, runPlexus } from '../helpers/processes.js';

const BIN = PLEXUS_BIN;
const plexus = (...args: string[]) => runPlexus(args, { timeoutMs: 60_000 });
const tmp = mkdtempSync(join(tmpdir(), 'plexus-cli-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('the plexus command', () => {
  it('is built (npm run build)', () => {
    expect(existsSync(BIN), `${BIN} is missing: run npm run build`).toBe(true);
  });

  it('--help lists the subcommands, each has its own help', async () => {
    const r = await plexus('--help');
    expect(r.code).toBe(0);
    for (const c of ['demo', 'shard', 'hash']) expect(r.stdout).toContain(c);
    const s = await plexus('shard', '--help');
    expect(s.code).toBe(0);
    expect(s.stdout).toContain('--shards');
    expect((await plexus('help', 'hash')).stdout).toContain('--alg');
  });

  it('prints the version', async () => {
    expect((await plexus('--version')).stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('shard prints shard hash version 1', async () => {
    const r = await plexus('shard', 'vt:orders/1234', 'vt:users/ada', '--shards', '256');
    expect(r.code).toBe(0);
    const want = (iri: string) => Number(fnv1a64(iri) % 256n);
    expect(r.stdout).toBe(`${want('vt:orders/1234')}\tvt:orders/1234\n${want('vt:users/ada')}\tvt:users/ada\n`);
    const j = JSON.parse((await plexus('shard', 'x', '-n', '4', '--json')).stdout);
    expect(j).toEqual({ iri: 'x', shard: want('x') % 4, fnv1a64: fnv1a64('x').toString(16).padStart(16, '0') });
  });

  it('refuses bad usage with exit 2 and bad values with the error code', async () => {
    const unknown = await plexus('frobnicate');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command');
    const missing = await plexus('shard', 'x');
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--shards');
    const bad = await plexus('shard', 'x', '--shards', '3');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('PLX_CORE_BAD_SHARD_COUNT');
    expect((await plexus('shard', 'x', '--shards', 'many')).code).toBe(2);
    expect((await plexus('shard', '--bogus')).code).toBe(2);
  });

  it('hash digests files like sha256sum, and reports unreadable ones', async () => {
    const f = join(tmp, 'a.txt');
    writeFileSync(f, 'abc');
    const r = await plexus('hash', f);
    expect(r.stdout).toBe(`ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  ${f}\n`);
    expect((await plexus('hash', '--alg', 'crc32c', f)).stdout).toBe(`364b3fb7  ${f}\n`);
    const missing = await plexus('hash', join(tmp, 'nope'));
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('ENOENT');
    expect((await plexus('hash', '--alg', 'md5', f)).code).toBe(2);
  });

  it('demo runs the tour and shows both backends agree', async () => {
    const r = await plexus('demo', '--quick');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('[10/10]');
    expect(r.stdout).toMatch(/killed the leader, node \d \(pid \d+, term \d+\), with SIGKILL/);
    expect(r.stdout).toContain('each present exactly once at its position, nothing else');
    expect(r.stdout).toContain('rebuilt by replay: {"count":11,"total":51}');
    expect(r.stdout).toMatch(/500 actors got one message each, \d+ of them from another node/);
    expect(r.stdout).toMatch(/sent 300 messages to counters and got 300 replies back/);
    expect(r.stdout).toContain('duplicate=true');
    expect(r.stdout).toContain('read back: 0:OrderPlaced, 1:OrderPaid');
    expect(r.stdout).toMatch(/\[rank 0\] pi ~ 3\.14/);
    expect(r.stdout).toContain('every rank finished');
    expect(r.stdout).not.toContain('identical: false');
    expect(r.stdout).toContain('identical: true');
    expect(r.stdout).toContain('length too long');
    // Beyond the command's own 60 s limit, so that a slow tour fails with its output.
  }, 90_000);
});
