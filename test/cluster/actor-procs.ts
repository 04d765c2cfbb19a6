/** Cluster nodes as real processes (`plexus cluster node --control` from dist/) for tests. */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { checkHistory, readShard, type ShardHistory } from '../../ts/cluster/history.js';
import { initCluster } from '../../ts/cluster/init.js';
import { shardOf } from '../../ts/core/index.js';
import { openJournalShards } from '../../ts/runtime/journal-dir.js';
import { shardDir } from '../../ts/runtime/log-journal.js';
import { openLog } from '../../ts/storage/index.js';
import { freePorts } from '../helpers/ports.js';
import { type Started, startNode, stopStarted } from '../helpers/processes.js';
import { until } from '../helpers/until.js';

export const CLI = fileURLToPath(new URL('./fixtures/cluster-cli.mjs', import.meta.url));

export { freePorts };

// biome-ignore lint/suspicious/noExplicitAny: JSON lines
export type Line = Record<string, any>;

/**
 * A cluster node started through the shared `startNode` (tracked by PID, stopped by
 * `stopStarted()` whatever the test did), with its JSON control lines parsed as they come.
 */
export class NodeProc {
  readonly proc: Started;
  readonly lines: Line[] = [];
  private q = 0;
  private waiters: { pred: (l: Line) => boolean; resolve: (l: Line) => void }[] = [];
  exited?: number | null;
  readonly exit: Promise<number | null>;

  constructor(
    readonly id: string,
    readonly config: string,
  ) {
    this.proc = startNode(CLI, ['node', '--config', config, '--control']);
    let buf = '';
    this.child.stdout?.on('data', (d: string | Buffer) => {
      buf += d.toString();
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const text = buf.slice(0, i);
        buf = buf.slice(i + 1);
        let l: Line;
        try {
          l = JSON.parse(text) as Line;
        } catch {
          continue;
        }
        this.lines.push(l);
        this.waiters = this.waiters.filter((w) => {
          if (!w.pred(l)) return true;
          w.resolve(l);
          return false;
        });
      }
    });
    this.exit = this.proc.exited.then(({ code }) => {
      this.exited = code;
      return code;
    });
  }

  get child(): ChildProcess {
    return this.proc.child;
  }

  get stderr(): string {
    return this.proc.stderr();
  }

  wait(pred: (l: Line) => boolean, what: string, ms = 15_000): Promise<Line> {
    const found = this.lines.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const t = setTimeout(
        () => reject(new Error(`node ${this.id}: timed out waiting for ${what}; stderr: ${this.stderr.slice(-500)}`)),
        ms,
      );
      this.waiters.push({
        pred,
        resolve: (l) => {
          clearTimeout(t);
          resolve(l);
        },
      });
    });
  }

  cmd(c: Line, ms = 15_000): Promise<Line> {
    const q = ++this.q;
    this.child.stdin?.write(`${JSON.stringify({ ...c, q })}\n`);
    return this.wait((l) => l.q === q, `reply to ${c.cmd}`, ms);
  }

  /** Writes a command without waiting (e.g. to a stopped process). */
  queue(c: Line): number {
    const q = ++this.q;
    this.child.stdin?.write(`${JSON.stringify({ ...c, q })}\n`);
    return q;
  }

  /** Sends `sig` to its PID while it runs (SIGSTOP, SIGCONT, SIGKILL, ...). */
  signal(sig: NodeJS.Signals): void {
    if (this.proc.running()) process.kill(this.proc.pid, sig);
  }

  /** Resumes it if stopped, then SIGTERM, SIGKILL after 30 s; resolves once it has exited. */
  async stop(): Promise<void> {
    this.signal('SIGCONT');
    await this.proc.stop('SIGTERM', 30_000);
    await this.exit;
  }
}

/** Rewrites fields of a node's config file. */
export async function patchConfig(file: string, patch: Line): Promise<void> {
  const cfg = JSON.parse(await readFile(file, 'utf8')) as Line;
  await writeFile(file, JSON.stringify({ ...cfg, ...patch }, null, 2));
}

export function dataDirOf(clusterDir: string, node: string): string {
  return join(clusterDir, 'nodes', node, 'data');
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The node processes and the cluster directory of one test file; `cleanup` (in afterAll) stops and removes them. */
export class ProcRun {
  readonly procs: NodeProc[] = [];
  dir = '';

  async cleanup(): Promise<void> {
    for (const p of this.procs) await p.stop();
    await stopStarted();
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}

type InitOptions = Parameters<typeof initCluster>[0];

/**
 * The files of a cluster `c1` in a fresh temporary directory (kept in `run.dir`), with the
 * timings the process tests share unless `opts` overrides them.
 */
export async function initProcCluster(
  run: ProcRun,
  prefix: string,
  opts: { shards: number; nodes: string[] } & Partial<Omit<InitOptions, 'dir' | 'ports'>>,
): Promise<Map<string, string>> {
  run.dir = await mkdtemp(join(tmpdir(), prefix));
  return initCluster({
    id: 'c1',
    lease: { ttlMs: 1500, safetyMarginMs: 300, renewEveryMs: 400 },
    detector: { suspectAfterMs: 600, failedAfterMs: 1500 },
    heartbeatEveryMs: 100,
    cluster: { deliveryDeadlineMs: 30_000, retryBackoffMs: 50 },
    ...opts,
    dir: run.dir,
    ports: await freePorts(opts.nodes.length),
  });
}

/** `p`'s status once it lists a lease of every one of `shards` shards; fails after `timeoutMs`. */
export async function statusWithAllLeases(p: NodeProc, shards: number, timeoutMs = 10_000): Promise<Line> {
  return until(
    async () => {
      const st: Line = await p.cmd({ cmd: 'status' });
      return st.leases.length >= shards && st;
    },
    { timeoutMs, what: `a status of node ${p.id} with a lease of each of ${shards} shards` },
  );
}

/**
 * The checked history of `shards` in `node`'s journal (read without an fsync); a shard the
 * store holds no journal of is skipped, or refused with `required`.
 */
export async function journalHistory(
  clusterDir: string,
  node: string,
  shards: readonly number[],
  required = false,
): Promise<ReturnType<typeof checkHistory>> {
  const stores = await openJournalShards(join(dataDirOf(clusterDir, node), 'journal'), { fsync: 'never' });
  try {
    const histories: ShardHistory[] = [];
    for (const s of shards) {
      const log = await stores.shard(s);
      if (log !== undefined) histories.push(await readShard(s, log));
      else if (required) throw new Error(`node ${node} holds no journal of shard ${s}`);
    }
    return checkHistory(histories);
  } finally {
    await stores.close();
  }
}

/** The checked history of every shard in a `shared` journal layout (`<clusterDir>/shared`). */
export async function sharedJournalHistory(
  clusterDir: string,
  shardCount: number,
): Promise<ReturnType<typeof checkHistory>> {
  const histories: ShardHistory[] = [];
  for (let s = 0; s < shardCount; s++) {
    const d = shardDir(join(clusterDir, 'shared'), s);
    if (!existsSync(d)) continue;
    const log = await openLog(d);
    try {
      histories.push(await readShard(s, log));
    } finally {
      await log.close();
    }
  }
  return checkHistory(histories);
}

/** The first IRI `<prefix><i>` that falls in shard `s` of `shards`. */
export function iriIn(prefix: string, s: number, shards: number): string {
  for (let i = 0; ; i++) if (shardOf(`${prefix}${i}`, shards) === s) return `${prefix}${i}`;
}

/** shard -> owner and epoch (decimal) of a node's `status` line. */
export function owners(st: Line): Map<number, { owner: string; epoch: string }> {
  return new Map(st.leases.map((l: Line) => [l.shard, { owner: l.owner, epoch: l.epoch }]));
}

/**
 * Pauses `owner` (SIGSTOP) past its lease on shard `shard` (held at `epoch`; its lease clock
 * runs slow, so resumed it still believes it holds the shard): once `asker`'s status shows the
 * shard at another node with a higher epoch, that node processes a message to an actor of the
 * shard; then three sends and a frame are queued at `owner` and it is resumed (SIGCONT). Its
 * appends reach the shared store with the old epoch: the first is refused
 * (PLX_RUNTIME_JOURNAL_FAILED caused by PLX_CLUSTER_FENCED) and the frame answered `stale`.
 * Acknowledged ids go into `acked` (id -> actor); resolves with the actor and the refused ids.
 */
export async function fencePausedOwner(o: {
  readonly asker: NodeProc;
  readonly owner: NodeProc;
  readonly nodes: readonly NodeProc[];
  readonly shard: number;
  readonly epoch: bigint;
  readonly shards: number;
  readonly acked: Map<string, string>;
}): Promise<{ actor: string; refused: Set<string> }> {
  const { owner: b, shard: sF, epoch: e1, acked } = o;
  const actor = iriIn('vt:relay/z', sF, o.shards);
  expect((await b.cmd({ cmd: 'send', target: actor, event: 'ping', id: 'before' })).result).toBe('processed');
  acked.set('before', actor);
  b.signal('SIGSTOP');
  let moved: { owner: string; epoch: string } | undefined;
  await until(
    async () => {
      moved = owners(await o.asker.cmd({ cmd: 'status' })).get(sF);
      return moved !== undefined && moved.owner !== b.id && BigInt(moved.epoch) > e1;
    },
    { timeoutMs: 30_000, what: `the shard to move off ${b.id} with a higher epoch` },
  );
  const taker = o.nodes.find((n) => n.id === moved?.owner) as NodeProc;
  expect((await taker.cmd({ cmd: 'send', target: actor, event: 'ping', id: 'after' }, 30_000)).result).toBe(
    'processed',
  );
  acked.set('after', actor);
  // Queued while b is stopped: b takes them before a heartbeat answer tells it the lease is
  // gone, so its appends reach the store with epoch e1, and its frame carries e1.
  const qSends = [1, 2, 3].map((k) => b.queue({ cmd: 'send', target: actor, event: 'ping', id: `stale-${k}` }));
  const qFrame = b.queue({ cmd: 'frame', to: taker.id, shard: sF, target: iriIn('vt:counter/zombie', sF, o.shards) });
  b.signal('SIGCONT');
  const staleSends = await Promise.all(qSends.map((q) => b.wait((l) => l.q === q, 'stale send', 30_000)));
  const refused = new Set<string>();
  staleSends.forEach((r, k) => {
    if (r.result === 'processed') acked.set(`stale-${k + 1}`, actor);
    else refused.add(`stale-${k + 1}`);
  });
  expect(staleSends[0]?.error).toBe('PLX_RUNTIME_JOURNAL_FAILED');
  expect(staleSends.some((r) => r.cause === 'PLX_CLUSTER_FENCED')).toBe(true);
  const frame = await b.wait((l) => l.q === qFrame, 'stale frame', 30_000);
  expect(frame).toMatchObject({ verdict: 'stale', epoch: `${e1}` });
  return { actor, refused };
}
