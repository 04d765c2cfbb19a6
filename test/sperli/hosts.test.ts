import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REFUSED_HOSTS_VARIABLE, RESERVED_HOSTS, refusedHosts } from '../../ts/sperli/hosts.js';
import { thrownRefusal } from '../helpers/refusal.js';

const dir = mkdtempSync(join(tmpdir(), 'plexus-hosts-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function denyFile(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

describe('refused hosts: the reserved names', () => {
  it('always refuses host-a.invalid and host-b.invalid and the domains below them', () => {
    expect(RESERVED_HOSTS).toEqual(['host-a.invalid', 'host-b.invalid']);
    for (const h of [refusedHosts(), refusedHosts({}), refusedHosts({ env: undefined }), refusedHosts({ env: '' })]) {
      expect(h.isRefused('host-a.invalid')).toBe(true);
      expect(h.isRefused('HOST-B.INVALID')).toBe(true);
      expect(h.isRefused('host-a.invalid.')).toBe(true);
      expect(h.isRefused('x.host-b.invalid')).toBe(true);
      expect(h.isRefused('host-c.invalid')).toBe(false);
      expect(h.isRefused('invalid')).toBe(false);
      expect(h.isRefused('example.com')).toBe(false);
      expect(h.isRefused('127.0.0.1')).toBe(false);
      expect(h.names.map((n) => n.name)).toEqual(['host-a.invalid', 'host-b.invalid']);
    }
  });

  it('refuses them even when the variable and the file name nothing or are missing', () => {
    const h = refusedHosts({ env: ' ,\n ', denyFile: join(dir, 'missing') });
    expect(h.isRefused('host-a.invalid')).toBe(true);
    expect(h.refusal('host-b.invalid')).toEqual({ name: 'host-b.invalid', source: 'reserved' });
  });
});

describe(`refused hosts: ${REFUSED_HOSTS_VARIABLE}`, () => {
  it('splits names at commas, blanks and line ends', () => {
    const h = refusedHosts({ env: 'a.test,b.test  c.test\nd.test\r\ne.test\tf.test,,\n' });
    for (const n of ['a.test', 'b.test', 'c.test', 'd.test', 'e.test', 'f.test']) expect(h.isRefused(n), n).toBe(true);
    expect(h.isRefused('g.test')).toBe(false);
    expect(h.names.filter((n) => n.source === 'environment').map((n) => n.name)).toEqual([
      'a.test',
      'b.test',
      'c.test',
      'd.test',
      'e.test',
      'f.test',
    ]);
  });

  it('refuses a name and every domain below it, in any letter case, not look-alikes', () => {
    const h = refusedHosts({ env: 'Example.COM' });
    expect(h.isRefused('example.com')).toBe(true);
    expect(h.isRefused('EXAMPLE.com')).toBe(true);
    expect(h.isRefused('a.example.com')).toBe(true);
    expect(h.isRefused('A.B.Example.Com')).toBe(true);
    expect(h.isRefused('badexample.com')).toBe(false);
    expect(h.isRefused('example.com.au')).toBe(false);
    expect(h.isRefused('example.co')).toBe(false);
    expect(h.isRefused('com')).toBe(false);
    expect(h.isRefused('aexample.com')).toBe(false);
  });

  it('ignores trailing dots on either side', () => {
    const h = refusedHosts({ env: 'example.com.' });
    expect(h.isRefused('example.com')).toBe(true);
    expect(h.isRefused('a.example.com.')).toBe(true);
    expect(refusedHosts({ env: 'example.com' }).isRefused('example.com.')).toBe(true);
    expect(refusedHosts({ env: 'example.com' }).isRefused('example.com..')).toBe(true);
  });

  it('takes a leading "*." or "." as the domain itself', () => {
    const h = refusedHosts({ env: '*.example.com .example.org' });
    expect(h.isRefused('a.example.com')).toBe(true);
    expect(h.isRefused('example.com')).toBe(true);
    expect(h.isRefused('a.example.org')).toBe(true);
  });

  it('refuses a dotted IPv4 address only as itself', () => {
    const h = refusedHosts({ env: '10.0.0.5 0.5' });
    expect(h.isRefused('10.0.0.5')).toBe(true);
    expect(h.isRefused('10.0.0.50')).toBe(false);
    expect(h.isRefused('110.0.0.5')).toBe(false);
    expect(h.isRefused('20.10.0.5')).toBe(false);
  });

  it('a top-level name refuses everything below it', () => {
    const h = refusedHosts({ env: 'test' });
    expect(h.isRefused('a.test')).toBe(true);
    expect(h.isRefused('a.b.test')).toBe(true);
    expect(h.isRefused('testing')).toBe(false);
  });
});

describe('refused hosts: the deny file', () => {
  it('adds one name a line, ignoring blank lines and # comments', () => {
    const file = denyFile(
      'deny.txt',
      '# refused by the operator\n\nbad.example\n  Worse.Example.  \n# not.refused.example\nalso.example # trailing comment\r\n\n',
    );
    const h = refusedHosts({ env: 'env.example', denyFile: file });
    expect(h.isRefused('bad.example')).toBe(true);
    expect(h.isRefused('x.worse.example')).toBe(true);
    expect(h.isRefused('also.example')).toBe(true);
    expect(h.isRefused('not.refused.example')).toBe(false);
    expect(h.isRefused('env.example')).toBe(true);
    expect(h.isRefused('host-a.invalid')).toBe(true);
    expect(h.refusal('a.bad.example')).toEqual({ name: 'bad.example', source: 'deny-file', file });
    expect(h.names.filter((n) => n.source === 'deny-file').map((n) => n.name)).toEqual([
      'bad.example',
      'worse.example',
      'also.example',
    ]);
  });

  it('an empty or missing file keeps the variable and the reserved names refused', () => {
    for (const file of [denyFile('empty.txt', ''), denyFile('comments.txt', '# nothing\n\n'), join(dir, 'nope.txt')]) {
      const h = refusedHosts({ env: 'env.example', denyFile: file });
      expect(h.isRefused('env.example'), file).toBe(true);
      expect(h.isRefused('host-a.invalid'), file).toBe(true);
      expect(h.isRefused('host-b.invalid'), file).toBe(true);
      expect(h.isRefused('other.example'), file).toBe(false);
    }
  });

  it('refuses a deny file that exists but cannot be read, rather than refusing fewer hosts', () => {
    const e = thrownRefusal(() => refusedHosts({ denyFile: dir }));
    expect(e.code).toBe('PLX_SPERLI_DENY_FILE');
    expect(e.details.file).toBe(dir);
  });
});

describe('refused hosts: assertAllowed', () => {
  const file = denyFile('assert.txt', 'filed.example\n');
  const h = refusedHosts({ env: 'Example.COM', denyFile: file });

  it('passes an allowed host', () => {
    expect(() => h.assertAllowed('badexample.com', 'host of rank 1')).not.toThrow();
    expect(() => h.assertAllowed('127.0.0.1', 'host of rank 0')).not.toThrow();
  });

  it('throws H1610 with reason refused-host, naming the host and where it was refused from', () => {
    const e = thrownRefusal(() => h.assertAllowed('A.Example.com', 'host of rank 3'));
    expect(e.code).toBe('H1610');
    expect(e.details).toMatchObject({
      reason: 'refused-host',
      host: 'A.Example.com',
      what: 'host of rank 3',
      name: 'example.com',
      source: 'environment',
    });
    expect(e.message).toContain('host of rank 3 A.Example.com');
    expect(e.message).toContain(REFUSED_HOSTS_VARIABLE);

    const r = thrownRefusal(() => h.assertAllowed('host-a.invalid', 'host of rank 0'));
    expect(r.details).toMatchObject({ reason: 'refused-host', source: 'reserved', name: 'host-a.invalid' });
    expect(r.message).toContain('reserved');

    const f = thrownRefusal(() => h.assertAllowed('x.filed.example', 'dialled host'));
    expect(f.details).toMatchObject({ reason: 'refused-host', source: 'deny-file', file, name: 'filed.example' });
    expect(f.message).toContain(file);
  });

  it('the first source wins for a name listed twice', () => {
    const twice = refusedHosts({ env: 'host-a.invalid dup.example', denyFile: denyFile('dup.txt', 'dup.example\n') });
    expect(twice.refusal('host-a.invalid')?.source).toBe('reserved');
    expect(twice.refusal('dup.example')?.source).toBe('environment');
    expect(twice.names.length).toBe(3);
  });
});
