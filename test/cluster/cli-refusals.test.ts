/**
 * `plexus cluster` with bad arguments and bad files, run as the user runs it (dist/cli/main.js
 * as a child process): each is refused with exit status 1 (2 for a usage mistake), a stable
 * PLX_* code on standard error and no stack trace, and ends by itself; `init` over an existing
 * cluster changes no file. Needs `npm run build` first.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openJournal } from '../../ts/runtime/log-journal.js';
import { freePorts } from '../helpers/ports.js';
import { built, type Ran, runPlexus, stopStarted } from '../helpers/processes.js';
import { expectCommandRefusal } from '../helpers/refusal.js';
import { NodeProc } from './actor-procs.js';

// biome-ignore lint/suspicious/noExplicitAny: JSON
type Json = Record<string, any>;

/** `plexus cluster ...args` run to its end (SIGKILLed, so shown as not ending by itself, after 30 s). */
async function plexus(...args: string[]): Promise<Run> {
  const r = await runPlexus(['cluster', ...args], { timeoutMs: 30_000 });
  return { ...r, status: r.code };
}
type Run = Ran & { readonly status: number | null };

let tmp = '';
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'plexus-cluster-cli-'));
});
afterAll(async () => {
  await stopStarted();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

/** Every file under `dir` with its bytes. */
function snapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.set(p.slice(dir.length), readFileSync(p).toString('base64'));
    }
  };
  walk(dir);
  return out;
}

describe.skipIf(!built)('plexus cluster refuses bad input with a code', { timeout: 240_000 }, () => {
  it('init over an existing cluster is refused and changes nothing; --force replaces it', async () => {
    const dir = join(tmp, 'existing');
    const [port] = await freePorts(1);
    const args = ['init', '--dir', dir, '--id', 'c1', '--shards', '8', '--nodes', 'a,b', '--base-port', String(port)];
    expect((await plexus(...args)).status).toBe(0);
    const before = snapshot(dir);
    expect([...before.keys()]).toEqual(
      expect.arrayContaining(['/ca-key.pem', '/ca.pem', '/cluster.meta', '/nodes/a/cert.pem', '/nodes/b/key.pem']),
    );
    const again = await plexus(...args);
    expectCommandRefusal(again, 'PLX_CLUSTER_EXISTS');
    expect(again.stderr).toContain('--force');
    expectCommandRefusal(
      await plexus('init', '--dir', dir, '--id', 'c2', '--shards', '16', '--nodes', 'x'),
      'PLX_CLUSTER_EXISTS',
    );
    expect(snapshot(dir)).toEqual(before);

    const forced = await plexus(...args, '--force');
    expect(forced.status, forced.stderr).toBe(0);
    const after = snapshot(dir);
    for (const f of ['/ca-key.pem', '/ca.pem', '/nodes/a/cert.pem', '/nodes/a/key.pem', '/nodes/b/cert.pem']) {
      expect(after.get(f), f).not.toBe(before.get(f));
    }
  });

  it('init refuses ports outside 1..65535, bad directories, and writes nothing', async () => {
    const dir = join(tmp, 'ports');
    const base = ['init', '--dir', dir, '--id', 'c1', '--shards', '8', '--nodes', 'a,b'];
    // Two nodes from 65535 would run to 65536.
    for (const p of ['70000', '0', '65535']) {
      const r = await plexus(...base, '--base-port', p);
      expectCommandRefusal(r, 'see plexus cluster --help', 2);
      expect(r.stderr).toContain('--base-port takes 1 to 65534 for 2 nodes');
    }
    expectCommandRefusal(await plexus(...base, '--base-port', '-1'), 'see plexus cluster --help', 2);
    expect(existsSync(dir)).toBe(false);
    const file = join(tmp, 'a-file');
    writeFileSync(file, 'x');
    expectCommandRefusal(
      await plexus('init', '--dir', file, '--id', 'c1', '--shards', '8', '--nodes', 'a'),
      'PLX_CLUSTER_BAD_PATH',
    );
    expectCommandRefusal(
      await plexus('init', '--dir', join(file, 'sub'), '--id', 'c1', '--shards', '8', '--nodes', 'a'),
      'PLX_CLUSTER_BAD_PATH',
    );
    if (existsSync('/proc/self')) {
      // mkdir -p under /proc loops forever in Node's recursive mkdir.
      expectCommandRefusal(
        await plexus('init', '--dir', '/proc/nope/c', '--id', 'c1', '--shards', '8', '--nodes', 'a'),
        'PLX_CLUSTER_BAD_PATH',
      );
    }
    expectCommandRefusal(await plexus(...base, '--shards', '3'), 'PLX_CLUSTER_BAD_META');
    expectCommandRefusal(await plexus(...base.slice(0, -1), 'a,a'), 'PLX_CLUSTER_BAD_CONFIG');
    expectCommandRefusal(await plexus('init', '--dir', dir), 'see plexus cluster --help', 2);
  });

  describe('node refuses a bad config before it listens, and exits', () => {
    let dir = '';
    let good: Json = {};
    const variant = (name: string, change: (c: Json) => void): string => {
      const c = structuredClone(good);
      change(c);
      const f = join(dir, 'nodes', 'a', `${name}.json`);
      writeFileSync(f, JSON.stringify(c, null, 2));
      return f;
    };
    const node = (file: string): Promise<Run> => plexus('node', '--config', file);

    beforeAll(async () => {
      dir = join(tmp, 'nodes');
      const ports = await freePorts(1);
      const r = await plexus(
        'init',
        '--dir',
        dir,
        '--id',
        'c1',
        '--shards',
        '8',
        '--nodes',
        'a,b',
        '--base-port',
        String(ports[0]),
      );
      expect(r.status, r.stderr).toBe(0);
      good = JSON.parse(readFileSync(join(dir, 'nodes', 'a', 'node.json'), 'utf8')) as Json;
    });

    it('a missing TLS certificate, key or CA names the file', async () => {
      for (const field of ['cert', 'key', 'ca']) {
        const r = await node(variant(`tls-${field}`, (c) => (c.tls[field] = `missing-${field}.pem`)));
        expectCommandRefusal(r, 'PLX_CLUSTER_BAD_PATH');
        expect(r.stderr).toContain(`missing-${field}.pem`);
        expect(r.stderr).toContain(`tls.${field}`);
      }
      expect(existsSync(join(dir, 'nodes', 'a', 'data'))).toBe(false);
    });

    it('TLS material that does not fit: a key of another certificate, a certificate of another node or CA', async () => {
      const cases: [string, (c: Json) => void, string][] = [
        ['key-not-key', (c) => (c.tls.key = 'cert.pem'), 'tls.key'],
        ['key-mismatch', (c) => (c.tls.key = '../b/key.pem'), 'tls.key'],
        [
          'other-node',
          (c) => {
            c.tls.cert = '../b/cert.pem';
            c.tls.key = '../b/key.pem';
          },
          'names node "b"',
        ],
        ['other-ca', (c) => (c.tls.ca = 'cert.pem'), 'is not signed by the CA'],
      ];
      for (const [name, change, says] of cases) {
        const r = await node(variant(name, change));
        expectCommandRefusal(r, 'PLX_CLUSTER_BAD_TLS');
        expect(r.stderr, name).toContain(says);
      }
    });

    it('a member address that is taken or not this machine’s', async () => {
      const port = Number((good.members[0].address as string).split(':')[1]);
      const holder = createServer();
      await new Promise<void>((res) => holder.listen(port, '127.0.0.1', () => res()));
      try {
        const r = await node(variant('taken', () => {}));
        expectCommandRefusal(r, 'PLX_CLUSTER_LISTEN');
        expect(r.stderr).toContain('the port is taken');
      } finally {
        await new Promise((res) => holder.close(res));
      }
      // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never this machine's.
      expectCommandRefusal(
        await node(variant('foreign', (c) => (c.members[0].address = `192.0.2.1:${port}`))),
        'PLX_CLUSTER_LISTEN',
      );
    });

    it('a running node answers bad control commands with an error line and keeps running', async () => {
      const p = new NodeProc('a', join(dir, 'nodes', 'a', 'node.json'));
      try {
        await p.wait((l) => l.ev === 'joined', 'joined', 30_000);
        const q = p.queue({ cmd: 'route', shard: 0, owner: 'b', epoch: 'not-a-number' });
        const err = await p.wait((l) => l.ev === 'error' && l.q === q, 'the error line', 15_000);
        expect(err.message).toContain('not-a-number');
        p.child.stdin?.write('{not json\n');
        await p.wait((l) => l.ev === 'error' && l.code === 'PLX_CLUSTER_BAD_REQUEST' && l.q === undefined, 'not JSON');
        expect((await p.cmd({ cmd: 'status' })).self).toBe('a');
      } finally {
        await p.stop();
      }
      expect(p.exited).toBe(0);
      expect(p.stderr).not.toMatch(/^ {4}at /m);
    });

    it('the schema: unknown keys, bad values, duplicate ids, bad ports, names not in members', async () => {
      const cases: [string, (c: Json) => void, string][] = [
        ['journal', (c) => (c.journal = 'bogus'), 'journal must be one of'],
        ['unknown', (c) => (c.bogus = 1), 'bogus is not a known key'],
        ['unknown-nested', (c) => (c.lease = { ttlMS: 1000 }), 'lease.ttlMS is not a known key'],
        ['dup-id', (c) => (c.members[1].id = 'a'), 'members[1].id repeats'],
        ['dup-address', (c) => (c.members[1].address = c.members[0].address), 'members[1].address repeats'],
        ['port-high', (c) => (c.members[1].address = '127.0.0.1:70000'), 'members[1].address has port 70000'],
        ['port-zero', (c) => (c.members[0].address = '127.0.0.1:0'), 'members[0].address has port 0'],
        ['port-none', (c) => (c.members[0].address = '127.0.0.1'), 'members[0].address must be host:port'],
        ['authority', (c) => (c.authority = 'zz'), 'authority names "zz"'],
        ['self', (c) => (c.self = 'zz'), 'self names "zz"'],
        ['members', (c) => (c.members = 'a,b'), 'members must be an array'],
        ['missing', (c) => delete c.dataDir, 'dataDir is required'],
        ['lease', (c) => (c.lease = { ttlMs: 100, safetyMarginMs: 200 }), 'lease.'],
        ['rate', (c) => (c.leaseClockRate = 0), 'leaseClockRate must be a number above 0'],
      ];
      for (const [name, change, says] of cases) {
        const r = await node(variant(name, change));
        expectCommandRefusal(r, 'PLX_CLUSTER_BAD_CONFIG');
        expect(r.stderr, name).toContain(says);
      }
    });

    it('a meta that disagrees with cluster.meta, or a replication factor above 1', async () => {
      const r = await node(variant('shards', (c) => (c.meta.shardCount = 16)));
      expectCommandRefusal(r, 'PLX_CLUSTER_META_MISMATCH');
      expect(r.stderr).toContain('meta.shardCount');
      expectCommandRefusal(
        await node(variant('rf', (c) => (c.meta.replicationFactor = 2))),
        'PLX_CLUSTER_REPLICATION_UNSUPPORTED',
      );
      // Without the clusterMeta key, the data directory's own cluster.meta decides.
      const dataDir = join(dir, 'nodes', 'a', 'data-meta');
      mkdirSync(dataDir);
      writeFileSync(join(dataDir, 'cluster.meta'), JSON.stringify({ ...good.meta, shardCount: 4 }));
      const d = await node(
        variant('data-meta', (c) => {
          delete c.clusterMeta;
          c.dataDir = 'data-meta';
        }),
      );
      expectCommandRefusal(d, 'PLX_CLUSTER_META_MISMATCH');
    });

    it('a journal of another shard count ends the process with the code', async () => {
      const journalDir = join(dir, 'nodes', 'a', 'data-layout', 'journal');
      mkdirSync(journalDir, { recursive: true });
      const j = await openJournal(journalDir, { shardCount: 4 });
      await j.close();
      const r = await node(
        variant('layout', (c) => {
          c.dataDir = 'data-layout';
        }),
      );
      expectCommandRefusal(r, 'PLX_JOURNAL_LAYOUT');
    });

    it('a damaged authority state ends the process with the code', async () => {
      const dataDir = join(dir, 'nodes', 'a', 'data-state');
      mkdirSync(dataDir);
      writeFileSync(join(dataDir, 'authority.state'), '{"format":"plexus-authority-state"}\nsha256 00\n');
      const r = await node(variant('state', (c) => (c.dataDir = 'data-state')));
      expectCommandRefusal(r, 'PLX_CLUSTER_AUTHORITY_STATE');
      expect(r.stderr).toContain('authority.state');
    });

    it('a config that is missing, a directory or not JSON', async () => {
      expectCommandRefusal(await node(join(dir, 'none.json')), 'PLX_CLUSTER_BAD_PATH');
      expectCommandRefusal(await node(dir), 'PLX_CLUSTER_BAD_PATH');
      const f = join(dir, 'not-json.json');
      writeFileSync(f, '{"meta":');
      expectCommandRefusal(await node(f), 'PLX_CLUSTER_BAD_CONFIG');
      expectCommandRefusal(await plexus('node'), 'see plexus cluster --help', 2);
    });

    it('status: the same config checks, and an authority that does not answer', async () => {
      const r = await plexus(
        'status',
        '--config',
        variant('status-tls', (c) => (c.tls.ca = 'nope.pem')),
      );
      expectCommandRefusal(r, 'PLX_CLUSTER_BAD_PATH');
      expect(r.stderr).toContain('nope.pem');
      expectCommandRefusal(
        await plexus(
          'status',
          '--config',
          variant('status-bad', (c) => (c.journal = 'x')),
        ),
        'PLX_CLUSTER_BAD_CONFIG',
      );
      // Nobody runs the authority: a coded failure, not a stack trace.
      expectCommandRefusal(await plexus('status', '--config', join(dir, 'nodes', 'b', 'node.json')), 'PLX_');
    });
  });

  it('dead-letters of a directory that is not there creates nothing', async () => {
    const missing = join(tmp, 'no-such-node', 'data');
    const r = await plexus('dead-letters', missing);
    expectCommandRefusal(r, 'PLX_CLUSTER_BAD_PATH');
    expect(r.stdout).not.toContain('count');
    expect(existsSync(join(tmp, 'no-such-node'))).toBe(false);
    const file = join(tmp, 'dead-file');
    writeFileSync(file, 'x');
    expectCommandRefusal(await plexus('dead-letters', file), 'PLX_CLUSTER_BAD_PATH');
    // A directory that is not a node's: refused, and nothing created in it.
    const empty = join(tmp, 'empty-data');
    mkdirSync(empty);
    expectCommandRefusal(await plexus('dead-letters', empty), 'PLX_CLUSTER_BAD_PATH');
    expect(readdirSync(empty)).toEqual([]);
    // A node data directory without a dead-letter log (a node that never dropped a frame): 0,
    // and still nothing created.
    writeFileSync(join(empty, 'cluster.meta'), '{}');
    const e = await plexus('dead-letters', empty);
    expect(e.status, e.stderr).toBe(0);
    expect(JSON.parse(e.stdout)).toEqual({ count: 0 });
    expect(readdirSync(empty)).toEqual(['cluster.meta']);
    expectCommandRefusal(await plexus('dead-letters'), 'see plexus cluster --help', 2);
  });

  it('--help documents --force, the checks and the exit status', async () => {
    const r = await plexus('--help');
    expect(r.status).toBe(0);
    for (const s of ['--force', 'PLX_CLUSTER_EXISTS', '65535', 'authority.state', 'Exit status']) {
      expect(r.stdout).toContain(s);
    }
  });
});
