/**
 * What the lease authority keeps across a restart of its host (ts/cluster/authority-state.ts,
 * AuthorityHost.open) and the replication factor it refuses, on real files in a temporary
 * directory, with an injected clock. The restart with real node processes is
 * authority-restart.test.ts.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryAuthority } from '../../ts/cluster/authority.js';
import { AUTHORITY_STATE_FILE, loadAuthorityState } from '../../ts/cluster/authority-state.js';
import { AuthorityHost } from '../../ts/cluster/host.js';
import { initCluster } from '../../ts/cluster/init.js';
import { type ClusterMeta, clusterMeta } from '../../ts/cluster/meta.js';
import { refusal, thrownRefusal } from '../helpers/refusal.js';

const META: ClusterMeta = { id: 'c1', shardCount: 8, hashVersion: 1, replicationFactor: 1 };
const members = ['a', 'b', 'c'].map((id) => ({ id, address: '' }));
const LEASE = { ttlMs: 1000, safetyMarginMs: 200, renewEveryMs: 300 };
const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});
async function tmp(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'plexus-authority-state-'));
  dirs.push(d);
  return d;
}

/** A host on a clock the test moves. */
async function openHost(stateDir: string, clock: { now: number }, meta = META): Promise<AuthorityHost> {
  return AuthorityHost.open({
    stateDir,
    meta,
    members,
    lease: LEASE,
    detector: { suspectAfterMs: 300, failedAfterMs: 1000 },
    journals: 'per-node',
    autoAssign: false,
    clock: { now: () => clock.now },
    tickEveryMs: 1_000_000,
  });
}

async function joinAll(h: AuthorityHost, nodes: readonly string[]): Promise<void> {
  for (const node of nodes) {
    const r = await h.call({ type: 'join', node, address: '', meta: META });
    expect(r.ok).toBe(true);
  }
}

describe('replication factor', () => {
  it('refuses a replication factor above 1 (nothing replicates), naming the field', () => {
    const e = thrownRefusal(() => clusterMeta({ ...META, replicationFactor: 2 }));
    expect(e.code).toBe('PLX_CLUSTER_REPLICATION_UNSUPPORTED');
    expect(e.details.field).toBe('replicationFactor');
    // Before, a per-node authority with replication factor 2 dropped the rule that keeps a
    // failed owner's shards for it and granted them to members with empty journals.
    const e2 = thrownRefusal(
      () => new MemoryAuthority({ meta: { ...META, replicationFactor: 2 }, members, journals: 'per-node' }),
    );
    expect(e2.code).toBe('PLX_CLUSTER_REPLICATION_UNSUPPORTED');
    expect(clusterMeta(META).replicationFactor).toBe(1);
  });

  it('init refuses it and writes nothing', async () => {
    const d = await tmp();
    const e = await refusal(
      initCluster({ dir: join(d, 'c'), id: 'c1', shards: 8, nodes: ['a'], replicationFactor: 3, ports: [7400] }),
    );
    expect(e.code).toBe('PLX_CLUSTER_REPLICATION_UNSUPPORTED');
    await expect(readFile(join(d, 'c', 'cluster.meta'))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});

describe('the lease authority across restarts of its host', () => {
  it('keeps a failed owner’s shards for it, and reuses no epoch or view version', async () => {
    const dir = await tmp();
    const clock = { now: 1000 };
    const h1 = await openHost(dir, clock);
    await joinAll(h1, ['a', 'b', 'c']);
    const first = new Map<number, bigint>();
    for (let s = 0; s < 8; s++) {
      const r = await h1.call({ type: 'grant', node: ['a', 'b', 'c'][s % 3] as string, shard: s });
      expect(r.ok && r.lease).toBeTruthy();
      if (r.ok && r.lease) first.set(s, r.lease.epoch);
    }
    const lastVersion = h1.authority.view().version;
    h1.close();

    // The host restarts (epochBase 0: nothing else keeps epochs apart) while b is down.
    clock.now = 50;
    const h2 = await openHost(dir, clock);
    await joinAll(h2, ['a', 'c']);
    expect(h2.authority.view().version).toBeGreaterThan(lastVersion);
    // For one lease length nothing is granted: leases of the previous run may still run.
    const early = await h2.call({ type: 'grant', node: 'a', shard: 0 });
    expect(early).toMatchObject({ ok: false, code: 'PLX_CLUSTER_LEASE_HELD', details: { reason: 'restart' } });
    clock.now += LEASE.ttlMs;
    for (let s = 0; s < 8; s++) {
      const home = ['a', 'b', 'c'][s % 3] as string;
      for (const node of ['a', 'c'].filter((n) => n !== home)) {
        // b's shards (1, 4, 7) go to nobody else, nor do a's to c or c's to a.
        const r = await h2.call({ type: 'grant', node, shard: s });
        expect(r).toMatchObject({ ok: false, code: 'PLX_CLUSTER_LEASE_HELD', details: { shard: s, home } });
      }
      if (home !== 'b') {
        const r = await h2.call({ type: 'grant', node: home, shard: s });
        expect(r.ok && r.lease && r.lease.epoch > (first.get(s) as bigint)).toBe(true);
      }
    }
    h2.close();

    // A third run: b is back and takes its shards at epochs above every earlier one.
    clock.now = 10;
    const h3 = await openHost(dir, clock);
    await joinAll(h3, ['b']);
    clock.now += LEASE.ttlMs;
    for (const s of [1, 4, 7]) {
      const r = await h3.call({ type: 'grant', node: 'b', shard: s });
      expect(r.ok && r.lease && r.lease.epoch > (first.get(s) as bigint)).toBe(true);
    }
    // A release after a hand-over frees the home: any member may take the shard next, also after a restart.
    const held = h3.authority.view().leases.find((l) => l.shard === 1);
    expect(held?.owner).toBe('b');
    expect((await h3.call({ type: 'release', node: 'b', shard: 1, epoch: held!.epoch })).ok).toBe(true);
    h3.close();
    const state = await loadAuthorityState(dir, META);
    expect(state?.homes.has(1)).toBe(false);
    expect(state?.homes.get(4)).toBe('b');
  });

  it('refuses to start on a damaged, foreign or unreadable state file, naming it', async () => {
    const dir = await tmp();
    const clock = { now: 0 };
    const h = await openHost(dir, clock);
    await joinAll(h, ['a']);
    clock.now += 10;
    expect((await h.call({ type: 'grant', node: 'a', shard: 3 })).ok).toBe(true);
    h.close();
    const file = join(dir, AUTHORITY_STATE_FILE);
    const good = await readFile(file, 'utf8');
    expect(good).toMatch(/^\{.*\}\nsha256 [0-9a-f]{64}\n$/);

    const cases: [string, string][] = [
      [good.replace('"a"', '"b"'), 'checksum'],
      [good.slice(0, good.length - 10), 'format'],
      ['', 'format'],
      ['{"format":"plexus-authority-state"}\n', 'format'],
    ];
    for (const [text, reason] of cases) {
      await writeFile(file, text);
      const e = await refusal(openHost(dir, clock));
      expect(e.code).toBe('PLX_CLUSTER_AUTHORITY_STATE');
      expect(e.details).toMatchObject({ file, reason });
    }
    await writeFile(file, good);
    const other = await refusal(openHost(dir, clock, { ...META, id: 'c2' }));
    expect(other.details).toMatchObject({ reason: 'cluster' });
    const shards = await refusal(openHost(dir, clock, { ...META, shardCount: 16 }));
    expect(shards.details).toMatchObject({ reason: 'shardCount' });
    // The good file still opens, with its home.
    const again = await openHost(dir, clock);
    expect((await loadAuthorityState(dir, META))?.homes.get(3)).toBe('a');
    again.close();
  });

  it('answers nothing more once its state cannot be persisted', async () => {
    const dir = join(await tmp(), 'state');
    const clock = { now: 0 };
    const { mkdir } = await import('node:fs/promises');
    await mkdir(dir);
    const h = await openHost(dir, clock);
    await joinAll(h, ['a']);
    await rm(dir, { recursive: true });
    // The first grant of a shard records its home: that write fails, so the grant is not answered.
    const e = await refusal(h.call({ type: 'grant', node: 'a', shard: 0 }));
    expect(e.code).toBe('PLX_CLUSTER_AUTHORITY_STATE');
    const e2 = await refusal(h.call({ type: 'view' }));
    expect(e2.code).toBe('PLX_CLUSTER_AUTHORITY_STATE');
    h.close();
  });
});
