/**
 * A step of `plexus demo` that shows the actor runtime: virtual actors journaled on disk and
 * rebuilt by replay. It cleans up after itself. (The Chronacta failover step, which shows Raft
 * at work across processes, is in demo-chronacta.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Chart } from '../../runtime/index.js';
import { Node, openJournal } from '../../runtime/index.js';

type Out = (s?: string) => void;

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
