/**
 * Cluster nodes as real processes (`plexus cluster node` from dist/) with gossip membership:
 * `plexus cluster init --membership gossip` writes three nodes whose seeds are one another;
 * started together, they form the cluster through the seeds over their mutual-TLS wires, the
 * lowest id (a) leads and grants the leases, and actors run across the nodes. Node c is
 * killed (SIGKILL): the others' gossip marks it failed, and its shards go to a and b only
 * once its leases have expired, at greater epochs; its actors then run on their new owners,
 * and the shared journals hold every acknowledged message once.
 * Needs `npm run build` first.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { shardOf } from '../../ts/core/index.js';
import { runNode, stopStarted } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import { CLI, freePorts, type Line, NodeProc, patchConfig, sharedJournalHistory } from './actor-procs.js';

const SHARDS = 16;
const LEASE = { ttlMs: 2000, safetyMarginMs: 400, renewEveryMs: 500 };
/** Gossip probes every 300 ms (a third of suspectAfterMs): loose enough for a loaded machine. */
const DETECTOR = { suspectAfterMs: 900, failedAfterMs: 3000 };
const built = existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url));

function cli(args: string[]) {
  return runNode(CLI, args, { timeoutMs: 60_000 });
}

const shard = (iri: string) => shardOf(iri, SHARDS);
function iriIn(prefix: string, s: number): string {
  for (let i = 0; ; i++) if (shard(`${prefix}${i}`) === s) return `${prefix}${i}`;
}
function owners(st: Line): Map<number, { owner: string; epoch: string }> {
  return new Map(st.leases.map((l: Line) => [l.shard, { owner: l.owner, epoch: l.epoch }]));
}
const statusOf = (st: Line, id: string): string | undefined => (st.members as Line[]).find((m) => m.id === id)?.status;

describe.skipIf(!built)('cluster node processes with gossip membership (build dist first)', () => {
  const procs: NodeProc[] = [];
  let dir = '';

  afterAll(async () => {
    for (const p of procs) await p.stop();
    await stopStarted();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 120_000);

  it('init --membership gossip refuses bad seeds and a per-node journal; --help names it', async () => {
    const base = await mkdtemp(join(tmpdir(), 'plexus-gossip-init-'));
    try {
      const init = (sub: string, ...more: string[]) =>
        cli(['init', '--dir', join(base, sub), '--id', 'g', '--shards', '8', '--nodes', 'a,b', ...more]);
      const usage = await init('u', '--seeds', 'a');
      expect(usage.code, usage.stderr).toBe(2);
      expect(usage.stderr).toContain('--seeds is for --membership gossip');
      const unknown = await init('s', '--membership', 'gossip', '--seeds', 'a,zz');
      expect(unknown.code, unknown.stderr).toBe(1);
      expect(unknown.stderr).toContain('PLX_CLUSTER_BAD_CONFIG');
      expect(unknown.stderr).toContain('membership.seeds[1]');
      const perNode = await init('p', '--membership', 'gossip', '--journal', 'per-node');
      expect(perNode.code, perNode.stderr).toBe(1);
      expect(perNode.stderr).toContain('shared journal');
      const ok = await init('ok', '--membership', 'gossip', '--seeds', 'b');
      expect(ok.code, ok.stderr).toBe(0);
      const cfg = JSON.parse(await readFile(join(base, 'ok', 'nodes', 'a', 'node.json'), 'utf8')) as Line;
      expect(cfg.membership).toEqual({ kind: 'gossip', seeds: ['b'] });
      const help = await cli(['--help']);
      expect(help.stdout).toContain('--membership static|etcd|kubernetes|gossip');
      expect(help.stdout).toContain('--seeds');
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  }, 120_000);

  it('form through seeds, grant leases, run actors; a killed node’s shards move only after its leases expire', async () => {
    dir = await mkdtemp(join(tmpdir(), 'plexus-gossip-procs-'));
    const r = await cli([
      'init',
      '--dir',
      dir,
      '--id',
      'c1',
      '--shards',
      String(SHARDS),
      '--nodes',
      'a,b,c',
      '--membership',
      'gossip',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const files = new Map(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Line)
        .map((l) => [l.node as string, l.config as string]),
    );
    const written = JSON.parse(await readFile(files.get('b')!, 'utf8')) as Line;
    expect(written.membership).toEqual({ kind: 'gossip', seeds: ['a', 'b', 'c'] });
    expect(written.authority).toBeUndefined();
    expect(written.journal).toBe('shared');
    expect(written.storeHost).toBe('a');
    // Free ports for the members (init numbers them from --base-port) and the test's timings.
    const ports = await freePorts(3);
    const members = ['a', 'b', 'c'].map((id, i) => ({ id, address: `127.0.0.1:${ports[i]}` }));
    for (const id of ['a', 'b', 'c']) {
      await patchConfig(files.get(id)!, {
        members,
        lease: LEASE,
        detector: DETECTOR,
        heartbeatEveryMs: 100,
        cluster: { deliveryDeadlineMs: 30_000, retryBackoffMs: 50 },
      });
    }

    for (const id of ['a', 'b', 'c']) procs.push(new NodeProc(id, files.get(id)!));
    const [a, b, c] = procs as [NodeProc, NodeProc, NodeProc];
    for (const p of procs) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases', 60_000);
    let view = new Map<number, { owner: string; epoch: string }>();
    await until(
      async () => {
        const st = await a.cmd({ cmd: 'status' });
        view = owners(st);
        return view.size === SHARDS && ['a', 'b', 'c'].every((id) => statusOf(st, id) === 'alive');
      },
      { timeoutMs: 30_000, what: `a lease of every one of the ${SHARDS} shards, three live members` },
    );
    const ownedBy = (n: string) => [...view].filter(([, o]) => o.owner === n).map(([s]) => s);
    // `plexus cluster status` from another process finds the leader (a, the lowest id).
    const st = await cli(['status', '--config', files.get('c')!]);
    expect(st.code, st.stderr).toBe(0);
    const lines = st.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Line);
    expect(lines[0]).toMatchObject({ cluster: 'c1', membership: 'gossip', leader: 'a' });
    expect(lines.at(-1)!.leased).toBe(SHARDS);
    // The lease dump of the running cluster is the leader's view.
    // Compared with the leader's status read right after it (a lease granted again in between, on
    // a loaded machine, makes one round differ: the next round compares anew).
    let dumped: Line = {};
    await until(
      async () => {
        const dump = await cli(['leases', '--config', files.get('c')!, '--dump', join(dir, 'leases.json')]);
        expect(dump.code, dump.stderr).toBe(0);
        dumped = JSON.parse(await readFile(join(dir, 'leases.json'), 'utf8')) as Line;
        view = owners(await a.cmd({ cmd: 'status' }));
        return (
          dumped.leases.length === SHARDS &&
          (dumped.leases as Line[]).every(
            (l) => l.owner === view.get(l.shard)?.owner && l.epoch === view.get(l.shard)?.epoch,
          )
        );
      },
      { timeoutMs: 60_000, what: 'a lease dump equal to the leader’s view' },
    );
    expect(dumped).toMatchObject({ cluster: 'c1', membership: 'gossip', source: 'leader', leader: 'a' });
    for (const n of ['a', 'b', 'c']) expect(ownedBy(n).length, n).toBeGreaterThan(0);
    // Every node sees the same owners as the leader (the leader's view reached them all). Both
    // are read in the same round: on a loaded machine a lease may be granted again meanwhile.
    for (const p of [b, c]) {
      await until(
        async () => {
          const lead = owners(await a.cmd({ cmd: 'status' }));
          const o = owners(await p.cmd({ cmd: 'status' }));
          return (
            lead.size === SHARDS &&
            [...lead].every(([s, x]) => o.get(s)?.owner === x.owner && o.get(s)?.epoch === x.epoch)
          );
        },
        { timeoutMs: 30_000, what: `node ${p.id} to see the leader's leases` },
      );
    }

    // Actors across the nodes, each acknowledgement after the durable append.
    const acked = new Map<string, string>();
    await Promise.all(
      Array.from({ length: 18 }, async (_, i) => {
        const from = procs[i % 3]!;
        const target = `vt:counter/x${i}`;
        const res = await from.cmd({ cmd: 'send', target, event: 'inc', id: `x-${i}` }, 30_000);
        expect(res.result, JSON.stringify(res)).toBe('processed');
        acked.set(`x-${i}`, target);
      }),
    );

    // c is killed. Its shards are leased to it until its leases expire on the leader's clock,
    // counted from its last renewal; gossip marks it failed meanwhile.
    const cShards = ownedBy('c');
    const actor = iriIn('vt:counter/z', cShards[0]!);
    expect((await c.cmd({ cmd: 'send', target: actor, event: 'inc', id: 'before' })).result).toBe('processed');
    acked.set('before', actor);
    c.signal('SIGKILL');
    const killedAt = Date.now();
    await c.exit;
    let firstMove: number | undefined;
    let failedSeen: number | undefined;
    const after = await until(
      async () => {
        const st = await a.cmd({ cmd: 'status' });
        const o = owners(st);
        const now = Date.now();
        if (firstMove === undefined && cShards.some((s) => o.get(s) !== undefined && o.get(s)!.owner !== 'c')) {
          firstMove = now;
        }
        if (failedSeen === undefined && statusOf(st, 'c') === 'failed') failedSeen = now;
        return cShards.every((s) => o.get(s) !== undefined && o.get(s)!.owner !== 'c') && failedSeen !== undefined && o;
      },
      { timeoutMs: 60_000, intervalMs: 50, what: 'c’s shards to move and c to be failed' },
    );
    // No shard moved before c's lease could have ended: its last renewal was at most a
    // heartbeat and a renewal round before the kill.
    expect(firstMove! - killedAt).toBeGreaterThanOrEqual(LEASE.ttlMs - LEASE.renewEveryMs);
    for (const s of cShards) {
      expect(['a', 'b']).toContain(after.get(s)!.owner);
      expect(BigInt(after.get(s)!.epoch), `shard ${s}`).toBeGreaterThan(BigInt(view.get(s)!.epoch));
    }
    // b marks c failed too (from its own gossip table).
    await until(async () => statusOf(await b.cmd({ cmd: 'status' }), 'c') === 'failed', 'b to mark c failed');
    // The other shards kept their owners and epochs.
    for (const [s, o] of view) if (o.owner !== 'c') expect(after.get(s), `shard ${s}`).toEqual(o);

    // c's actor runs on its new owner; sent from either survivor.
    for (const [k, p] of [a, b].entries()) {
      const res = await p.cmd({ cmd: 'send', target: actor, event: 'inc', id: `after-${k}` }, 30_000);
      expect(res.result, JSON.stringify(res)).toBe('processed');
      acked.set(`after-${k}`, actor);
    }

    // Stop the survivors (SIGTERM drains), the store host (a) last; then read the journals.
    for (const p of [b, a]) await p.stop();
    for (const p of [a, b]) expect(p.exited, `${p.id}: ${p.stderr.slice(-300)}`).toBe(0);
    const report = await sharedJournalHistory(dir, SHARDS);
    expect(report.problems).toEqual([]);
    for (const [id, target] of acked) expect(report.consumed.get(target)?.has(id), id).toBe(true);
    const epochs = report.epochs.get(shard(actor))!;
    expect(epochs.at(-1)! > BigInt(view.get(shard(actor))!.epoch)).toBe(true);
  }, 240_000);
});
