/**
 * Removals and the lease dump of a gossip cluster, with real node processes (`plexus cluster
 * node` from dist/, mutual TLS on loopback): four nodes form a cluster; the operator removes d
 * (a `remove` request to the leader over the wire, with b's certificate); every other node keeps
 * the removal in its data directory. d is stopped, then a, b and c are stopped and started
 * again: they refuse d from the start, d cannot join again and gets no lease. While they run,
 * `plexus cluster leases --dump` writes the leader's leases; once every process is stopped it
 * writes each shard's highest journal epoch as the ceiling. Every process is stopped by its PID.
 * Needs `npm run build` first.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeReply, encodeRequest } from '../../ts/cluster/codec.js';
import { loadGossipRemoved } from '../../ts/cluster/gossip/removed-file.js';
import { readNodeConfig } from '../../ts/cluster/node.js';
import { readNodeTls } from '../../ts/cluster/node-tls.js';
import { shardOf } from '../../ts/core/index.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { runNode } from '../helpers/processes.js';
import { until } from '../helpers/until.js';
import {
  CLI,
  dataDirOf,
  initProcCluster,
  type Line,
  NodeProc,
  owners,
  ProcRun,
  sharedJournalHistory,
} from './actor-procs.js';

const SHARDS = 8;
const built = existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url));
const run = new ProcRun();

function cli(args: string[]) {
  return runNode(CLI, args, { timeoutMs: 60_000 });
}

const memberIds = (st: Line): string[] => (st.members as Line[]).map((m) => m.id as string).sort();

describe.skipIf(!built)('gossip removals and the lease dump with node processes (build dist first)', () => {
  afterAll(() => run.cleanup(), 120_000);

  it('a removed node cannot join again after every other process restarted; the dump reads the leader, then the journals', async () => {
    const files = await initProcCluster(run, 'plexus-gossip-removed-', {
      shards: SHARDS,
      nodes: ['a', 'b', 'c', 'd'],
      journal: 'shared',
      membership: { kind: 'gossip' },
      lease: { ttlMs: 2000, safetyMarginMs: 400, renewEveryMs: 500 },
      detector: { suspectAfterMs: 900, failedAfterMs: 3000 },
    });
    const start = (id: string) => {
      const p = new NodeProc(id, files.get(id) as string);
      run.procs.push(p);
      return p;
    };
    const first = ['a', 'b', 'c', 'd'].map(start);
    const [a, , , d] = first as [NodeProc, NodeProc, NodeProc, NodeProc];
    for (const p of first) await p.wait((l) => l.ev === 'held' && l.held.length > 0, `${p.id} to hold leases`, 60_000);
    await until(
      async () => {
        const st = await a.cmd({ cmd: 'status' });
        return st.leases.length === SHARDS && memberIds(st).join() === 'a,b,c,d';
      },
      { timeoutMs: 30_000, what: 'four members and every shard leased' },
    );

    // The operator removes d at the leader, over the wire with b's certificate.
    const bCfg = await readNodeConfig(files.get('b') as string);
    const wire = new Http2Wire({
      self: 'b',
      cluster: 'c1',
      tls: readNodeTls(bCfg),
      resolve: (n) => bCfg.members.find((m) => m.id === n)?.address,
      isMember: () => true,
      deliveryDeadlineMs: 5000,
    });
    try {
      const r = decodeReply(await wire.call('a', encodeRequest({ type: 'remove', node: 'd' })));
      expect(r.ok).toBe(true);
      expect(r.removed).toEqual(['d']);
    } finally {
      await wire.close();
    }
    // a, b and c keep it in their data directories; d never learns it.
    for (const id of ['a', 'b', 'c']) {
      await until(
        async () => (await loadGossipRemoved(dataDirOf(run.dir, id), 'c1')).includes('d'),
        `${id} to keep d's removal on disk`,
      );
    }
    expect(await loadGossipRemoved(dataDirOf(run.dir, 'd'), 'c1')).toEqual([]);
    await until(
      async () => {
        const st = await a.cmd({ cmd: 'status' });
        return st.leases.length === SHARDS && st.leases.every((l: Line) => l.owner !== 'd') && st;
      },
      { timeoutMs: 30_000, what: 'd’s shards to go to the others' },
    );

    // d stops; then every other process stops, and they start again.
    await d.stop();
    for (const p of first.slice(0, 3)) await p.stop();
    const second = ['a', 'b', 'c'].map(start);
    const [a2, b2] = second as [NodeProc, NodeProc, NodeProc];
    for (const p of second)
      await p.wait((l) => l.ev === 'held' && l.held.length > 0, `${p.id} to hold leases again`, 60_000);
    // d comes back: every member refuses it at the handshake, so no seed answers and it never joins.
    const d2 = start('d');
    const code = await Promise.race([
      d2.exit,
      until(async () => memberIds(await a2.cmd({ cmd: 'status' })).includes('d') && 'joined', {
        timeoutMs: 60_000,
        what: 'd to exit',
      }).catch(() => 'still running'),
    ]);
    expect(code, d2.stderr.slice(-800)).not.toBe('joined');
    expect(code).not.toBe(0);
    expect(d2.stderr).toMatch(/PLX_CLUSTER_UNAVAILABLE|PLX_WIRE_/);
    expect(d2.lines.some((l) => l.ev === 'held' && l.held.length > 0)).toBe(false);
    const view = await until(
      async () => {
        const st = await a2.cmd({ cmd: 'status' });
        return st.leases.length === SHARDS && st;
      },
      { timeoutMs: 30_000, what: 'every shard leased after the restart' },
    );
    expect(memberIds(view)).toEqual(['a', 'b', 'c']);
    for (const l of view.leases as Line[]) expect(['a', 'b', 'c']).toContain(l.owner);

    // Actors of every shard write their journals, then the running cluster is dumped.
    const written = new Map<number, string>();
    for (let i = 0; written.size < SHARDS && i < 10_000; i++) {
      const s = shardOf(`vt:counter/r${i}`, SHARDS);
      if (!written.has(s)) written.set(s, `vt:counter/r${i}`);
    }
    for (const [s, target] of written) {
      const res = await b2.cmd({ cmd: 'send', target, event: 'inc', id: `r-${s}` }, 30_000);
      expect(res.result, JSON.stringify(res)).toBe('processed');
    }
    const running = join(run.dir, 'running.json');
    const dr = await cli(['leases', '--config', files.get('c') as string, '--dump', running]);
    expect(dr.code, dr.stderr).toBe(0);
    const live = JSON.parse(await readFile(running, 'utf8')) as Line;
    expect(live).toMatchObject({ membership: 'gossip', source: 'leader', leader: 'a' });
    const last = owners(await a2.cmd({ cmd: 'status' }));
    expect(live.leases.map((l: Line) => [l.shard, l.owner, l.epoch])).toEqual(
      [...last].sort(([x], [y]) => x - y).map(([s, o]) => [s, o.owner, o.epoch]),
    );

    // Every process stopped: the dump reads the shared store's journals.
    for (const p of [...second, d2]) await p.stop();
    const stopped = join(run.dir, 'stopped.json');
    const ds = await cli(['leases', '--config', files.get('c') as string, '--dump', stopped]);
    expect(ds.code, ds.stderr).toBe(0);
    const off = JSON.parse(await readFile(stopped, 'utf8')) as Line;
    expect(off).toMatchObject({ membership: 'gossip', source: 'journals', leases: [] });
    const history = await sharedJournalHistory(run.dir, SHARDS);
    let ceiling = 0n;
    for (let s = 0; s < SHARDS; s++) {
      let top = 0n;
      for (const e of history.epochs.get(s) ?? []) if (e > top) top = e;
      if (top > ceiling) ceiling = top;
      // Each shard's last write was its current owner's, at the epoch the last view listed.
      expect(off.epochs[String(s)], `shard ${s}`).toBe(last.get(s)?.epoch);
      expect(BigInt(off.epochs[String(s)]), `shard ${s}`).toBe(top);
    }
    expect(off.epochCeiling).toBe(ceiling.toString());
  }, 300_000);
});
