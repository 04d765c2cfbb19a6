/**
 * Leaving with a drain, in real node processes (`plexus cluster node` from dist/) on loopback
 * with mutual TLS and a shared journal store: while actors take a steady stream of messages
 * sent through the other nodes, `plexus cluster leave --config b.json` asks node b to leave.
 * b refuses new activations, finishes its macrosteps, flushes its outboxes, hands each shard
 * over (nothing to ship on a shared store) and releases it, forwards what it held, leaves and
 * exits 0; its shards go to the other nodes at greater epochs. The journals, read back from
 * disk, hold every acknowledged message exactly once, each shard's epochs never go back, and
 * each (shard, epoch) in them was held by one node only. Once with the static authority,
 * once with `--membership etcd` on a real 3-member etcd (skipped without `etcd`).
 * Needs `npm run build` first.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeControl } from '../../ts/cluster/control.js';
import { readNodeConfig } from '../../ts/cluster/node.js';
import type { MembershipConfig } from '../../ts/cluster/node-config.js';
import { readNodeTls } from '../../ts/cluster/node-tls.js';
import { Http2Wire } from '../../ts/net/http2-wire.js';
import { type EtcdCluster, etcdAvailable, startEtcd } from '../helpers/etcd.js';
import { runNode } from '../helpers/processes.js';
import { refusal } from '../helpers/refusal.js';
import { until } from '../helpers/until.js';
import { CLI, initProcCluster, type Line, NodeProc, ProcRun, sharedJournalHistory } from './actor-procs.js';

const SHARDS = 16;
const TARGETS = 32;
const built = existsSync(new URL('../../dist/cli/commands/cluster.js', import.meta.url));

function owners(st: Line): Map<number, { owner: string; epoch: string }> {
  return new Map(st.leases.map((l: Line) => [l.shard, { owner: l.owner, epoch: l.epoch }]));
}

/** Senders on `from` that keep messaging counters until `stop()`; a refused send is retried with its id. */
function stream(from: readonly NodeProc[], perNode: number) {
  const acked = new Map<string, string>();
  const failures: Line[] = [];
  let n = 0;
  let running = true;
  let failed: unknown;
  const workers = from.flatMap((p) =>
    Array.from({ length: perNode }, async () => {
      while (running) {
        const k = n++;
        const id = `m-${k}`;
        const target = `vt:counter/t${k % TARGETS}`;
        for (let attempt = 0; ; attempt++) {
          const r = await p.cmd({ cmd: 'send', target, event: 'inc', id }, 60_000);
          if (r.result === 'processed' || r.result === 'duplicate') {
            acked.set(id, target);
            break;
          }
          failures.push(r);
          if (attempt >= 20) throw new Error(`send ${id} through ${p.id} failed 20 times: ${JSON.stringify(r)}`);
        }
      }
    }).map((w) =>
      w.catch((e) => {
        running = false;
        failed ??= e;
      }),
    ),
  );
  return {
    acked,
    failures,
    get count() {
      return acked.size;
    },
    /** Ends the stream; throws the first failure of a sender. */
    async stop() {
      running = false;
      await Promise.all(workers);
      if (failed !== undefined) throw failed;
    },
  };
}

/** Every `shard@epoch` each node reported holding (its `held` lines). */
function holders(procs: readonly NodeProc[]): Map<string, Set<string>> {
  const m = new Map<string, Set<string>>();
  for (const p of procs) {
    for (const l of p.lines) {
      if (l.ev !== 'held') continue;
      for (const h of l.held as string[]) {
        let set = m.get(h);
        if (set === undefined) {
          set = new Set();
          m.set(h, set);
        }
        set.add(p.id);
      }
    }
  }
  return m;
}

async function leaveScenario(run: ProcRun, membership?: MembershipConfig): Promise<void> {
  let s: ReturnType<typeof stream> | undefined;
  try {
    await scenario(run, membership, (x) => {
      s = x;
    });
  } finally {
    await s?.stop().catch(() => {});
  }
}

async function scenario(
  run: ProcRun,
  membership: MembershipConfig | undefined,
  started: (s: ReturnType<typeof stream>) => void,
): Promise<void> {
  const files = await initProcCluster(run, 'plexus-leave-', {
    shards: SHARDS,
    nodes: ['a', 'b', 'c'],
    journal: 'shared',
    lease: { ttlMs: 2000, safetyMarginMs: 400, renewEveryMs: 500 },
    ...(membership ? { membership } : {}),
  });
  for (const id of ['a', 'b', 'c']) run.procs.push(new NodeProc(id, files.get(id)!));
  const [a, b, c] = run.procs as [NodeProc, NodeProc, NodeProc];
  for (const p of run.procs) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases', 30_000);
  let before = new Map<number, { owner: string; epoch: string }>();
  await until(
    async () => {
      before = owners(await a.cmd({ cmd: 'status' }));
      return before.size === SHARDS;
    },
    { timeoutMs: 30_000, what: `a lease of every one of the ${SHARDS} shards` },
  );
  const bShards = [...before].filter(([, o]) => o.owner === 'b').map(([s]) => s);
  expect(bShards.length).toBeGreaterThan(0);

  // A steady stream through a and c, to counters on every node (b's among them).
  const s = stream([a, c], 4);
  started(s);
  await until(() => s.count >= 60, { timeoutMs: 30_000, what: 'the stream to run' });

  // a hosts the shared store (and, static, the authority): it may not leave, and stays unchanged.
  const refused = await runNode(CLI, ['leave', '--config', files.get('a')!], { timeoutMs: 90_000 });
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain('PLX_CLUSTER_BAD_REQUEST');
  expect(a.lines.some((l) => l.ev === 'leaving')).toBe(false);
  // A node obeys only its own certificate: a, a member admitted to b's wire, may not make b leave.
  const cfgA = await readNodeConfig(files.get('a')!);
  const asA = new Http2Wire({
    self: 'a',
    cluster: cfgA.meta.id,
    tls: readNodeTls(cfgA),
    resolve: (n) => cfgA.members.find((m) => m.id === n)?.address,
    isMember: (n) => cfgA.members.some((m) => m.id === n),
    deliveryDeadlineMs: 10_000,
  });
  try {
    const e = await refusal(asA.call('b', encodeControl({ op: 'leave' })));
    expect(e.code).toBe('PLX_CLUSTER_BAD_REQUEST');
    expect(e.message).toContain('only with its own certificate');
  } finally {
    await asA.close();
  }
  expect(b.lines.some((l) => l.ev === 'leaving')).toBe(false);

  const left = await runNode(CLI, ['leave', '--config', files.get('b')!], { timeoutMs: 90_000 });
  expect(left.code, `${left.stdout} ${left.stderr}`).toBe(0);
  expect(JSON.parse(left.stdout.trim().split('\n').at(-1)!)).toMatchObject({ node: 'b', left: true });
  expect(await b.exit, b.stderr.slice(-500)).toBe(0);
  const steps = b.lines.filter((l) => l.ev === 'leaving').map((l) => l.step as string);
  const order = ['drain', 'refuse-activations', 'finish-macrosteps', 'flush-outboxes'];
  expect(steps.slice(0, 4)).toEqual(order);
  expect(steps.filter((x) => x === 'hand-over').length).toBeGreaterThanOrEqual(1);
  expect(steps.slice(-3)).toEqual(['forward-held', 'leave', 'left']);
  const handedOver = b.lines.filter((l) => l.ev === 'leaving' && l.step === 'hand-over').map((l) => l.shard as number);
  for (const shard of handedOver) expect(bShards).toContain(shard);

  // b's shards are the others' now, each at a greater epoch; b is no longer a member.
  let after = new Map<number, { owner: string; epoch: string }>();
  await until(
    async () => {
      const st = await a.cmd({ cmd: 'status' });
      after = owners(st);
      return (
        after.size === SHARDS &&
        [...after.values()].every((o) => o.owner !== 'b') &&
        !st.members.some((m: Line) => m.id === 'b')
      );
    },
    { timeoutMs: 30_000, what: "b's shards to be taken by a and c, and b gone from the members" },
  );
  for (const shard of bShards) {
    expect(['a', 'c']).toContain(after.get(shard)!.owner);
    expect(BigInt(after.get(shard)!.epoch)).toBeGreaterThan(BigInt(before.get(shard)!.epoch));
  }

  // The stream goes on to b's former shards at their new owners, then ends.
  const atLeave = s.count;
  await until(() => s.count >= atLeave + 60, { timeoutMs: 30_000, what: 'the stream to go on after b left' });
  await s.stop();

  // SIGTERM makes c leave the same way (its shards go to a) before it exits; then a stops.
  await c.stop();
  expect(c.exited).toBe(0);
  expect(
    c.lines
      .filter((l) => l.ev === 'leaving')
      .map((l) => l.step)
      .slice(-3),
  ).toEqual(['forward-held', 'leave', 'left']);
  await a.stop();
  expect(a.exited).toBe(0);
  const report = await sharedJournalHistory(run.dir, SHARDS);
  expect(report.problems).toEqual([]);
  // Exactly once: every acknowledged message consumed by its counter, and nothing else.
  for (const [id, target] of s.acked) expect(report.consumed.get(target)?.has(id), id).toBe(true);
  expect(report.macrosteps).toBe(s.acked.size);
  // At most one writer per (shard, epoch): each epoch in a journal was held by one node only.
  const held = holders(run.procs);
  for (const [shard, epochs] of report.epochs) {
    for (const e of epochs) {
      const nodes = held.get(`${shard}@${e}`) ?? new Set();
      expect(nodes.size, `shard ${shard} epoch ${e} held by ${[...nodes].join(',')}`).toBeLessThanOrEqual(1);
    }
  }
  // b's shards were written at b's epoch and at a greater one after the hand-over.
  const written = bShards.filter((shard) => (report.epochs.get(shard)?.length ?? 0) >= 2);
  expect(written.length).toBeGreaterThan(0);
  for (const shard of written) {
    const epochs = report.epochs.get(shard)!;
    expect(epochs.at(-1)! > BigInt(before.get(shard)!.epoch)).toBe(true);
  }
}

describe.skipIf(!built)('leaving with a drain, in node processes (static authority, shared store)', () => {
  const run = new ProcRun();
  afterAll(() => run.cleanup(), 120_000);

  it('cluster leave: b drains, hands its shards over at greater epochs and exits 0; every message once', async () => {
    await leaveScenario(run);
  }, 180_000);
});

describe.skipIf(!built)('leaving with per-node journals, in node processes (replication factor 1)', () => {
  const run = new ProcRun();
  afterAll(() => run.cleanup(), 120_000);

  it('cluster leave is refused and the node keeps serving; SIGTERM stops it without leaving', async () => {
    const files = await initProcCluster(run, 'plexus-leave-pernode-', { shards: 8, nodes: ['a', 'b'] });
    for (const id of ['a', 'b']) run.procs.push(new NodeProc(id, files.get(id)!));
    const [a, b] = run.procs as [NodeProc, NodeProc];
    for (const p of run.procs) await p.wait((l) => l.ev === 'held' && l.held.length > 0, 'leases', 30_000);
    const held = (await b.cmd({ cmd: 'status' })).held as Line[];
    expect(held.length).toBeGreaterThan(0);
    const r = await runNode(CLI, ['leave', '--config', files.get('b')!], { timeoutMs: 60_000 });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('PLX_CLUSTER_REPLICATION_UNSUPPORTED');
    expect(b.lines.some((l) => l.ev === 'leaving')).toBe(false);
    // Nothing changed: b still holds its shards and serves them.
    const st = await a.cmd({ cmd: 'status' });
    expect(st.members.find((m: Line) => m.id === 'b')?.status).toBe('alive');
    const shard = held[0]!.shard as number;
    expect(st.leases.find((l: Line) => l.shard === shard)?.owner).toBe('b');
    await b.stop();
    expect(b.exited).toBe(0);
    expect(b.lines.find((l) => l.ev === 'leave-refused')?.code).toBe('PLX_CLUSTER_REPLICATION_UNSUPPORTED');
  }, 120_000);
});

describe.skipIf(!built || !etcdAvailable)(
  'leaving with a drain, in node processes (etcd membership; skipped without etcd on PATH)',
  () => {
    let etcd: EtcdCluster | undefined;
    const run = new ProcRun();
    beforeAll(async () => {
      etcd = await startEtcd();
    }, 60_000);
    afterAll(async () => {
      await run.cleanup();
      await etcd?.stop();
    }, 120_000);

    it('cluster leave: b drains, hands its shards over at greater epochs and exits 0; every message once', async () => {
      await leaveScenario(run, {
        kind: 'etcd',
        endpoints: etcd!.clientUrls,
        prefix: `/plexus-leave/${process.pid}-${Date.now()}/`,
      });
    }, 180_000);
  },
);
