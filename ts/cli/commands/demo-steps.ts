/**
 * Steps of `plexus demo` that show the engines: Raft on real sockets with a failover, and
 * virtual actors journaled on disk and rebuilt by replay. Each step cleans up after itself.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RaftDriver } from '../../raft/net/driver.js';
import { RaftTcpTransport } from '../../raft/net/tcp-transport.js';
import { RaftNode } from '../../raft/node.js';
import { MemoryRaftStorage } from '../../raft/storage.js';
import type { Chart } from '../../runtime/index.js';
import { Node, openJournal } from '../../runtime/index.js';

type Out = (s?: string) => void;

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
  return true;
}

/** Three Raft members over TCP on loopback: elect, replicate, stop the leader, fail over. */
export async function raftStep(out: Out): Promise<boolean> {
  const ids = [1, 2, 3];
  const members: { id: number; node: RaftNode; driver: RaftDriver; transport: RaftTcpTransport; log: string[] }[] = [];
  const transports: RaftTcpTransport[] = [];
  for (const id of ids) {
    transports.push(
      await RaftTcpTransport.start({ id, onMessage: (m) => members[id - 1]?.driver.receive(m), retryMs: 20 }),
    );
  }
  let seed = 12345;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    return seed % n;
  };
  for (const id of ids) {
    const t = transports[id - 1] as RaftTcpTransport;
    for (const p of ids) if (p !== id) t.setPeer(p, (transports[p - 1] as RaftTcpTransport).address);
    const storage = MemoryRaftStorage.bootstrap({ voters: ids, learners: [] });
    const node = new RaftNode({ id, storage, random, preVote: true, checkQuorum: true });
    const log: string[] = [];
    const driver = new RaftDriver({
      node,
      storage,
      send: (ms) => t.send(ms),
      applier: {
        apply: (es) => {
          for (const e of es) if (e.type === 'normal' && e.data.length > 0) log.push(new TextDecoder().decode(e.data));
        },
      },
      tickMs: 20,
      timeoutMs: 5000,
    });
    members.push({ id, node, driver, transport: t, log });
  }
  const leader = () => members.find((m) => m.node.status().role === 'leader' && !stopped.has(m.id));
  const stopped = new Set<number>();
  try {
    for (const m of members) m.driver.start();
    if (!(await until(() => leader() !== undefined, 10_000))) {
      out('      no leader was elected');
      return false;
    }
    const first = leader() as (typeof members)[number];
    out(`      node ${first.id} was elected leader of term ${first.node.status().term}`);
    for (let i = 1; i <= 3; i++) await first.driver.propose(new TextEncoder().encode(`event-${i}`));
    out('      3 entries committed by a majority and applied on every node');
    const t0 = performance.now();
    stopped.add(first.id);
    await first.driver.stop();
    await first.transport.close();
    out(`      node ${first.id} stopped (its process would be gone)`);
    if (!(await until(() => leader() !== undefined, 10_000))) {
      out('      no new leader was elected');
      return false;
    }
    const second = leader() as (typeof members)[number];
    await second.driver.propose(new TextEncoder().encode('event-4'));
    const ms = performance.now() - t0;
    out(
      `      node ${second.id} leads term ${second.node.status().term}; first append acknowledged ${ms.toFixed(0)} ms after the stop`,
    );
    out(`      node ${second.id}'s log: ${second.log.join(', ')} (nothing committed was lost)`);
    return second.log.length === 4;
  } finally {
    for (const m of members) {
      if (!stopped.has(m.id)) {
        await m.driver.stop();
        await m.transport.close();
      }
    }
  }
}

interface Counter {
  readonly count: number;
  readonly total: number;
}

/** Actors journaled on disk: a node stops, a new one replays them from the journal. */
export async function actorStep(out: Out): Promise<boolean> {
  const dir = mkdtempSync(join(tmpdir(), 'plexus-demo-actors-'));
  const counter: Chart<Counter> = {
    initial: () => ({ count: 0, total: 0 }),
    transition: (s, e) => ({
      state: { count: s.count + 1, total: s.total + Number((e.data as { amount?: number } | undefined)?.amount ?? 0) },
    }),
  };
  try {
    let storage = await openJournal(dir, { shardCount: 16 });
    let node = Node.builder(storage).chart('vt:accounts/', counter).build();
    const n = 200;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: n }, (_, i) =>
        node.send(`vt:accounts/${i % 20}`, 'deposit', { id: `d-${i}`, data: { amount: 5 } }),
      ),
    );
    const ms = performance.now() - t0;
    await node.send('vt:accounts/0', 'deposit', { id: 'd-0', data: { amount: 5 } });
    out(`      ${n} deposits to 20 actors, each a journaled macrostep (fsync'd): ${ms.toFixed(0)} ms`);
    out('      a retried message id is deduplicated from the journal');
    await node.stop();
    await storage.close();
    storage = await openJournal(dir);
    node = Node.builder(storage).chart('vt:accounts/', counter).build();
    await node.send('vt:accounts/0', 'deposit', { id: 'after-restart', data: { amount: 1 } });
    const s = node.activation('vt:accounts/0')?.currentState as Counter | undefined;
    out(`      after a restart, vt:accounts/0 was rebuilt by replay: ${JSON.stringify(s)}`);
    await node.stop();
    await storage.close();
    return s?.count === 11 && s.total === 51;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
